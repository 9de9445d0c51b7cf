"""Prompts, one module per prompt, each with a PROMPT_VERSION constant and a golden test of its exact text."""

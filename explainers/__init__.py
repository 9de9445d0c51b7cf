"""LLM client, example sampling, versioned prompts, and the lexical, one-shot, tree and PRISM explainers."""

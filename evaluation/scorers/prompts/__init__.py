"""Versioned prompts of the scorers: LLM simulator, detection, fuzzing, CoSy text generator, rule complexity.

Each module holds a version constant and a pure builder returning chat messages; tests/evaluation/scorers/test_scorers_prompts.py
pins the exact text (golden tests). Change a prompt ⇒ bump its version, so stored scores stay comparable.
"""

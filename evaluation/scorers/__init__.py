"""Scoring stage: the scorer protocol, registry, score job (local and Ray), one module per scorer, their prompts and the report."""

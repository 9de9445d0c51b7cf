"""The Streamlit feature browser (stage: browse): pages → `queries.py` (read-only, cached) → store; the one write is
`hypotheses.py`, the Playground's model runs `live_model.py`, the command lines shown for empty parts `commands.py`."""

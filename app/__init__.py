"""The Streamlit feature browser; pages import only the read-only query layer."""

"""sae-workbench core: model loading, corpora, activation caching, the feature store and the CLI."""

__version__ = "0.1.0"

"""sae-workbench core (the pipeline's inputs): errors, defaults, paths, model loading, corpora and windows, sentence
embeddings. Stages: cache `activation_cache/` → train, index `sae/` → store `store/` → explain `explainers/` →
score, absorption `evaluation/` → browse `app/`; the command line `cli/`."""

__version__ = "0.1.0"

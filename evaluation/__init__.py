"""Evaluation stages, one sub-package each: scorers, absorption, reproductions of papers' tables, attribution, interactions."""

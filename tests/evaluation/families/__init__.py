"""Tests of SAE families (issue 36)."""

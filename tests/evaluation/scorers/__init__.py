"""Tests of evaluation/scorers/."""

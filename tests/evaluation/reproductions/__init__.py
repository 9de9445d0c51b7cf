"""Tests of evaluation/reproductions/."""

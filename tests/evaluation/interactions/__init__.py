"""Tests of evaluation/interactions/."""

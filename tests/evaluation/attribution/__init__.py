"""Tests of evaluation/attribution/."""

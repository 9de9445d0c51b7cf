"""Tests of evaluation/absorption/."""

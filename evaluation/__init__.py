"""Simulators and scorers, polysemanticity, feature absorption, and exports in peers' formats."""

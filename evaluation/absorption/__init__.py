"""Absorption stage: first-letter probes, the absorption metric, the toy model check and the SAEBench JSON export."""

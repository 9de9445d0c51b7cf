"""The examples substrate shared by explainers and scorers: records, rules, example and negative sampling, and the one test-set module."""

"""The examples substrate between indexing and the explain/score stages: records, rules, example and negative sampling, and the one test-set module."""

"""Reproductions of papers' tables (PRISM Table 1, the tree paper's rule-cap sweep) from the stages below."""

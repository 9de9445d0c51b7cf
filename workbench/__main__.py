"""`python -m sae_workbench` — same as the `workbench` console script."""

from sae_workbench.cli import main

main()

"""`python -m workbench` — same as the `workbench` console script."""

from workbench.cli import main

main()

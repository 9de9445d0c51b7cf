"""The script `workbench app` hands to `streamlit run` (by path; this folder holds nothing else).

Streamlit puts the entry script's folder on sys.path[0]. Were that `sae_workbench/app/`, its modules (`settings`,
`ui`, `render`, ...) would become top-level modules of the server process; this folder has no other module, and the
script drops it from sys.path before importing the app as `sae_workbench.app`.
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

from sae_workbench.app.main import main  # noqa: E402  (after the sys.path fix, on purpose)

main()

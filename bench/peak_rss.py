"""Run a Python module or script and, when it exits, write its peak resident memory (VmHWM, MiB) to a file.

    python -m bench.peak_rss OUT.txt -m bench.store_bench --rows 1000      # or: OUT.txt path/to/script.py ARGS

Why not wait4's ru_maxrss: on Linux a forked child starts with its parent's high-water mark (and exec keeps it in
the process's maxrss), so a benchmark started from a large parent (pytest, a notebook) would report the parent's
memory. VmHWM belongs to the benchmark's own address space after exec. Helper processes it starts are not included.
"""

from __future__ import annotations

import atexit
import runpy
import sys
from pathlib import Path


def vm_hwm_mib() -> float:
    """Peak resident set size of this process in MiB, from /proc/self/status (0.0 where unavailable)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def main() -> None:
    """Parse `OUT [-m MODULE | SCRIPT] ARGS...`, register the exit hook, run the target as __main__."""
    out, target = Path(sys.argv[1]), sys.argv[2:]
    atexit.register(lambda: out.write_text(f"{vm_hwm_mib():.1f}\n"))
    if target[0] == "-m":
        sys.argv = [target[1], *target[2:]]
        runpy.run_module(target[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = target
        runpy.run_path(target[0], run_name="__main__")


if __name__ == "__main__":
    main()

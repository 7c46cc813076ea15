"""The kernel evalkit executes its notebooks in: ipykernel's, without the debugger no one attaches
to a notebook papermill runs, ending without a last walk of the cycle collector over everything
the notebook imported.

`evalkit.notebooks` starts it as ``python -m evalkit.kernel -f <connection file>``, which is
``python -m ipykernel_launcher`` plus one line: once the kernel has been told to shut down and
its loop has stopped, what is still alive is frozen (`gc.freeze`) before the exit handlers run.
IPython's exit-time reset collects every generation, and so does the interpreter as it
finalizes; over the modules and objects of a gate notebook (Altair, Polars, great_tables,
scipy, evalkit: several hundred thousand objects) that was a sizeable part of a gate kernel's
CPU (`python bench/bench_gate_phases.py` shows the kernel's share), to free what the end of the
process frees anyway.
Nothing a cell computed changes: papermill, in the process that started the kernel, has the
executed notebook before it asks the kernel to shut down.

ipykernel imports debugpy as it starts, to offer a debugger to a front end; here ``debugpy`` is
made unimportable first, which ipykernel takes as "no debugger". A kernel's fixed cost (a
two-cell notebook through papermill, kernel CPU, medians of three rounds of 8 alternating):
0.34 -> 0.23 s.
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path


def main() -> None:
    """Run ipykernel in this process until it is told to shut down; then freeze the heap."""
    # as ipykernel_launcher: the working directory off sys.path while ipykernel imports (the
    # kernel puts it back for the notebook's cells)
    if sys.path and (sys.path[0] == "" or Path(sys.path[0]) == Path.cwd()):
        del sys.path[0]
    # No debugger: these kernels run headless under papermill, where no client attaches one,
    # and ipykernel imports debugpy at start-up to offer it (an ImportError means "no debugger")
    sys.modules.setdefault("debugpy", None)  # type: ignore[arg-type]
    from ipykernel import kernelapp

    kernelapp.launch_new_instance()
    gc.freeze()


if __name__ == "__main__":
    main()

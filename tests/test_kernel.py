"""evalkit.kernel: ipykernel without its debugger, then the heap frozen before the exit-time
collections."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

#: `evalkit.kernel.main` in a process of its own, with ipykernel's launcher stood in for by a
#: stub that notes what it saw (importing the real ipykernel into a test worker makes tqdm,
#: which Ray imports later, take the worker for a notebook and warn).
_RUN = """
import gc, json, os, sys, types
seen = []

def launch_new_instance():
    try:
        import debugpy  # noqa: F401  (what ipykernel.debugger tries at start-up)
        debugger = True
    except ImportError:
        debugger = False
    seen.append([gc.get_freeze_count(), sys.path[0], debugger])

app = types.ModuleType("ipykernel.kernelapp")
app.launch_new_instance = launch_new_instance
package = types.ModuleType("ipykernel")
package.kernelapp = app
sys.modules.update({"ipykernel": package, "ipykernel.kernelapp": app})
from evalkit import kernel
sys.path[:0] = [os.getcwd(), "/the/next/entry"]
kernel.main()
print(json.dumps({"seen": seen, "frozen": gc.get_freeze_count()}))
"""


def test_the_kernel_runs_ipykernel_then_freezes_what_is_alive() -> None:
    # debugpy is installed (ipykernel requires it): only evalkit.kernel makes it unimportable
    assert importlib.util.find_spec("debugpy") is not None
    done = subprocess.run(
        [sys.executable, "-c", _RUN], capture_output=True, text=True, check=True, timeout=60
    )
    result = json.loads(done.stdout)
    # ipykernel ran unfrozen, without the working directory first on sys.path (as
    # ipykernel_launcher) and without debugpy to import; once it returned, everything alive was
    # frozen
    assert result["seen"] == [[0, "/the/next/entry", False]]
    assert result["frozen"] > 1000

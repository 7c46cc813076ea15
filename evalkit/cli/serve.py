"""``evalkit demo serve --detach``: start the simulator in the background, print shell exports.

``eval "$(evalkit demo serve --port 0 --detach)"`` leaves a simulator running on a free port and
sets ``EVALKIT_DEMO_URL`` (its ``/v1`` base URL) and ``EVALKIT_DEMO_PID``. The command returns
only once the server answers, and fails loudly (exit 2) when it cannot listen, so a copy-pasted
tour never talks to whatever else holds the port.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

_STARTUP_S = 30.0


def serve_detached(argv: Sequence[str]) -> int:
    """Start ``evalkit demo serve ARGV`` detached; print ``export`` lines once it is ready."""
    from evalkit.demo.server import READY_PREFIX

    log = Path(tempfile.mkstemp(prefix="evalkit-demo-", suffix=".log")[1])
    package_dir = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_dir, env.get("PYTHONPATH")]))
    with open(log, "w") as out, open(os.devnull) as devnull:
        process = subprocess.Popen(
            [sys.executable, "-m", "evalkit.demo.server", *argv],
            stdin=devnull,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # outlives this shell command; stop it with kill PID
        )
    deadline = time.monotonic() + _STARTUP_S
    while True:
        text = log.read_text(errors="replace")
        ready = [line for line in text.splitlines() if line.startswith(READY_PREFIX)]
        if ready:
            url = ready[0][len(READY_PREFIX) :].strip()
            break
        if process.poll() is not None or time.monotonic() > deadline:
            if process.poll() is None:
                process.kill()
            said = " ".join(text.split()) or f"exit code {process.poll()}"
            print(f"evalkit: error: the demo simulator did not start: {said}", file=sys.stderr)
            log.unlink(missing_ok=True)
            return 2
        time.sleep(0.05)
    print(f"export EVALKIT_DEMO_URL={shlex.quote(url)} EVALKIT_DEMO_PID={process.pid}")
    print(
        f"# demo simulator (not an LLM) at {url}, pid {process.pid}, log {log}; "
        "stop it with: kill $EVALKIT_DEMO_PID",
        file=sys.stderr,
    )
    return 0

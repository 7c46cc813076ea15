"""Phase marks of one ``evalkit run`` on stderr, for ``bench/bench_process.py timeline``.

With ``EVALKIT_TIMELINE=1`` in the environment each :func:`mark` prints one line
``evalkit-timeline <phase> <CLOCK_MONOTONIC seconds>`` to stderr. The clock is the system-wide
monotonic one, so the benchmark that launched the process can subtract its own launch time
from it. Unset (the default) a mark is one global read and a return: nothing is printed,
nothing is imported.

Examples:
    >>> mark("corpus")  # prints only under EVALKIT_TIMELINE=1
"""

from __future__ import annotations

import os
import sys
import time

#: Read once at import: a run never changes whether it is timed.
ENABLED = os.environ.get("EVALKIT_TIMELINE", "") not in ("", "0")
PREFIX = "evalkit-timeline"


def mark(phase: str) -> None:
    """Print ``phase`` and the monotonic time to stderr, when the timeline is on."""
    if ENABLED:
        sys.stderr.write(f"{PREFIX} {phase} {time.monotonic():.6f}\n")
        sys.stderr.flush()

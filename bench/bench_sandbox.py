"""What the python_tests sandbox costs per case: namespaces, the seccomp filter and the cgroup,
against the same code run unisolated (``sandbox: unsafe-local``).

    .venv/bin/python bench/bench_sandbox.py --runs 20

The two modes alternate, run by run, so both see the same drift in the machine's load. Prints
the median wall time per run of each mode, their ratio and the load average (2 shared cores:
read the ratio, not the seconds).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

from evalkit.scorers import sandbox

CODE = "def add(a, b):\n    return a + b\n"
TESTS = "def test_add():\n    assert add(1, 2) == 3\n"


def _one_s(isolation: str) -> float:
    started = time.perf_counter()
    result = sandbox.run_python(CODE, TESTS, timeout_s=10, isolation=isolation)
    seconds = time.perf_counter() - started
    assert result.status == "ok", result
    return seconds


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args(argv)
    problem = sandbox.isolation_problem()
    if problem:
        raise SystemExit(f"no isolation here: {problem}")
    load_before = os.getloadavg()[0]
    times: dict[str, list[float]] = {sandbox.ISOLATED: [], sandbox.UNSAFE_LOCAL: []}
    for _ in range(args.runs):
        for isolation, seconds in times.items():
            seconds.append(_one_s(isolation))
    isolated = statistics.median(times[sandbox.ISOLATED])
    local = statistics.median(times[sandbox.UNSAFE_LOCAL])
    figures = {
        "runs": args.runs,
        "isolated_s": isolated,
        "unsafe_local_s": local,
        "ratio": isolated / local,
        "cores": os.cpu_count(),
        "loadavg_1min": [load_before, os.getloadavg()[0]],
    }
    print(f"budget: {sandbox.isolation_description()['budget']['processes']}")
    print(f"isolated (namespaces + seccomp + cgroup): {isolated * 1000:.0f} ms per run")
    print(f"unsafe-local:                             {local * 1000:.0f} ms per run")
    print(
        f"ratio: {isolated / local:.2f}x (medians of {args.runs} alternating runs; load "
        f"{figures['loadavg_1min'][0]:.1f} -> {figures['loadavg_1min'][1]:.1f} on "
        f"{figures['cores']} cores)"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

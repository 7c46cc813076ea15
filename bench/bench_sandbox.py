"""What the python_tests sandbox costs per case: namespaces, the seccomp filter and the cgroup,
against the same code run unisolated (``sandbox: unsafe-local``).

    .venv/bin/python bench/bench_sandbox.py --runs 20

Prints the median wall time per run of each mode and their ratio (2 shared cores: read the
ratio, not the seconds).
"""

from __future__ import annotations

import argparse
import statistics
import time

from evalkit.scorers import sandbox

CODE = "def add(a, b):\n    return a + b\n"
TESTS = "def test_add():\n    assert add(1, 2) == 3\n"


def _median_s(isolation: str, runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        result = sandbox.run_python(CODE, TESTS, timeout_s=10, isolation=isolation)
        times.append(time.perf_counter() - started)
        assert result.status == "ok", result
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    runs = parser.parse_args().runs
    problem = sandbox.isolation_problem()
    if problem:
        raise SystemExit(f"no isolation here: {problem}")
    isolated = _median_s(sandbox.ISOLATED, runs)
    local = _median_s(sandbox.UNSAFE_LOCAL, runs)
    print(f"budget: {sandbox.isolation_description()['budget']['processes']}")
    print(f"isolated (namespaces + seccomp + cgroup): {isolated * 1000:.0f} ms per run")
    print(f"unsafe-local:                             {local * 1000:.0f} ms per run")
    print(f"ratio: {isolated / local:.2f}x")


if __name__ == "__main__":
    main()

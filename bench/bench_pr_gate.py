"""A pull request's gate job two ways: running the baseline itself, or pulling the team's.

The CI example (``examples/github-actions/evalkit.yml``) gates a pull request against the pin.
Without a team store the job runs the base branch, promotes it and runs the candidate: two
runs. With one (``store.shared``), main's nightly job has already run, promoted and pushed the
baseline, and the pull-request job pulls it and runs only the candidate. Both are timed here
step by step as fresh ``evalkit`` processes (wall, and CPU of the process and its children),
on the repository's demo corpus against the demo simulator with ``--latency-ms`` per request:

* ``two runs``  ``run --label base``, ``baseline promote base``, ``run --label candidate
  --prompt v2.md``, ``gate candidate --allow-diff prompt``, into an empty local store;
* ``one run``   ``pull baseline --store URI``, the same candidate run and gate,
  into another empty local store, after (untimed) the nightly job's ``run``, ``baseline
  promote`` and ``push`` into a shared store on a SQLite catalog and a directory warehouse.

Printed: each step, each job's total, the requests the simulator served per job, and both
gates' decision lines (the same decision is the point: the pin is the same run either way).
Rounds alternate the two jobs. No asserts.

Usage:
    .venv/bin/python bench/bench_pr_gate.py
    .venv/bin/python bench/bench_pr_gate.py --latency-ms 200 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "corpus" / "evalkit.yaml"
#: The pull request's change: the demo's second prompt (the CI example gates with
#: ``--allow-diff prompt``); with the base's own prompt the candidate would be served wholly
#: from the base run's cache in the two-run job.
CANDIDATE = ["run", "--label", "candidate", "--prompt", str(REPO / "corpus" / "prompts" / "v2.md")]
GATE = ["gate", "candidate", "--allow-diff", "prompt"]


def _cpu_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def step(args: list[str], url: str, db: Path, out: Path) -> tuple[float, float, str]:
    """One ``evalkit`` process: (wall s, CPU s of it and its children, its last stdout line)."""
    endpoint = ["--set", f"system.base_url={url}", "--set", f"judge.base_url={url}"]
    uses_endpoint = args[0] in ("run", "gate")
    command = [sys.executable, "-m", "evalkit.cli", *args, "--config", str(CONFIG),
               "--db", str(db), *(endpoint if uses_endpoint else [])]  # fmt: skip
    if args[0] in ("run",):
        command.append("--no-progress")
    if args[0] == "gate":
        command += ["--out", str(out)]
    cpu, wall = _cpu_children(), time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=db.parent)
    wall, cpu = time.perf_counter() - wall, _cpu_children() - cpu
    if done.returncode not in (0, 1) or (done.returncode == 1 and args[0] != "gate"):
        raise SystemExit(f"{' '.join(args)}: exit {done.returncode}\n{done.stderr[-3000:]}")
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    return wall, cpu, lines[0] if args[0] == "gate" and lines else ""


def job(name: str, steps: list[list[str]], server, url: str, folder: Path) -> dict:
    db = folder / f"{name}.duckdb"
    server.reset_stats()
    figures, decision = [], ""
    for args in steps:
        wall, cpu, line = step(args, url, db, folder / f"{name}-reports")
        shown = " ".join(a for a in args if not a.startswith(("sqlite", "/")))
        figures.append((shown[:38], wall, cpu))
        decision = line or decision
    return {"steps": figures, "requests": int(server.stats()["requests"]), "decision": decision}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    from evalkit.demo.server import start_demo_server

    results: dict[str, list[dict]] = {"two runs": [], "one run": []}
    load = [os.getloadavg()[0]]
    with (
        tempfile.TemporaryDirectory(prefix="bench-pr-gate-") as tmp,
        start_demo_server(noise=False, latency_ms=args.latency_ms) as server,
    ):
        folder, url = Path(tmp), server.base_url
        store = f"sqlite:///{folder / 'team' / 'catalog.db'}?warehouse={folder / 'team' / 'wh'}"
        nightly = folder / "nightly.duckdb"
        for nightly_step in (["run", "--label", "nightly"],
                             ["baseline", "promote", "nightly", "--who", "ci", "--reason", "night"],
                             ["push", "nightly", "--store", store]):  # fmt: skip
            step(nightly_step, url, nightly, folder)
        two = [["run", "--label", "base"],
               ["baseline", "promote", "base", "--who", "ci", "--reason", "base branch"],
               CANDIDATE, GATE]  # fmt: skip
        one = [["pull", "baseline", "--store", store], CANDIDATE, GATE]
        for i in range(args.rounds):
            order = [("two runs", two), ("one run", one)]
            for name, steps in order if i % 2 == 0 else order[::-1]:
                tag = f"{name.replace(' ', '-')}-{i}"
                results[name].append(job(tag, steps, server, url, folder))
    load.append(os.getloadavg()[0])
    print(f"a pull request's gate job on the demo corpus (91 cases), {args.latency_ms:g} ms per "
          f"request, median of {args.rounds}; load {load[0]:.1f} -> {load[1]:.1f} on "
          f"{os.cpu_count()} cores")  # fmt: skip
    totals = {}
    for name, runs in results.items():
        print(f"{name}:")
        for k, (label, _, _) in enumerate(runs[0]["steps"]):
            wall = statistics.median(r["steps"][k][1] for r in runs)
            cpu = statistics.median(r["steps"][k][2] for r in runs)
            print(f"  {label:40} {wall:6.2f} s wall  {cpu:6.2f} s CPU")
        wall = statistics.median(sum(s[1] for s in r["steps"]) for r in runs)
        cpu = statistics.median(sum(s[2] for s in r["steps"]) for r in runs)
        requests = statistics.median(r["requests"] for r in runs)
        totals[name] = (wall, cpu)
        print(f"  {'the job':40} {wall:6.2f} s wall  {cpu:6.2f} s CPU  {requests:.0f} requests")
        print(f"  decision: {sorted({r['decision'] for r in runs})}")
    (w2, c2), (w1, c1) = totals["two runs"], totals["one run"]
    print(f"one run / two runs: {w1 / w2:.2f} of the wall, {c1 / c2:.2f} of the CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())

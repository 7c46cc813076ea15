"""Benchmark: `evalkit.history` over a store of many runs (default 1,000 runs x 10k cases).

The store is filled by DuckDB itself (``INSERT ... SELECT`` over ``range``): ten million outputs
written through the store's API would take far longer than what is measured. The schema is the
store's own (`open_store` creates it). Each run has 10 tags, 2 scorers per output and one
replay (``--replays`` for more); one case in 50 fails and, from run 500 on, one in 200 of the
others is unstable (its replays disagree, when there are several). Each run then records its
history counts as a finishing run does (``Store.record_history``; ``--counted`` skips that, and
history counts every run from its outputs).

    .venv/bin/python bench/bench_history.py                    # 1,000 runs x 10k cases
    .venv/bin/python bench/bench_history.py --runs 50 --cases 1000 --json out.json
    .venv/bin/python bench/bench_history.py --beside-counted   # both ways, one invocation

``--beside-counted`` measures history counting every output first, on the same store before
any run records its counts, then records them and measures again: the ratio of the two comes
from one invocation, under the same load. The load average is printed with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import duckdb

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evalkit.store import open_store
from evalkit.trends.analysis import history

TAGS = 10
PROMOTE_EVERY = 10  # one run in ten is promoted (by="baseline")


def fill(db: Path, runs: int, cases: int, replays: int) -> None:
    """Write ``runs`` complete runs of ``cases`` cases into a new store at ``db``."""
    open_store(db, write=True).close()  # the store's schema
    manifest = json.dumps({"suite": "bench", "model": {"id": "m", "snapshot": "m"},
                           "gate_policy": {"critical_tags": ["tag-0", "tag-1"]}})  # fmt: skip
    con = duckdb.connect(str(db))
    rid = "'run-' || lpad(r::VARCHAR, 5, '0')"
    fail = f"(c % 50 = 7 OR (r >= {runs // 2} AND c % 200 = 3 AND p % 2 = 1))"
    con.execute(f"""
        INSERT INTO runs SELECT {rid}, 'nightly', TIMESTAMPTZ '2026-01-01' + r * INTERVAL 1 HOUR,
            TIMESTAMPTZ '2026-01-01' + r * INTERVAL 1 HOUR, 'cfg', 'complete', '{manifest}', '{{}}'
        FROM range({runs}) t(r);
        INSERT INTO scorings (scoring_id, run_id, created_at, note)
            SELECT {rid} || '/s0', {rid}, TIMESTAMPTZ '2026-01-01', 'run' FROM range({runs}) t(r);
        INSERT INTO baselines (suite, run_id, who, reason, promoted_at)
            SELECT 'bench', {rid}, 'bench', 'nightly',
                   TIMESTAMPTZ '2026-01-01' + r * INTERVAL 1 HOUR
            FROM range(0, {runs}, {PROMOTE_EVERY}) t(r);
        INSERT INTO cases SELECT {rid}, 'case-' || c, 'h', ['tag-' || (c % {TAGS})], 'normal',
            false, '{{}}', '{{}}', 'cases/x.yaml:1', NULL
        FROM range({runs}) a(r), range({cases}) b(c);
        INSERT INTO outputs SELECT {rid}, 'case-' || c, p, NULL, '[]', 1, NULL, NULL,
            100.0 + c % 7, 10, 5, 0.001, false, NULL,
            CASE WHEN r < {runs} * 3 // 4 THEN 'm-0513' ELSE 'm-0806' END, NULL
        FROM range({runs}) a(r), range({cases}) b(c), range({replays}) d(p);
        INSERT INTO scores SELECT {rid}, {rid} || '/s0', 'case-' || c, p, s.name, s.i, 0,
            CASE WHEN s.i = 0 AND {fail} THEN 0.0 ELSE 1.0 END,
            NOT (s.i = 0 AND {fail}), false, NULL, NULL
        FROM range({runs}) a(r), range({cases}) b(c), range({replays}) d(p),
             (VALUES (0, 'contains'), (1, 'json_schema')) s(i, name);
        CHECKPOINT;
    """)  # fmt: skip
    con.close()


def record(db: Path, runs: int) -> float:
    """What each run does when it finishes (``Store.finish_run``): record its history counts.
    Returns the CPU seconds per run."""
    cpu = time.process_time()
    with open_store(db, write=True) as store:
        for r in range(runs):
            store.record_history(f"run-{r:05d}")
    return (time.process_time() - cpu) / runs


def measure(db: Path, rounds: int) -> dict[str, Any]:
    store = open_store(db, read_only=True)
    figures: dict[str, Any] = {}
    # every nightly run; every promotion (one run in ten); the newest 30 nightly runs
    for name, by, last in (("label", "label", None), ("baseline", "baseline", None),
                           ("label_last_30", "label", 30)):  # fmt: skip
        best_wall, best_cpu, result = float("inf"), float("inf"), None
        for _ in range(rounds):
            wall, cpu = time.perf_counter(), time.process_time()
            result = history(store, by=by, last=last)  # type: ignore[arg-type]
            best_wall = min(best_wall, time.perf_counter() - wall)
            best_cpu = min(best_cpu, time.process_time() - cpu)
        assert result is not None
        newest = result.points[-1]
        everything = newest.rate()
        assert everything is not None
        figures[name] = {
            "wall_s": round(best_wall, 3), "cpu_s": round(best_cpu, 3),
            "points": len(result.points), "newest_cases": everything.cases,
            "newest_passed": everything.passed, "newest_unstable": newest.unstable,
            "findings": [f.kind for f in result.findings],
        }  # fmt: skip
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--replays", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--counted", action="store_true", help="no recorded counts: history counts every run"
    )
    parser.add_argument(
        "--beside-counted",
        action="store_true",
        help="measure counting every run first, then with the recorded counts (the ratio)",
    )
    args = parser.parse_args(argv)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="evalkit-bench-history-") as tmp:
        db = Path(tmp) / "history.duckdb"
        start = time.perf_counter()
        fill(db, args.runs, args.cases, args.replays)
        figures: dict[str, Any] = {
            "runs": args.runs, "cases": args.cases, "replays": args.replays,
            "outputs": args.runs * args.cases * args.replays,
            "fill_s": round(time.perf_counter() - start, 1),
            "db_mib": round(db.stat().st_size / 2**20, 1), "cpus": os.cpu_count(),
        }  # fmt: skip
        if args.beside_counted:  # the same store before any run recorded its counts
            figures["counted"] = measure(db, args.rounds)
        if args.counted:  # history counting every run from its outputs (no recorded counts)
            figures["recorded"] = False
        else:
            figures["record_cpu_ms_per_run"] = round(record(db, args.runs) * 1000, 1)
            figures["recorded"] = True
        figures |= measure(db, args.rounds)
        if "counted" in figures and figures["recorded"] and figures["counted"]["label"]["wall_s"]:
            figures["label_vs_counted"] = round(
                figures["label"]["wall_s"] / figures["counted"]["label"]["wall_s"], 4
            )
    figures["loadavg_1min"] = [load_before, os.getloadavg()[0]]
    figures["max_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.write_text(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

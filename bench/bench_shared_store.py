"""Shared-store figures: push and pull of one large run through Iceberg (SQLite catalog, local
directory warehouse), each twice (the second finds everything there and adds nothing).

One run of N cases (default 200,000), one replay, two scorers: N cases + N outputs + 2N score
rows (4N rows in all), written into a fresh local DuckDB store, then

``push``      ``SharedStore.push_run`` into an empty shared store, then again (dedupe only);
``pull``      ``SharedStore.pull`` of the run into another fresh local store, then again.

Each is timed (wall and CPU of this process) and divided by the rows moved. Figures are
printed, never asserted.

Usage:
    .venv/bin/python bench/bench_shared_store.py
    .venv/bin/python bench/bench_shared_store.py --cases 20000 --json figures.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # runnable from a checkout without installing

from evalkit.store import open_store  # noqa: E402
from evalkit.store.shared import open_shared_store  # noqa: E402


@dataclass(frozen=True)
class _Case:
    id: str
    hash: str
    tags: tuple[str, ...] = ("general",)
    criticality: str = "normal"
    sealed: bool = False
    provenance: dict[str, Any] = field(default_factory=dict)
    source: str = "cases/bench.yaml:1"

    def input_json(self) -> str:
        return json.dumps({"messages": [{"role": "user", "content": f"question {self.id}"}]})


def _write_run(db: Path, run_id: str, n: int) -> None:
    cases = [_Case(f"case-{i:07d}", f"h{i}") for i in range(n)]
    now = dt.datetime.now(dt.UTC)
    ids = [c.id for c in cases]
    outputs = {
        "run_id": [run_id] * n, "case_id": ids, "replay": [0] * n,
        "text": [f"answer to {i}" for i in ids], "tool_calls": ["[]"] * n, "steps": [1] * n,
        "error": [None] * n, "fail_reason": [None] * n, "latency_ms": [100.0] * n,
        "prompt_tokens": [10] * n, "completion_tokens": [5] * n, "cost_usd": [0.001] * n,
        "cached": [False] * n, "request_hash": [f"k{i}" for i in range(n)],
        "model": ["demo-model"] * n, "created_at": [now] * n,
    }  # fmt: skip
    scores = {
        "run_id": [run_id] * 2 * n, "scoring_id": [f"{run_id}/s0"] * 2 * n,
        "case_id": ids * 2, "replay": [0] * 2 * n, "scorer": ["a"] * n + ["b"] * n,
        "scorer_index": [0] * n + [1] * n, "tier": [0] * 2 * n, "score": [1.0] * 2 * n,
        "passed": [True] * 2 * n, "error": [False] * 2 * n, "reason": ["ok"] * 2 * n,
        "details": [None] * 2 * n,
    }  # fmt: skip
    manifest = {"suite": "bench", "config_hash": "cfg", "run": {"run_id": run_id, "label": "b"}}
    with open_store(db) as store:
        store.create_run(manifest, cases)
        store.write_results(outputs, scores)
        store.finish_run(run_id, "complete", {})


def _timed(call: Callable[[], Any]) -> tuple[Any, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = call()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=200_000)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    figures: dict[str, Any] = {"cases": args.cases}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _write_run(root / "local.duckdb", "bench-run", args.cases)
        shared = open_shared_store(f"sqlite:///{root / 'catalog.db'}")
        with open_store(root / "local.duckdb", read_only=True) as local:
            for name in ("push", "push_again"):
                pushed, wall, cpu = _timed(lambda: shared.push_run(local, "bench-run"))
                figures[name] = {"rows": pushed.rows, "wall_s": wall, "cpu_s": cpu}
        with open_store(root / "pulled.duckdb") as other:
            for name in ("pull", "pull_again"):
                pulled, wall, cpu = _timed(lambda: shared.pull(other, "bench-run"))
                figures[name] = {"rows": pulled.rows, "wall_s": wall, "cpu_s": cpu}
    moved = figures["push"]["rows"]
    for name in ("push", "push_again", "pull", "pull_again"):
        fig = figures[name]
        fig["us_per_row"] = fig["wall_s"] / moved * 1e6
        print(
            f"{name:<11} {fig['rows']:>9,} rows added  {fig['wall_s']:7.2f} s wall  "
            f"{fig['cpu_s']:7.2f} s CPU  {fig['us_per_row']:6.2f} us per row of the run"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

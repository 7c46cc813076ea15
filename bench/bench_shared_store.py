"""Shared-store figures: push and pull of one large run through Iceberg (SQLite catalog, local
directory warehouse), each twice (the second finds everything there and adds nothing).

One run of N cases (default 200,000), one replay, two scorers: N cases + N outputs + 2N score
rows (4N rows in all), written into a fresh local DuckDB store, then

``push``      ``SharedStore.push_run`` into an empty shared store, then again (dedupe only);
``pull``      ``SharedStore.pull`` of the run into another fresh local store, then again.

Each is timed (wall and CPU of this process) and divided by the rows moved.

``publish``   what a run's end costs when it publishes its new response-cache entries
              (``SharedStore.cache_put``, one commit per batch): commits of 1 to 20,000
              entries into the shared cache (the fixed cost of a commit and the cost per
              entry, by least squares over the sizes), the same entries again (all there:
              the dedupe read only), and, as the cache grows by one 1,000-entry commit per
              "run" to ``--files`` data files, a 100-entry publish and a 100-key lookup (what
              a run's prefetch asks) at a few sizes: every commit adds a data file, and a
              lookup of random sha256 keys reads the key column of every file.

``compact``    the cache grown by one commit per "run" (``--rows-per-commit`` entries each,
              appended straight to the table: no dedupe read, no automatic compaction) to
              each of ``--commits`` data files, a 100-key lookup before and after
              ``SharedStore.compact_cache`` (every file rewritten as one), and the
              compaction's own wall and CPU, per row of the cache.

``pushes``    the team store as it fills: ``--pushes`` runs of ``--push-cases`` cases each
              pushed one after another (every table compacted past its data-file limit and
              its old snapshots expired after each push), with the wall and CPU of each push,
              and at a few marks a pull of the first run into a fresh local store and the
              snapshots each table keeps: flat figures mean the store does not slow as it fills.

Figures are printed, never asserted; the load average is printed with them.

Usage:
    .venv/bin/python bench/bench_shared_store.py
    .venv/bin/python bench/bench_shared_store.py --cases 20000 --json figures.json
    .venv/bin/python bench/bench_shared_store.py --only publish --files 100
    .venv/bin/python bench/bench_shared_store.py --only compact --commits 16,200,1000
    .venv/bin/python bench/bench_shared_store.py --only pushes --pushes 500 --push-cases 200
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import statistics
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
    with open_store(db, write=True) as store:
        store.create_run(manifest, cases)
        store.write_results(outputs, scores)
        store.finish_run(run_id, "complete", {})


def _timed(call: Callable[[], Any]) -> tuple[Any, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = call()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def _entries(start: int, n: int) -> dict[str, str]:
    """``n`` cache entries as a run writes them: sha256 keys, a ~300-byte completion each."""
    text = "an answer of about the length a support reply has, " * 5
    return {
        hashlib.sha256(f"request {i}".encode()).hexdigest(): json.dumps(
            {"text": f"{text}{i}", "latency_ms": 120.0, "cost_usd": 0.0004, "steps": 1}
        )
        for i in range(start, start + n)
    }


def _median_timed(calls: list[Callable[[], Any]]) -> tuple[float, float]:
    """Median wall and CPU seconds of ``calls`` (each timed once)."""
    timed = [_timed(call)[1:] for call in calls]
    return statistics.median(w for w, _ in timed), statistics.median(c for _, c in timed)


def bench_publish(root: Path, files: int, rounds: int = 3) -> dict[str, Any]:
    """The cost of a commit of a run's new cache entries, and of lookups as commits pile up."""
    from evalkit.store.shared.store import CACHE_BATCH_ROWS

    shared = open_shared_store(f"sqlite:///{root / 'cache-catalog.db'}")
    shared.cache_put(_entries(10**9, 1))  # the table made (a first publish does it once)
    next_key = 0
    sizes: dict[str, Any] = {}
    for n in (1, 100, 1_000, 10_000, CACHE_BATCH_ROWS):
        calls = []
        for _ in range(rounds):
            batch = _entries(next_key, n)
            next_key += n
            calls.append(lambda batch=batch: shared.cache_put(batch))
        wall, cpu = _median_timed(calls)
        sizes[str(n)] = {"wall_s": wall, "cpu_s": cpu}
    xs = [float(n) for n in sizes]
    ys = [fig["wall_s"] for fig in sizes.values()]
    slope = statistics.linear_regression(xs, ys).slope
    fixed = statistics.linear_regression(xs, ys).intercept
    cpu_fit = statistics.linear_regression(xs, [fig["cpu_s"] for fig in sizes.values()])
    again, again_wall, again_cpu = _timed(lambda: shared.cache_put(_entries(0, 10_000)))
    growth: dict[str, Any] = {}
    held_files = 1 + rounds * len(sizes)  # one data file per commit that added rows
    present = list(_entries(0, 100))  # keys of the first commits: a lookup finds them all
    for mark in sorted({held_files, *(m for m in (50, 100, files) if m <= files)}):
        while held_files < mark:
            shared.cache_put(_entries(next_key, 1_000))
            next_key, held_files = next_key + 1_000, held_files + 1
        assert len(shared.cache_get(present)) == 100
        get_s, _ = _median_timed([lambda: shared.cache_get(present)] * rounds)
        probe = _entries(next_key, 100)
        next_key, held_files = next_key + 100, held_files + 1
        _, put_s, _ = _timed(lambda probe=probe: shared.cache_put(probe))
        growth[str(mark)] = {"publish_100_s": put_s, "lookup_100_s": get_s}
    return {
        "commit_sizes": sizes,
        "commit_fixed_s": fixed,
        "commit_per_entry_us": slope * 1e6,
        "commit_fixed_cpu_s": cpu_fit.intercept,
        "commit_per_entry_cpu_us": cpu_fit.slope * 1e6,
        "republish_10000": {"added": again.added, "wall_s": again_wall, "cpu_s": again_cpu},
        "by_data_files": growth,
        "batch_rows": CACHE_BATCH_ROWS,
    }


def _print_publish(fig: dict[str, Any]) -> None:
    print(f"publish: one commit of N new cache entries (median of 3), load {_load()}")
    for n, size in fig["commit_sizes"].items():
        print(
            f"  {int(n):>7,} entries  {size['wall_s'] * 1000:8.1f} ms wall  "
            f"{size['cpu_s'] * 1000:8.1f} ms CPU  {size['wall_s'] / int(n) * 1e6:9.1f} us/entry"
        )
    print(
        f"  fixed cost of a commit {fig['commit_fixed_s'] * 1000:.0f} ms + "
        f"{fig['commit_per_entry_us']:.1f} us per entry (least squares); CPU "
        f"{fig['commit_fixed_cpu_s'] * 1000:.0f} ms + {fig['commit_per_entry_cpu_us']:.1f} us"
    )
    again = fig["republish_10000"]
    print(
        f"  10,000 entries again (all there): {again['added']} added, "
        f"{again['wall_s'] * 1000:.0f} ms wall, {again['cpu_s'] * 1000:.0f} ms CPU"
    )
    for files, at in fig["by_data_files"].items():
        print(
            f"  cache of {int(files):>3} data files: publish 100 {at['publish_100_s'] * 1000:6.0f}"
            f" ms, look up 100 keys {at['lookup_100_s'] * 1000:6.0f} ms"
        )


def bench_compact(root: Path, marks: Sequence[int], per_commit: int, rounds: int = 3) -> list:
    """A 100-key lookup at each of ``marks`` data files, before and after a compaction, and
    the compaction's cost; the cache grows on from the compacted table to the next mark."""
    import pyarrow as pa

    from evalkit.store.shared.compaction import data_files
    from evalkit.store.shared.tables import TABLES

    shared = open_shared_store(f"sqlite:///{root / 'compact-catalog.db'}")
    shared.cache_put(_entries(0, per_commit))  # the table made: its first data file
    table = shared._table("response_cache")
    assert table is not None
    spec = TABLES["response_cache"]
    present = list(_entries(0, 100))  # keys of the first commit: every lookup finds them
    next_key, figures = per_commit, []
    for mark in marks:
        while data_files(table) < mark:  # one commit a run, as publishes make them
            batch = _entries(next_key, per_commit)
            next_key += per_commit
            now = dt.datetime.now(dt.UTC)
            table.append(
                pa.table(
                    {
                        "cache_key": list(batch),
                        "response": list(batch.values()),
                        "created_at": [now] * len(batch),
                    },
                    schema=spec.arrow,
                )
            )
        assert len(shared.cache_get(present)) == 100
        before = _median_timed([lambda: shared.cache_get(present)] * rounds)
        load_before = _load()
        done, wall, cpu = _timed(shared.compact_cache)
        load_compact = _load()
        assert len(shared.cache_get(present)) == 100 and data_files(table.refresh()) == 1
        after = _median_timed([lambda: shared.cache_get(present)] * rounds)
        figures.append({
            "data_files": mark, "rows": done.rows_after,
            "lookup_100_before_s": before[0], "lookup_100_before_cpu_s": before[1],
            "lookup_100_after_s": after[0], "lookup_100_after_cpu_s": after[1],
            "compact_wall_s": wall, "compact_cpu_s": cpu,
            "compact_us_per_row": wall / done.rows_after * 1e6,
            "compact_cpu_us_per_row": cpu / done.rows_after * 1e6,
            "expired_snapshots": done.expired_snapshots,
            "load_lookup_before": load_before, "load_compact": load_compact,
            "load_lookup_after": _load(),
        })  # fmt: skip
        table = table.refresh()
    return figures


def _print_compact(figures: list[dict[str, Any]], per_commit: int) -> None:
    print(f"compact: the cache at N data files ({per_commit} entries a commit), a 100-key lookup")
    print("  (median of 3) before and after one compaction, and the compaction's own cost")
    for fig in figures:
        ms = {k: fig[k] * 1000 for k in fig if k.startswith("lookup_")}
        print(
            f"  {fig['data_files']:>5} files {fig['rows']:>8,} rows: lookup 100 keys "
            f"{ms['lookup_100_before_s']:6.0f} ms wall {ms['lookup_100_before_cpu_s']:5.0f} ms CPU"
            f" [load {fig['load_lookup_before']}] -> {ms['lookup_100_after_s']:5.0f} ms wall "
            f"{ms['lookup_100_after_cpu_s']:4.0f} ms CPU [load {fig['load_lookup_after']}]"
        )
        print(
            f"        compaction {fig['compact_wall_s']:.2f} s wall {fig['compact_cpu_s']:.2f} s "
            f"CPU: {fig['compact_us_per_row']:.1f} us/row wall, "
            f"{fig['compact_cpu_us_per_row']:.1f} us/row CPU; {fig['expired_snapshots']} "
            f"snapshots expired [load {fig['load_compact']}]"
        )


def bench_pushes(root: Path, pushes: int, cases: int) -> list[dict[str, Any]]:
    """Push ``pushes`` runs of ``cases`` cases one after another into one shared store; at
    the first push, the last and a few between: that push's wall and CPU (the median of the
    pushes since the previous mark too), a pull of the first run into a fresh local store,
    and the most snapshots any table keeps."""
    from evalkit.store.shared.tables import TABLES

    shared = open_shared_store(f"sqlite:///{root / 'fill-catalog.db'}")
    marks = sorted({1, *(m for m in (10, 50, 100, 250, 500, 1000) if m < pushes), pushes})
    local = root / "fill.duckdb"
    figures: list[dict[str, Any]] = []
    since: list[tuple[float, float]] = []
    for i in range(1, pushes + 1):
        run_id = f"fill-{i:05d}"
        _write_run(local, run_id, cases)
        with open_store(local, read_only=True) as store:
            pushed, wall, cpu = _timed(
                lambda store=store, run_id=run_id: shared.push_run(store, run_id)
            )
        assert pushed.rows >= 4 * cases  # cases, outputs, two scores each (and the run)
        since.append((wall, cpu))
        if i not in marks:
            continue
        target = root / f"pull-{i}.duckdb"
        with open_store(target, write=True) as other:
            pulled, pull_wall, pull_cpu = _timed(
                lambda other=other: shared.pull(other, "fill-00001")
            )
        assert pulled.rows >= 4 * cases
        target.unlink()
        figures.append({
            "pushes": i, "push_wall_s": wall, "push_cpu_s": cpu,
            "median_push_wall_s": statistics.median(w for w, _ in since),
            "median_push_cpu_s": statistics.median(c for _, c in since),
            "pull_wall_s": pull_wall, "pull_cpu_s": pull_cpu,
            "most_snapshots": max(
                len(table.metadata.snapshots)
                for table in (shared._table(name) for name in TABLES)
                if table is not None
            ),
            "load": _load(),
        })  # fmt: skip
        since = []
    return figures


def _print_pushes(figures: list[dict[str, Any]], cases: int) -> None:
    print(f"pushes: runs of {cases:,} cases pushed one after another into one shared store")
    for fig in figures:
        print(
            f"  push {fig['pushes']:>5}: {fig['push_wall_s']:6.2f} s wall {fig['push_cpu_s']:6.2f}"
            f" s CPU (median since the last mark {fig['median_push_wall_s']:.2f} / "
            f"{fig['median_push_cpu_s']:.2f} s); pull of the first run {fig['pull_wall_s']:.2f} s"
            f" wall {fig['pull_cpu_s']:.2f} s CPU; at most {fig['most_snapshots']} snapshots a "
            f"table [load {fig['load']}]"
        )


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=200_000)
    parser.add_argument("--files", type=int, default=200, help="publish: grow the cache to this")
    parser.add_argument(
        "--only", choices=["push-pull", "publish", "compact", "pushes"], help="one part only"
    )
    parser.add_argument("--pushes", type=int, default=500, help="pushes: runs pushed in turn")
    parser.add_argument("--push-cases", type=int, default=200, help="pushes: cases a run")
    parser.add_argument(
        "--commits", default="16,200,1000", help="compact: data files to grow the cache to"
    )
    parser.add_argument(
        "--rows-per-commit", type=int, default=100, help="compact: entries a commit"
    )
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    figures: dict[str, Any] = {"cases": args.cases}
    if args.only == "pushes":
        with tempfile.TemporaryDirectory() as tmp:
            figures["pushes"] = bench_pushes(Path(tmp), args.pushes, args.push_cases)
        _print_pushes(figures["pushes"], args.push_cases)
        if args.json:
            Path(args.json).write_text(json.dumps(figures, indent=2))
        return 0
    if args.only == "compact":
        marks = [int(m) for m in args.commits.split(",")]
        with tempfile.TemporaryDirectory() as tmp:
            figures["compact"] = bench_compact(Path(tmp), marks, args.rows_per_commit)
        _print_compact(figures["compact"], args.rows_per_commit)
        if args.json:
            Path(args.json).write_text(json.dumps(figures, indent=2))
        return 0
    if args.only != "push-pull":
        with tempfile.TemporaryDirectory() as tmp:
            figures["publish"] = bench_publish(Path(tmp), args.files)
        _print_publish(figures["publish"])
    if args.only == "publish":
        if args.json:
            Path(args.json).write_text(json.dumps(figures, indent=2))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _write_run(root / "local.duckdb", "bench-run", args.cases)
        shared = open_shared_store(f"sqlite:///{root / 'catalog.db'}")
        with open_store(root / "local.duckdb", read_only=True) as local:
            for name in ("push", "push_again"):
                pushed, wall, cpu = _timed(lambda: shared.push_run(local, "bench-run"))
                figures[name] = {"rows": pushed.rows, "wall_s": wall, "cpu_s": cpu}
        with open_store(root / "pulled.duckdb", write=True) as other:
            for name in ("pull", "pull_again"):
                pulled, wall, cpu = _timed(lambda: shared.pull(other, "bench-run"))
                figures[name] = {"rows": pulled.rows, "wall_s": wall, "cpu_s": cpu}
    moved = figures["push"]["rows"]
    print(f"push and pull of one run of {args.cases:,} cases, load {_load()}")
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

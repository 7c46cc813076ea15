"""A Ray driver's periodic merges in one process, without Ray: what each merge costs as the
run grows (it should cost what it adds, not the run so far).

Per size N: N one-turn cases written as the driver's workers write them (chunks of 200
outputs, each with two scores and a cache entry, and a cases piece of the run's one share
every 2,000 cases, written before its chunks), and ``merge_run(..., in_progress=True)`` after
every ``--every`` chunks, then the final merge. Printed: the CPU of the periodic merges in all
and per output, of the first and last fifth of them (per merge: flat when a merge costs what
it adds), of the final merge, the part files read (each once: 3 a chunk and 1 a piece), and
the process's RSS after the first and the last periodic merge and its peak. Figures are
printed (and written with ``--json``), never asserted.

Usage:
    .venv/bin/python bench/bench_periodic_merge.py --sizes 20000 100000
    .venv/bin/python bench/bench_periodic_merge.py --sizes 100000 --every 100
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import polars as pl

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))  # runnable from a checkout without installing

from evalkit.run.merging import merge_run  # noqa: E402
from evalkit.store import OUTPUT_SCHEMA, SCORE_SCHEMA, open_store  # noqa: E402
from evalkit.store.part_checks import CASE_SCHEMA  # noqa: E402
from evalkit.store.parts import PartsRoot  # noqa: E402
from evalkit.store.schema import case_columns, corpus_digest  # noqa: E402

RUN = "periodic"
CHUNK = 200  # outputs a chunk (the driver's default chunk size)
PIECE = 2_000  # cases a piece (the driver's PIECE_UNITS)


class _Case:
    """What the store records of a case (``StoredCase``)."""

    def __init__(self, case_id: str) -> None:
        self.id, self.hash, self.tags, self.criticality = case_id, "h-" + case_id, ("t",), "normal"
        self.sealed, self.provenance, self.source, self.group = False, {}, "cases/a.yaml:1", None

    def input_json(self) -> str:
        return json.dumps({"question": f"where is order {self.id}?"})


def _chunk(root: PartsRoot, name: str, ids: list[str]) -> None:
    n, now = len(ids), dt.datetime.now(dt.UTC)
    outputs = pl.DataFrame(
        {
            "run_id": [RUN] * n, "case_id": ids, "replay": [0] * n,
            "text": ['{"status": "shipped", "eta_days": 2}'] * n, "tool_calls": ["[]"] * n,
            "steps": [1] * n, "error": [None] * n, "fail_reason": [None] * n,
            "latency_ms": [5.0] * n, "prompt_tokens": [40] * n, "completion_tokens": [8] * n,
            "cost_usd": [0.0] * n, "cached": [False] * n,
            "request_hash": [hashlib.sha256(i.encode()).hexdigest() for i in ids],
            "model": ["bench"] * n, "created_at": [now] * n,
        },
        schema=OUTPUT_SCHEMA,
    )  # fmt: skip
    scores = pl.DataFrame(
        {
            "run_id": [RUN] * 2 * n, "scoring_id": [f"{RUN}/s0"] * 2 * n, "case_id": ids * 2,
            "replay": [0] * 2 * n, "scorer": ["json"] * n + ["contains"] * n,
            "scorer_index": [0] * n + [1] * n, "tier": [0] * 2 * n, "score": [1.0] * 2 * n,
            "passed": [True] * 2 * n, "error": [False] * 2 * n, "reason": ["ok"] * 2 * n,
            "details": [None] * 2 * n,
        },
        schema=SCORE_SCHEMA,
    )  # fmt: skip
    cache = {hashlib.sha256(f"k{i}".encode()).hexdigest(): '{"choices": []}' for i in ids}
    root.write_chunk(RUN, name, outputs, scores, cache)


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def bench_size(folder: Path, n: int, every: int) -> dict[str, Any]:
    root = PartsRoot(folder / "parts")
    ids = [f"c-{i:07d}" for i in range(n)]
    corpus = {"hash": corpus_digest((i, "h-" + i) for i in ids), "n_cases": n}
    manifest = {"config_hash": "c" * 64, "replays": 1, "warnings": [], "corpus": corpus,
                "run": {"run_id": RUN, "label": RUN, "cache": True}}  # fmt: skip
    root.write_manifest(RUN, "driver", manifest)
    merges: list[float] = []
    rss: list[float] = []
    with open_store(folder / "driver.duckdb", write=True) as store:
        for k, start in enumerate(range(0, n, CHUNK)):
            if start % PIECE == 0:
                piece = [_Case(i) for i in ids[start : start + PIECE]]
                frame = pl.DataFrame(case_columns(RUN, piece), schema=CASE_SCHEMA)
                root.write_part(RUN, "cases", f"driver-1-of-1.p{start:07d}", frame.to_arrow(), 1)
                if start == 0:
                    merge_run(store, root, RUN, in_progress=True)  # the run recorded
            _chunk(root, f"k{start:07d}", ids[start : start + CHUNK])
            if (k + 1) % every == 0:
                cpu = time.process_time()
                merge_run(store, root, RUN, in_progress=True)
                merges.append(time.process_time() - cpu)
                rss.append(_rss_mib())
        cpu = time.process_time()
        final = merge_run(store, root, RUN)
        final_cpu = time.process_time() - cpu
    reads = getattr(root, "reads", None)  # the tree before counts no reads
    fifth = max(1, len(merges) // 5)
    return {
        "outputs": n,
        "merges": len(merges),
        "periodic_cpu_s": sum(merges),
        "periodic_us_per_output": sum(merges) / n * 1e6,
        "first_fifth_ms_per_merge": sum(merges[:fifth]) / fifth * 1000,
        "last_fifth_ms_per_merge": sum(merges[-fifth:]) / fifth * 1000,
        "final_cpu_s": final_cpu,
        "part_files": 3 * len(range(0, n, CHUNK)) + len(range(0, n, PIECE)),
        "files_read": reads,
        "rss_first_mib": rss[0] if rss else None,
        "rss_last_mib": rss[-1] if rss else None,
        "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "complete": final.result.complete,
        "stored": final.summary.outputs,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[20_000, 100_000])
    parser.add_argument("--every", type=int, default=10, help="chunks between merges")
    parser.add_argument("--json", metavar="FILE", help="write the figures as JSON")
    args = parser.parse_args(argv)
    got = {}
    for n in args.sizes:
        with tempfile.TemporaryDirectory(prefix="bench-periodic-") as tmp:
            figures = bench_size(Path(tmp), n, args.every)
        got[n] = figures
        print(
            f"{n:>9,} outputs, {figures['merges']} periodic merges: {figures['periodic_cpu_s']:.2f}"
            f" s CPU ({figures['periodic_us_per_output']:.0f} us/output); per merge, first fifth"
            f" {figures['first_fifth_ms_per_merge']:.0f} ms, last fifth "
            f"{figures['last_fifth_ms_per_merge']:.0f} ms; final {figures['final_cpu_s']:.2f} s;"
            f" files read {figures['files_read']} of {figures['part_files']}; RSS "
            f"{figures['rss_first_mib']:.0f} -> {figures['rss_last_mib']:.0f} MiB, peak "
            f"{figures['peak_mib']:.0f}; stored {figures['stored']:,}",
            flush=True,
        )
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    if args.json:
        Path(args.json).write_text(json.dumps(got, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

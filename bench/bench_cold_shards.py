"""Cold shards: what one ``--shard K/N`` with no case index prepared costs before its first
request, alone and with the other shards of its matrix started at the same moment.

The corpus is ``bench_distributed.py``'s (N one-turn cases, ``--per-file`` to a case file).
Each shard runs in a process of its own, started with the others and released together (a
file appears), and reads the corpus as ``evalkit run --shard K/N`` does
(``scan_corpus(index_only=True)``) before ``run_shard`` with its chunks stood in for (no model
call). It reports the seconds (wall and this process's CPU) from its release to its first
chunk (where its first request would go), the cases it read to make the case index, the cases
it built, its share and its peak RSS. Five ways, each on a fresh index directory but ``warm``:

``kept``     one shard reading as a cold shard did before: every case built and kept
             (``scan_corpus`` without ``index_only``)
``alone``    one cold shard (the others not running: separate machines, nothing shared)
``together`` the N shards at once on one index directory: each file read for the index once
             between them
``together_kept`` the N shards at once, each reading as before (every case built and kept),
             each on an index of its own (what nothing shared between them costs)
``warm``     one shard on the index ``together`` made (or ``alone``, without ``together``)

Figures are printed, never asserted; on a shared 2-core machine the N processes of
``together`` share two cores, so its seconds say what one machine gives, not a cluster.

Usage:
    .venv/bin/python bench/bench_cold_shards.py                       # 10,000 cases, 4 shards
    .venv/bin/python bench/bench_cold_shards.py --cases 100000 --per-file 5000
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))  # runnable from a checkout without installing
sys.path.insert(0, str(BENCH))

WAYS = ("kept", "alone", "together", "together_kept", "warm")


def one_shard(config: Path, index: Path, go: Path, k: int, n: int, kept: bool) -> dict[str, Any]:
    """In a shard's process: wait for ``go``, then read the corpus and run the shard up to its
    first chunk; its figures."""
    from evalkit.corpus.case_facts import scan_corpus
    from evalkit.corpus.suite import load_suite
    from evalkit.run import sharded
    from evalkit.run.runner import RunOptions
    from evalkit.run.shards import Shard
    from evalkit.store.parts import PartsRoot

    first: list[float] = []

    async def no_chunk(*_: Any, **__: Any) -> sharded.ChunkResult:
        if not first:
            first.extend((time.perf_counter(), time.process_time()))
        return sharded.ChunkResult(
            chunk_id="stood-in", attempt=1, outputs=0, requests=0, retries=0, cache_hits=0
        )

    suite = load_suite(config)
    sharded.run_chunk = no_chunk  # type: ignore[assignment]
    while not go.exists():
        time.sleep(0.002)
    started, cpu = time.perf_counter(), time.process_time()
    facts = scan_corpus(config.parent, index_dir=index, index_only=not kept)
    read_s = time.perf_counter() - started
    summary = sharded.run_shard(
        suite, facts, RunOptions(label="cold", progress=False), shard=Shard(k, n),
        run_id="bench-cold", root=PartsRoot(go.with_name(f"parts-{go.stem}-{k}")),
    )  # fmt: skip
    counts = facts.counts
    return {
        "first_s": round((first[0] if first else time.perf_counter()) - started, 2),
        "first_cpu_s": round((first[1] if first else time.process_time()) - cpu, 2),
        "read_s": round(read_s, 2),
        "indexed": counts.cases_indexed,
        "built": counts.cases_built,
        "share": summary.cases,
        "files_parsed": counts.files_parsed,
        "rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def _shards(
    config: Path, index: Path, way: str, ks: Sequence[int], n: int, kept: bool
) -> list[Any]:
    """Shards ``ks`` of ``n`` in processes of their own, released together; their figures."""
    go = index.with_name(f"{way}.go")
    go.unlink(missing_ok=True)
    command = [sys.executable, __file__, "--one", str(config)]
    procs = [
        subprocess.Popen([*command, str(index.with_name(f"{index.name}-{k}") if kept else index),
                          str(go), str(k), str(n), "kept" if kept else "index_only"],
                         stdout=subprocess.PIPE, text=True)
        for k in ks
    ]  # fmt: skip
    time.sleep(1.0)  # every process past its imports, waiting for the release
    go.touch()
    found = []
    for proc in procs:
        out, _ = proc.communicate()
        if proc.returncode:
            raise SystemExit(f"a shard failed (exit {proc.returncode})")
        found.append(json.loads(out.strip().splitlines()[-1]))
    return found


def cold_figures(
    cases: int, shards: int, per_file: int, ways: Sequence[str] = WAYS
) -> dict[str, Any]:
    """Each way's shards' figures (``together``: all N; the others: shard 1 of N)."""
    from bench_distributed import write_corpus

    with tempfile.TemporaryDirectory(prefix="evalkit-bench-cold-") as tmp:
        config = write_corpus(Path(tmp) / "corpus", cases, 8, per_file)
        figures: dict[str, Any] = {"cases": cases, "shards": shards, "per_file": per_file}
        for way in [w for w in WAYS if w in ways]:
            made = "together" if "together" in figures else "alone"  # warm: an index made
            index = Path(tmp) / (f"index-{made}" if way == "warm" else f"index-{way}")
            ks = range(1, shards + 1) if way.startswith("together") else [1]
            kept = way.endswith("kept")
            figures[way] = _shards(config, index, way, ks, shards, kept=kept)
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--per-file", type=int, default=1000, help="cases per case file")
    parser.add_argument("--ways", nargs="+", choices=WAYS, default=list(WAYS))
    parser.add_argument("--json", metavar="FILE", help="write the figures as JSON")
    parser.add_argument("--one", nargs=6, help=argparse.SUPPRESS)  # a shard's own process
    args = parser.parse_args(argv)
    if args.one:
        config, index, go, k, n, how = args.one
        got = one_shard(Path(config), Path(index), Path(go), int(k), int(n), how == "kept")
        print(json.dumps(got), flush=True)
        return 0
    figures = cold_figures(args.cases, args.shards, args.per_file, args.ways)
    files = -(-args.cases // args.per_file)
    print(f"{args.cases} cases in {files} files, --shard K/{args.shards} with no index prepared: "
          "seconds to the first request, cases read for the index / built, peak RSS")  # fmt: skip
    for way in [w for w in WAYS if w in figures]:
        for k, fig in enumerate(figures[way], start=1):
            who = f"{way} {k}/{args.shards}" if way.startswith("together") else way
            print(f"  {who:14}: {fig['first_s']:7.2f} s, CPU {fig['first_cpu_s']:.2f} s (corpus "
                  f"read {fig['read_s']:.2f} s), "
                  f"{fig['indexed']:>7} indexed, {fig['built']:>7} built, share "
                  f"{fig['share']}, {fig['files_parsed']} files read, "
                  f"{fig['rss_mib']} MiB")  # fmt: skip
    for way in ("together", "together_kept"):
        if way in figures:
            got = figures[way]
            print(f"  {way}: {sum(f['indexed'] + f['built'] for f in got)} cases read in all, "
                  f"the slowest shard's first request at "
                  f"{max(f['first_s'] for f in got):.2f} s")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

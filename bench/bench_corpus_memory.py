"""Bytes a loaded case keeps: ``tracemalloc`` over ``load_corpus`` of N demo-mix cases.

The cases are ``bench_process.py``'s demo mix (each case the ``expect`` list of a demo-corpus
case in turn: json_schema, json_fields, regex, judge, trajectory scorers, with the demo's schema,
rubric and tool files). What a load keeps is traced memory after the load minus before, with the
corpus still held, divided by N: the case objects, their strings and dicts, their pending (or
built, shared) scorers, and what the load retains besides (compiled schemas, file hashes), which
is a fixed cost that shrinks per case as N grows. Peak is the high-water mark during the load
(the YAML node graph of one chunk of a file, ``CASE_CHUNK_ITEMS`` cases, is its largest part;
the ``whole-file`` row parses each file at once, as before chunking, for comparison). Each way
(eager and ``defer_scorers``, chunked and whole-file) is measured in a fresh process, so a cache
warmed by one does not flatter the other.

Usage:
    .venv/bin/python bench/bench_corpus_memory.py --cases 10000
    .venv/bin/python bench/bench_corpus_memory.py --cases 10000 --json out.json
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import tempfile
import tracemalloc
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # runnable from a checkout without installing
sys.path.insert(0, str(REPO / "bench"))


@dataclass(frozen=True)
class CorpusMemory:
    """What one ``load_corpus`` keeps and peaks at, traced by ``tracemalloc``."""

    cases: int
    deferred: bool
    whole_file: bool  # each file parsed at once (its whole node graph alive), not chunked
    kept_bytes: int
    peak_bytes: int

    @property
    def bytes_per_case(self) -> float:
        return self.kept_bytes / self.cases


def measure_load(root: Path, *, deferred: bool, whole_file: bool = False) -> CorpusMemory:
    """Load the corpus at ``root`` once untraced (imports, compiled schemas, interned names:
    process-wide caches that are not the cases'), then once traced; returns what the traced
    load keeps with the corpus still referenced."""
    from evalkit.corpus import cases
    from evalkit.corpus.cases import load_corpus

    if whole_file:
        cases.CASE_CHUNK_ITEMS = 10**9  # chunks larger than any file

    load_corpus(root, defer_scorers=deferred)  # warm: imports and per-process caches
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    corpus = load_corpus(root, defer_scorers=deferred)
    gc.collect()
    kept, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return CorpusMemory(len(corpus.cases), deferred, whole_file, kept - before, peak - before)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--json", type=Path, help="write the figures here too")
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)  # the child's corpus
    parser.add_argument("--deferred", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--whole-file", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.root is not None:  # the child: one measurement, printed as JSON
        got = measure_load(args.root, deferred=args.deferred, whole_file=args.whole_file)
        print(json.dumps(asdict(got)))
        return 0
    from bench_process import write_mix_corpus

    rows = []
    with tempfile.TemporaryDirectory(prefix="evalkit-corpus-memory-") as tmp:
        root = Path(tmp) / "corpus"
        write_mix_corpus(root, args.cases)
        for deferred, whole in ((False, False), (True, False), (True, True)):
            command = [sys.executable, __file__, "--root", str(root)]
            command += ["--deferred"] if deferred else []
            out = subprocess.run(
                command + (["--whole-file"] if whole else []),
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            rows.append(CorpusMemory(**json.loads(out)))
    print(f"load_corpus of {args.cases:,} demo-mix cases (tracemalloc, fresh process each):")
    for row in rows:
        way = "deferred scorers" if row.deferred else "eager scorers   "
        way += ", whole-file" if row.whole_file else ", chunked   "
        print(
            f"  {way}: kept {row.kept_bytes / (1 << 20):7.1f} MiB = "
            f"{row.bytes_per_case:7.0f} bytes/case; peak during load "
            f"{row.peak_bytes / (1 << 20):7.1f} MiB"
        )
    if args.json:
        figures = [{**asdict(r), "bytes_per_case": r.bytes_per_case} for r in rows]
        args.json.write_text(json.dumps(figures, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

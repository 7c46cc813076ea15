"""Rescore at scale: 100k stored outputs re-scored with the deterministic scorers.

Writes a synthetic run through the store (default 20k cases x 5 replays = 100k outputs, each case
scored by ``json_valid``, ``contains``, ``regex`` and ``max_words``, plus its first scoring),
then times ``rescore_run`` over it: reading the outputs, scoring every one with zero model calls,
and storing the new scoring. The outputs cycle through a few texts (bare JSON, fenced JSON,
JSON without the expected word, a long reply) and some errored, so every scorer both passes and
fails; the expected counts (rescored outputs, score rows, passes per scorer) are computed
independently and checked: the script prints ``verified: True`` when they agree.

Usage:
    .venv/bin/python bench/bench_rescore.py                   # 100k outputs
    .venv/bin/python bench/bench_rescore.py --cases 200 --json figures.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # runnable from a checkout without installing

from evalkit.corpus.cases import Case, Corpus  # noqa: E402
from evalkit.records import Output  # noqa: E402
from evalkit.run.rescore import rescore_run  # noqa: E402
from evalkit.scorers.registry import Scorer, build_scorer  # noqa: E402
from evalkit.store import OUTPUT_SCHEMA, SCORE_SCHEMA, Store, initial_scoring_id, open_store  # noqa: E402

RUN_ID = "bench-rescore"
TEXTS = (
    '{"category": "billing", "refund": true, "reply": "We will refund order 8812."}',
    '{"category": "billing", "status": "open", "reply": "No change to your order."}',
    '```json\n{"category": "billing", "reply": "We will refund order 8812."}\n```',
    '{"reply": "' + " ".join(["We are looking into your refund request."] * 8) + '"}',
)
ERROR_EVERY = 97  # every 97th output errored: nothing to rescore


def scorers() -> tuple[Scorer, ...]:
    """The deterministic scorers every synthetic case uses."""
    return (
        build_scorer("json_valid", {}),
        build_scorer("contains", {"text": "refund"}),
        build_scorer("regex", {"pattern": r"order \d+"}),
        build_scorer("max_words", {"n": 40}),
    )


def make_corpus(n: int) -> Corpus:
    """``n`` cases sharing the scorers (built once, as the loader would per case)."""
    bound = scorers()
    cases = tuple(
        Case(
            id=f"case-{i:06d}",
            tags=(f"tag-{i % 8}",),
            criticality="normal",
            provenance={"source": "bench"},
            messages=({"role": "user", "content": f"Refund order {i}?"},),
            vars=None,
            fixtures={},
            scorers=bound,
            hash=f"{i:064x}",
            source=f"cases/bench.yaml:{i + 1}",
        )
        for i in range(n)
    )
    return Corpus(root=REPO, cases=cases, file_hashes={})


def text_of(row: int) -> str | None:
    """The stored text of output ``row`` (None: it errored)."""
    return None if row % ERROR_EVERY == 5 else TEXTS[row % len(TEXTS)]


def write_run(store: Store, corpus: Corpus, replays: int) -> int:
    """The run, its outputs and a first scoring (all passed); returns the output count."""
    manifest = {"run": {"run_id": RUN_ID, "label": "rescore"}, "config_hash": "bench"}
    store.create_run(manifest, corpus.cases)
    ids = [c.id for c in corpus.cases for _ in range(replays)]
    texts = [text_of(i) for i in range(len(ids))]
    n = len(ids)
    outputs = pl.DataFrame(
        {
            "run_id": RUN_ID,
            "case_id": ids,
            "replay": [r for _ in corpus.cases for r in range(replays)],
            "text": texts,
            "tool_calls": "[]",
            "steps": 1,
            "error": [None if t is not None else "timeout after 60s" for t in texts],
            "fail_reason": None,
            "latency_ms": 100.0,
            "prompt_tokens": 300,
            "completion_tokens": 40,
            "cost_usd": 0.0001,
            "cached": False,
            "request_hash": [f"{i:064x}" for i in range(n)],
            "model": "demo-support-1",
            "created_at": dt.datetime.now(dt.UTC),
        },
        schema=OUTPUT_SCHEMA,
    )
    k = len(corpus.cases[0].scorers)
    ok = outputs.filter(pl.col("error").is_null())
    first = pl.DataFrame(
        {
            "run_id": RUN_ID,
            "scoring_id": initial_scoring_id(RUN_ID),
            "case_id": ok["case_id"].to_list() * k,
            "replay": ok["replay"].to_list() * k,
            "scorer": [s.name for s in corpus.cases[0].scorers for _ in range(ok.height)],
            "scorer_index": [j for j in range(k) for _ in range(ok.height)],
            "tier": 0,
            "score": 1.0,
            "passed": True,
            "error": False,
            "reason": "first scoring",
            "details": None,
        },
        schema=SCORE_SCHEMA,
    )
    store.write_results(outputs, first)
    return n


def expected(corpus: Corpus, n_outputs: int) -> dict[str, Any]:
    """Counts rescore must produce, from scoring each distinct text once."""
    per_text = {t: [s(Output(t), corpus.cases[0]).passed for s in scorers()] for t in TEXTS}
    names = [s.name for s in scorers()]
    passes: Counter[str] = Counter()
    rescored = 0
    for row in range(n_outputs):
        text = text_of(row)
        if text is None:
            continue
        rescored += 1
        passes.update(name for name, ok in zip(names, per_text[text], strict=True) if ok)
    return {"rescored": rescored, "score_rows": rescored * len(names), "passes": dict(passes)}


def run(n_cases: int, replays: int) -> dict[str, Any]:
    """Write the run, rescore it, check the new scoring; returns the figures."""
    corpus = make_corpus(n_cases)
    with (
        tempfile.TemporaryDirectory(prefix="evalkit-bench-rescore-") as tmp,
        open_store(Path(tmp) / "bench.duckdb", write=True) as store,
    ):
        n = write_run(store, corpus, replays)
        usage0 = resource.getrusage(resource.RUSAGE_SELF)
        started = time.perf_counter()
        result = rescore_run(store, corpus, RUN_ID)
        wall = time.perf_counter() - started
        usage1 = resource.getrusage(resource.RUSAGE_SELF)
        new = store.scores(RUN_ID, result.scoring_id)
    passes = new.filter(pl.col("passed")).group_by("scorer").len()
    got = {
        "rescored": result.rescored,
        "score_rows": new.height,
        "passes": dict(passes.iter_rows()),
    }
    want = expected(corpus, n)
    cpu = usage1.ru_utime + usage1.ru_stime - usage0.ru_utime - usage0.ru_stime
    return {
        "cores": os.cpu_count(),
        "settings": {"cases": n_cases, "replays": replays, "scorers": len(scorers())},
        "outputs": n,
        "scoring_id": result.scoring_id,
        "carried": result.carried,
        "rescore_s": wall,
        "rescore_cpu_s": cpu,
        "outputs_per_s": n / wall,
        "expected": want,
        "measured": got,
        "verified": want == got and result.carried == 0,
    }


def _print(f: dict[str, Any]) -> None:
    s = f["settings"]
    print(f"cores: {f['cores']}")
    print(
        f"rescore: {f['outputs']} stored outputs ({s['cases']} cases x {s['replays']} replays), "
        f"{s['scorers']} deterministic scorers each"
    )
    print(
        f"  rescore_run {f['rescore_s']:.2f} s (CPU {f['rescore_cpu_s']:.2f} s), "
        f"{f['outputs_per_s']:.0f} outputs/s; new scoring {f['scoring_id']}"
    )
    m = f["measured"]
    print(f"  rescored {m['rescored']}, score rows {m['score_rows']}, passes {m['passes']}")
    print(f"verified: {f['verified']}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print its figures (and write them as JSON with ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=20_000)
    parser.add_argument("--replays", type=int, default=5)
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args(argv)
    figures = run(args.cases, args.replays)
    _print(figures)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2), encoding="utf-8")
    return 0 if figures["verified"] else 1


if __name__ == "__main__":
    sys.exit(main())

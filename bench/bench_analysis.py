"""Analysis at scale: 1M stored outputs, verdicts, the paired frame, every slice and the gate.

Writes a synthetic baseline and candidate (default 100k cases x 5 replays, 3 scorers per case
and a 4th on every 4th case: 1M outputs and about 3.2M score rows) through the store
(``create_run``, then ``write_results`` in batches of ``--batch-cases`` cases), then times what a
notebook or ``evalkit gate`` does with them: ``load_comparison`` (the store's frames -> verdicts of
both runs, the paired frame, case changes), ``slices`` over every tag, and ``decide``. Peak RSS
is sampled from ``/proc/self/status`` (VmRSS) every 10 ms during each phase, beside ``ru_maxrss``.

The data are drawn from a seeded generator whose expected counts (verdicts per run, paired
cases, broken and fixed) are computed independently with numpy and checked against the
analysis: the script prints ``verified: True`` when every count agrees.

Usage:
    .venv/bin/python bench/bench_analysis.py                       # 100k cases, 1M outputs
    .venv/bin/python bench/bench_analysis.py --cases 200 --json figures.json
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import resource
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # runnable from a checkout without installing

from evalkit.compare.analysis import load_comparison  # noqa: E402
from evalkit.compare.gate import decide, usage_table  # noqa: E402
from evalkit.compare.paired import flips  # noqa: E402
from evalkit.compare.policy import GatePolicy  # noqa: E402
from evalkit.compare.slices import slices  # noqa: E402
from evalkit.corpus.cases import Case  # noqa: E402
from evalkit.store import (  # noqa: E402
    OUTPUT_SCHEMA,
    SCORE_SCHEMA,
    Store,
    initial_scoring_id,
    open_store,
)

N_TAGS = 16
SCORERS = ("json_valid", "max_words", "contains", "json_schema")
FOURTH_EVERY = 4  # cases with i % FOURTH_EVERY == 0 also have the 4th scorer
PASS_P = 0.97  # per scorer, per replay
REGRESSED_TAG, REGRESSED_P = "tag-03", 0.93  # the candidate is worse on one tag
ERROR_P = 0.003  # outputs that errored (no scores)
EDIT_EVERY = 1000  # case ids with i % EDIT_EVERY == 7 are edited in the candidate
MUST_PASS_EVERY = 500
DOWN_EVERY = 5000  # case ids with i % DOWN_EVERY == 11 error on every replay
DISORDER = 256  # completion order: how far a row may move from its case order
BUDGETS = (("latency_s", 0.5), ("total_tokens", 1.25))  # relative budgets, the 2nd growth phase


@dataclass(frozen=True)
class RunSpec:
    """One synthetic run: its id, label and how its scorers pass."""

    run_id: str
    label: str
    seed: int
    regressed: bool


class PeakRSS:
    """Samples this process's resident set size (VmRSS) every ``interval_s`` seconds."""

    def __init__(self, interval_s: float = 0.01) -> None:
        self.interval_s = interval_s
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    @staticmethod
    def now() -> int:
        """Current VmRSS in bytes (0 where /proc is missing)."""
        try:
            for line in Path("/proc/self/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.now())
            self._stop.wait(self.interval_s)

    def __enter__(self) -> PeakRSS:
        self.peak = self.now()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.now())


@contextmanager
def phase(figures: dict[str, Any], name: str) -> Iterator[None]:
    """Time a phase and sample its peak RSS into ``figures[name]``."""
    started = time.perf_counter()
    with PeakRSS() as rss:
        yield
    figures[name] = {"s": time.perf_counter() - started, "peak_rss_mib": rss.peak / 2**20}


def case_ids(lo: int, hi: int) -> list[str]:
    return [f"case-{i:06d}" for i in range(lo, hi)]


def tags_of(i: int) -> tuple[str, ...]:
    """One or two of the N_TAGS tags, deterministic in the case index."""
    first = f"tag-{i % N_TAGS:02d}"
    return (first, f"tag-{(i * 7 + 3) % N_TAGS:02d}") if i % 3 == 0 else (first,)


def make_cases(n: int, edited: bool) -> list[Case]:
    """The run's cases (``edited``: every EDIT_EVERY-th case has a new hash)."""
    out = []
    for i, case_id in enumerate(case_ids(0, n)):
        digest = f"{i:064x}" if not (edited and i % EDIT_EVERY == 7) else f"e{i:063x}"
        out.append(
            Case(
                id=case_id,
                tags=tags_of(i),
                criticality="must_pass" if i % MUST_PASS_EVERY == 0 else "normal",
                provenance={"source": "bench"},
                messages=({"role": "user", "content": f"ticket {i}"},),
                vars=None,
                fixtures={},
                scorers=(),
                hash=digest,
                source=f"cases/bench.yaml:{i + 1}",
            )
        )
    return out


def draw(spec: RunSpec, lo: int, hi: int, replays: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded draws for cases [lo, hi): output errors (cases x replays) and scorer passes
    (cases x replays x scorers)."""
    rng = np.random.default_rng([spec.seed, lo])
    n = hi - lo
    p = np.full(n, PASS_P)
    if spec.regressed:
        regressed = np.array([REGRESSED_TAG in tags_of(i) for i in range(lo, hi)])
        p[regressed] = REGRESSED_P
    errors = rng.random((n, replays)) < ERROR_P
    errors[np.arange(lo, hi) % DOWN_EVERY == 11] = True  # every replay errored: no verdict
    passes = rng.random((n, replays, len(SCORERS))) < p[:, None, None]
    passes[np.arange(lo, hi) % FOURTH_EVERY != 0, :, -1] = True  # no 4th scorer: never fails
    return errors, passes


def _where(mask: np.ndarray, yes: str | None, no: str | None) -> pl.Series:
    """A string Series: ``yes`` where ``mask``, else ``no``."""
    pick = pl.when(pl.lit(pl.Series(mask))).then(pl.lit(yes, pl.String))
    return pl.select(pick.otherwise(pl.lit(no, pl.String))).to_series()


def frames(
    spec: RunSpec, lo: int, hi: int, errors: np.ndarray, passes: np.ndarray
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The outputs and scores frames (store schema) of cases [lo, hi) of one run, in the order
    a runner would write them: requests start in case order and complete out of order (each
    row moves up to ``DISORDER`` places), so the stored rows are not sorted."""
    n, replays = errors.shape
    rows = n * replays
    ids = np.repeat(np.array(case_ids(lo, hi), dtype=object), replays)
    rng = np.random.default_rng([spec.seed, lo, 1])
    now = dt.datetime.now(dt.UTC)
    hashes = pl.Series(np.frombuffer(rng.bytes(32 * rows), dtype="S32")).bin.encode("hex")
    err = errors.ravel()
    outputs = pl.DataFrame(
        {
            "run_id": spec.run_id,
            "case_id": ids,
            "replay": np.tile(np.arange(replays, dtype=np.int32), n),
            "text": '{"category": "billing", "priority": "normal", "reply": "We are on it."}',
            "tool_calls": "[]",
            "steps": 1,
            "error": _where(err, "timeout after 60s", None),
            "fail_reason": None,
            "latency_ms": rng.gamma(4.0, 60.0, rows),
            "prompt_tokens": rng.integers(200, 400, rows),
            "completion_tokens": rng.integers(20, 80, rows),
            "cost_usd": 0.0001,
            "cached": False,
            "request_hash": hashes,
            "model": "demo-support-1",
            "created_at": now,
        },
        schema=OUTPUT_SCHEMA,
    )
    k = len(SCORERS)
    has = np.ones((rows, k), dtype=bool)  # which (output, scorer) pairs exist
    has[np.repeat(np.arange(lo, hi), replays) % FOURTH_EVERY != 0, -1] = False
    has[err] = False  # errored outputs have no scores
    scored = passes.reshape(rows, k)[has]
    at_row, at_scorer = np.nonzero(has)
    scores = pl.DataFrame(
        {
            "run_id": spec.run_id,
            "scoring_id": initial_scoring_id(spec.run_id),
            "case_id": ids[at_row],
            "replay": outputs["replay"].to_numpy()[at_row],
            "scorer": np.array(SCORERS, dtype=object)[at_scorer],
            "scorer_index": at_scorer.astype(np.int32),
            "tier": 0,
            "score": scored.astype(np.float64),
            "passed": scored,
            "error": False,
            "reason": _where(scored, "ok", "check failed"),
            "details": None,
        },
        schema=SCORE_SCHEMA,
    )
    finish = np.argsort(np.arange(rows) + rng.uniform(0, DISORDER, rows), kind="stable")
    rank = np.empty(rows, np.int64)
    rank[finish] = np.arange(rows)
    return outputs[finish], scores[np.lexsort((at_scorer, rank[at_row]))]


def expected_counts(errors: np.ndarray, passes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(n_pass, n_fail) per case, computed without evalkit: a replay passes when every scorer
    passed, fails otherwise, and counts as neither when its output errored."""
    ok = passes.all(axis=2)
    return (ok & ~errors).sum(1), (~ok & ~errors).sum(1)


def ingest(
    store: Store, spec: RunSpec, n: int, replays: int, batch: int, edited: bool
) -> tuple[float, float, np.ndarray, np.ndarray]:
    """Write one run; returns (seconds in store calls, seconds generating, n_pass, n_fail)."""
    cases = make_cases(n, edited)
    manifest = {"run": {"run_id": spec.run_id, "label": spec.label}, "config_hash": "bench"}
    t0 = time.perf_counter()
    store.create_run(manifest, cases)
    in_store = time.perf_counter() - t0
    generating = 0.0
    n_pass, n_fail = np.zeros(n, np.int64), np.zeros(n, np.int64)
    for lo in range(0, n, batch):
        hi = min(n, lo + batch)
        t0 = time.perf_counter()
        errors, passes = draw(spec, lo, hi, replays)
        outputs, scores = frames(spec, lo, hi, errors, passes)
        n_pass[lo:hi], n_fail[lo:hi] = expected_counts(errors, passes)
        t1 = time.perf_counter()
        store.write_results(outputs, scores)
        t2 = time.perf_counter()
        generating, in_store = generating + t1 - t0, in_store + t2 - t1
    return in_store, generating, n_pass, n_fail


def expected(
    n: int, base: tuple[np.ndarray, np.ndarray], cand: tuple[np.ndarray, np.ndarray]
) -> dict[str, Any]:
    """Verdict counts per run, paired cases, broken and fixed, from the generator alone."""

    def verdict(n_pass: np.ndarray, n_fail: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        decided = n_pass + n_fail > 0
        return decided & (n_pass > n_fail), ~decided

    (bp, be), (cp, ce) = verdict(*base), verdict(*cand)
    paired = np.array([i % EDIT_EVERY != 7 for i in range(n)])
    ok = paired & ~be & ~ce
    return {
        "base": {"passed": int(bp.sum()), "failed": int((~bp & ~be).sum()), "error": int(be.sum())},
        "cand": {"passed": int(cp.sum()), "failed": int((~cp & ~ce).sum()), "error": int(ce.sum())},
        "paired": int(paired.sum()),
        "broken": int((ok & bp & ~cp).sum()),
        "fixed": int((ok & ~bp & cp).sum()),
        "n_all": int(ok.sum()),
    }


def _counts(verdicts: pl.DataFrame) -> dict[str, int]:
    return {
        "passed": int(verdicts["passed"].fill_null(False).sum()),
        "failed": int((verdicts["passed"] == False).sum()),  # noqa: E712
        "error": int(verdicts["error"].sum()),
    }


def run(n_cases: int, replays: int, batch: int, keep: Path | None = None) -> dict[str, Any]:
    """Ingest both runs into a fresh store (``keep``: at that path, left in place), then time
    the analysis; returns the figures."""
    figures: dict[str, Any] = {"phases": {}}
    base = RunSpec("bench-base", "base", 1, regressed=False)
    cand = RunSpec("bench-cand", "cand", 2, regressed=True)
    policy = GatePolicy(critical_tags=(REGRESSED_TAG, "tag-05"))
    with tempfile.TemporaryDirectory(prefix="evalkit-bench-analysis-") as tmp:
        db = keep or Path(tmp) / "bench.duckdb"
        for stale in (db, db.with_name(db.name + ".wal")):
            stale.unlink(missing_ok=True)
        with phase(figures["phases"], "ingest"), open_store(db, write=True) as store:
            b_store, b_gen, *b_counts = ingest(store, base, n_cases, replays, batch, False)
            c_store, c_gen, *c_counts = ingest(store, cand, n_cases, replays, batch, True)
        figures["ingest_store_s"] = b_store + c_store
        figures["generate_s"] = b_gen + c_gen
        figures["db_mib"] = db.stat().st_size / 2**20
        with open_store(db, read_only=True) as store:
            timings = figures["phases"]
            with phase(timings, "load_and_compare"):
                comparison = load_comparison(store, "base", "cand")
            with phase(timings, "slices"):
                table = slices(comparison.paired)
            with phase(timings, "gate"):
                decision = decide(comparison.paired, policy, corpus=comparison.cand.cases)
            with phase(timings, "paired_growth"):  # the report's table: no budget, t intervals
                growth = usage_table(comparison.paired, policy)
            budgeted = dataclasses.replace(policy, relative_budgets=BUDGETS)
            with phase(timings, "paired_growth_budgeted"):  # the budgeted rows bootstrapped
                growth_budgeted = usage_table(comparison.paired, budgeted)
            outputs = comparison.base.outputs.height + comparison.cand.outputs.height
            score_rows = comparison.base.scores.height + comparison.cand.scores.height
    want = expected(n_cases, (b_counts[0], b_counts[1]), (c_counts[0], c_counts[1]))
    all_row = table.filter(pl.col("slice") == "ALL").row(0, named=True)
    broken, fixed = flips(comparison.paired)
    got = {
        "base": _counts(comparison.base_verdicts),
        "cand": _counts(comparison.cand_verdicts),
        "paired": comparison.paired.height,
        "broken": broken.height,
        "fixed": fixed.height,
        "n_all": all_row["n"],
    }
    analysis_s = sum(timings[p]["s"] for p in ("load_and_compare", "slices", "gate"))
    figures.update(
        cores=os.cpu_count(),
        settings={"cases": n_cases, "replays": replays, "batch": batch},
        outputs=outputs,
        score_rows=score_rows,
        slices=table.height,
        all_slice={k: all_row[k] for k in ("n", "broken", "fixed", "diff", "diff_lo", "diff_hi")},
        gate={"status": decision.status, "findings": len(decision.findings)},
        critical={s.tag: s.state for s in decision.critical},
        expected=want,
        measured=got,
        verified=want == got and all_row["broken"] == want["broken"],
        analysis_s=analysis_s,
        growth_rows=growth.height,
        growth_share=timings["paired_growth"]["s"] / analysis_s,
        growth_budgeted_share=timings["paired_growth_budgeted"]["s"] / analysis_s,
        growth_bootstrapped=int((growth_budgeted["interval"] == "paired bootstrap").sum()),
        analysis_peak_rss_mib=max(timings[p]["peak_rss_mib"] for p in timings if p != "ingest"),
        ru_maxrss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    )
    return figures


def _print(f: dict[str, Any]) -> None:
    s, p = f["settings"], f["phases"]
    print(f"cores: {f['cores']}")
    print(
        f"{s['cases']} cases x {s['replays']} replays x 2 runs: {f['outputs']} outputs, "
        f"{f['score_rows']} score rows; DuckDB file {f['db_mib']:.0f} MiB"
    )
    print(
        f"ingest: {f['ingest_store_s']:.2f} s in store calls (create_run + write_results, "
        f"batches of {s['batch']} cases); generating the frames {f['generate_s']:.2f} s; "
        f"peak RSS {p['ingest']['peak_rss_mib']:.0f} MiB"
    )
    for name in ("load_and_compare", "slices", "gate", "paired_growth", "paired_growth_budgeted"):
        print(f"  {name:22} {p[name]['s']:6.2f} s   peak RSS {p[name]['peak_rss_mib']:6.0f} MiB")
    print(
        f"analysis (verdicts + paired frame + {f['slices']} slices + gate): "
        f"{f['analysis_s']:.2f} s; peak RSS {f['analysis_peak_rss_mib']:.0f} MiB "
        f"(ru_maxrss over the whole script {f['ru_maxrss_mib']:.0f} MiB)"
    )
    print(
        f"paired cost/latency/steps growth ({f['growth_rows']} slice x metric rows): "
        f"{f['growth_share']:.1%} of the analysis time with no relative budget (t intervals); "
        f"{f['growth_budgeted_share']:.1%} with {dict(BUDGETS)} on the critical tags "
        f"({f['growth_bootstrapped']} rows bootstrapped)"
    )
    a = f["all_slice"]
    print(
        f"ALL: n {a['n']}, broken {a['broken']}, fixed {a['fixed']}, diff {a['diff']:+.4f} "
        f"[{a['diff_lo']:+.4f}, {a['diff_hi']:+.4f}]; gate {f['gate']['status']} "
        f"({f['gate']['findings']} findings); critical {f['critical']}"
    )
    print(f"verdicts base {f['measured']['base']}, cand {f['measured']['cand']}")
    print(f"verified: {f['verified']}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print its figures (and write them as JSON with ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100_000, help="cases per run")
    parser.add_argument("--replays", type=int, default=5, help="replays per case")
    parser.add_argument("--batch-cases", type=int, default=50_000, help="cases per write batch")
    parser.add_argument("--db", type=Path, help="write the store here and keep it (profiling)")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args(argv)
    figures = run(args.cases, args.replays, args.batch_cases, args.db)
    _print(figures)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2, default=str), encoding="utf-8")
    return 0 if figures["verified"] else 1


if __name__ == "__main__":
    sys.exit(main())

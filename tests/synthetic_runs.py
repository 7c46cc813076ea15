"""Synthetic paired runs for the compare, gate, report and notebook tests.

``make_run`` builds one run's frames (cases, outputs, scores) following the store's data
contract; ``seed000_runs`` is seed 000's 600-case example; ``write_store`` writes runs into a
DuckDB file through the store's own writer API.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from evalkit.compare.analysis import RunData
from evalkit.corpus.cases import Case
from evalkit.store import OUTPUT_SCHEMA, SCORE_SCHEMA, open_store

MANIFEST = {
    "suite": "demo",
    "provider": {"name": "demo", "base_url": None},
    "model": {"id": "demo-model", "snapshot": "demo-model"},
    "prompt": {"version": "v1", "template_hash": "t1"},
    "tools": {"hash": "tools1"},
    "sampling": {"temperature": 0.0, "top_p": None, "seed": None, "max_tokens": None},
    "judge": None,
    "replays": 1,
    "scorer_files": {},
    "harness": {"evalkit": "0.1.0"},
    "config_hash": "cfg",
}


@dataclass
class C:
    """A synthetic case. ``replays``: p pass, f scorer fail, r runner fail_reason, e provider
    error, s scorer could not decide."""

    id: str
    replays: str
    tags: list[str] = field(default_factory=list)
    criticality: str = "normal"
    hash: str = "h"
    sealed: bool = False


def make_run(run_id: str, cases: list[C], manifest: dict | None = None, label: str = "") -> RunData:
    """One run's frames, following the store's data contract."""
    case_rows, outs, scores = [], [], []
    for c in cases:
        case_rows.append({
            "run_id": run_id, "case_id": c.id, "case_hash": c.hash, "tags": c.tags,
            "criticality": c.criticality, "sealed": c.sealed,
            "input": f'{{"messages": [{{"role": "user", "content": "question {c.id}"}}]}}',
            "provenance": "{}", "source": f"cases/x.yaml:{len(case_rows) + 1}",
        })  # fmt: skip
        for i, r in enumerate(c.replays):
            outs.append({
                "run_id": run_id, "case_id": c.id, "replay": i,
                "text": None if r == "e" else f"{run_id} says {r} to {c.id}", "tool_calls": "[]",
                "steps": 1, "error": "timeout after 4 retries" if r == "e" else None,
                "fail_reason": "unexpected tool call refund(x=1)" if r == "r" else None,
                "latency_ms": 100.0, "prompt_tokens": 10, "completion_tokens": 5,
                "cost_usd": 0.001, "cached": False,
            })  # fmt: skip
            if r == "e":
                continue
            ok = r != "f"
            scores.append({
                "run_id": run_id, "scoring_id": f"{run_id}/s0", "case_id": c.id, "replay": i,
                "scorer": "contains", "scorer_index": 0, "tier": 0, "score": float(ok),
                "passed": ok, "error": False,
                "reason": "found 'refund'" if ok else "missing 'refund'",
            })  # fmt: skip
            scores.append({
                "run_id": run_id, "scoring_id": f"{run_id}/s0", "case_id": c.id, "replay": i,
                "scorer": "json_schema", "scorer_index": 1, "tier": 0, "score": 1.0,
                "passed": r != "s", "error": r == "s",
                "reason": "could not parse" if r == "s" else "valid",
            })  # fmt: skip
    case_schema = {"tags": pl.List(pl.String)}
    return RunData(
        run_id=run_id,
        label=label or run_id,
        manifest=dict(manifest or MANIFEST),
        cases=pl.DataFrame(case_rows, schema_overrides=case_schema),
        outputs=pl.DataFrame(
            outs, schema_overrides={"text": pl.String, "error": pl.String, "fail_reason": pl.String}
        ),
        scores=pl.DataFrame(scores),
    )


def seed000_runs(cand_label: str = "cand") -> tuple[RunData, RunData]:
    """Seed 000: 450 general, 100 billing, 50 policy cases (10 must_pass). The candidate fixes
    18 and breaks 3 general cases, breaks 8 billing cases and fixes none, and one must_pass
    policy case (a frozen incident) fails."""
    base, cand = [], []
    for i in range(450):
        b = "p" if i < 380 else "f"
        c = "f" if i < 3 else "p" if i < 398 else b
        base.append(C(f"general-{i:03d}", b, ["general"]))
        cand.append(C(f"general-{i:03d}", c, ["general"]))
    for i in range(100):
        base.append(C(f"billing-{i:03d}", "p" if i < 92 else "f", ["billing"]))
        cand.append(C(f"billing-{i:03d}", "f" if i < 8 or i >= 92 else "p", ["billing"]))
    for i in range(50):
        crit = "must_pass" if i < 10 else "normal"
        base.append(C(f"policy-{i:03d}", "p", ["policy"], crit))
        cand.append(C(f"policy-{i:03d}", "r" if i == 0 else "p", ["policy"], crit))
    return make_run("base-run", base, label="base"), make_run("cand-run", cand, label=cand_label)


def _cases_for(run: RunData) -> list[Case]:
    return [
        Case(
            id=r["case_id"],
            tags=tuple(r["tags"]),
            criticality=r["criticality"],
            provenance={},
            messages=({"role": "user", "content": f"question {r['case_id']}"},),
            vars=None,
            fixtures={},
            scorers=(),
            hash=r["case_hash"],
            source=r["source"],
            sealed=r["sealed"],
        )
        for r in run.cases.iter_rows(named=True)
    ]


def _conform(frame: pl.DataFrame, schema: dict) -> pl.DataFrame:
    """The store's column set and types; columns the synthetic frame lacks are null."""
    cols = [pl.col(c) if c in frame.columns else pl.lit(None).alias(c) for c in schema]
    return frame.select([col.cast(t) for col, t in zip(cols, schema.values(), strict=True)])


def write_store(path: Path, runs: list[RunData], status: str = "complete") -> None:
    """Write synthetic runs into a DuckDB store through the store's writer API; ``status`` is
    what each run ends as (``running`` leaves it as a killed run would)."""
    with open_store(path, write=True) as store:
        for run in runs:
            manifest = run.manifest.to_dict() | {"run": {"run_id": run.run_id, "label": run.label}}
            store.create_run(manifest, _cases_for(run))
            outputs = _conform(run.outputs.with_columns(model=pl.lit("demo-model")), OUTPUT_SCHEMA)
            scores = run.scores.with_columns(scoring_id=pl.lit(f"{run.run_id}/s0"))
            if outputs.height:
                store.write_results(outputs, _conform(scores, SCORE_SCHEMA))
            if status != "running":
                store.finish_run(run.run_id, status, {})


#: The runs table as every evalkit store has had it: a test's "store written by an older
#: evalkit" starts with it (a DuckDB file without one is someone else's and is refused).
OLD_RUNS_DDL = (
    "CREATE TABLE runs (run_id VARCHAR, label VARCHAR, created_at TIMESTAMPTZ, "
    "finished_at TIMESTAMPTZ, config_hash VARCHAR, status VARCHAR, manifest VARCHAR, "
    "summary VARCHAR)"
)

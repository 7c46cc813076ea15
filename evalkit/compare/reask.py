"""Targeted re-asks: a flake list excuses a failing must_pass case only once the gate job asked
the candidate that case again and it failed no more often than the list says.

A measured flake rate says how often the *baseline's* configuration changed its verdict on a
case. It is no licence for the candidate to fail that case every time: ``reask_flakes`` (run by
``evalkit gate`` / ``compare``, ``--reask-flakes K``, default :data:`REASKS`) runs the
candidate's own configuration ``K`` times on exactly the must_pass cases it failed that a
trusted flake list would excuse, with the response cache bypassed, as runs labelled
``reask:<candidate run id>``. ``reask_findings`` (the gate flow) keeps a flake excuse only when
those runs, of the candidate's configuration and case version, number at least :data:`REASKS`
and failed the case at most the listed flake rate of the time.

The rule itself (`excused`, `REASKS`) lives in `evalkit.compare.reask_rule`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from evalkit.compare.decision import Finding
from evalkit.compare.reask_rule import LABEL_PREFIX, REASKS, excused
from evalkit.compare.verdicts import verdicts

if TYPE_CHECKING:
    from evalkit.compare.analysis import Comparison, RunData
    from evalkit.corpus.suite import Suite
    from evalkit.store import Store

__all__ = [
    "LABEL_PREFIX",
    "REASKS",
    "excused",
    "failing_must_pass",
    "reask_evidence",
    "reask_findings",
    "reask_flakes",
]


def reask_evidence(store: Store, cand: RunData) -> pl.DataFrame:
    """Per case, the candidate's re-asks: ``case_id, reasks, fails`` (an errored re-ask counts
    as failed), from complete ``reask:`` runs of its configuration on its case version."""
    runs = store.runs().filter(
        (pl.col("label") == f"{LABEL_PREFIX}{cand.run_id}")
        & (pl.col("config_hash") == (cand.config_hash or ""))
        & (pl.col("status") == "complete")
    )
    frames = [
        verdicts(store.outputs(r), store.scores(r), store.cases(r)).select(
            "case_id", "case_hash", "passed"
        )
        for r in runs["run_id"].to_list()
    ]
    empty = pl.DataFrame(schema={"case_id": pl.String, "reasks": pl.Int64, "fails": pl.Int64})
    if not frames:
        return empty
    versions = cand.cases.select("case_id", pl.col("case_hash").alias("cand_hash"))
    return (
        pl.concat(frames)
        .join(versions, on="case_id")
        .filter(pl.col("case_hash") == pl.col("cand_hash"))
        .group_by("case_id")
        .agg(
            pl.len().cast(pl.Int64).alias("reasks"),
            (~pl.col("passed").fill_null(False)).sum().cast(pl.Int64).alias("fails"),
        )
    )


def failing_must_pass(comparison: Comparison) -> list[str]:
    """The must_pass cases the candidate failed (decided, not errored)."""
    paired = comparison.paired
    failed = paired.filter(
        (pl.col("criticality") == "must_pass") & (pl.col("cand") == False)  # noqa: E712
        & ~pl.col("cand_error").fill_null(False)
    )  # fmt: skip
    return sorted(failed["case_id"].unique().to_list())


def reask_findings(
    store: Store, comparison: Comparison, rates: pl.DataFrame
) -> tuple[pl.DataFrame, list[Finding]]:
    """(``rates`` with the excuses the re-asks do not bear out dropped, a finding per case)."""
    failing = set(failing_must_pass(comparison))
    wanted = rates.filter((pl.col("flake_rate") > 0) & pl.col("case_id").is_in(list(failing)))
    if not wanted.height:
        return rates, []
    evidence = dict(
        (r["case_id"], (r["reasks"], r["fails"]))
        for r in reask_evidence(store, comparison.cand).iter_rows(named=True)
    )
    dropped, out = [], []
    for row in wanted.iter_rows(named=True):
        case, rate = row["case_id"], row["flake_rate"]
        k, fails = evidence.get(case, (0, 0))
        if excused(k, fails, rate):
            msg = (
                f"flake rate {rate:.0%} of {case} excuses its failure: re-asked {k} times in "
                f"this gate, it failed {fails} (no more often than the list says)"
            )
            out.append(Finding(0, "flakes", (case,), {"reasks": k, "fails": fails}, msg, "info",
                               "reasked"))  # fmt: skip
            continue
        dropped.append(case)
        why = (
            f"re-asked {k} time(s), {REASKS} are needed (`evalkit gate --reask-flakes "
            f"{REASKS}` re-asks it)"
            if k < REASKS
            else f"it failed {fails} of {k} re-asks, more often than the listed {rate:.0%}"
        )
        msg = f"flake rate {rate:.0%} of {case} excuses nothing: {why}"
        out.append(Finding(0, "flakes", (case,), {"reasks": k, "fails": fails}, msg, "warn",
                           "not-reasked"))  # fmt: skip
    return rates.filter(~pl.col("case_id").is_in(dropped)), out


def reask_flakes(
    store: Store, suite: Suite, comparison: Comparison, rates: pl.DataFrame, k: int = REASKS
) -> tuple[list[str], str | None]:
    """Run the candidate's configuration (``suite``, the checkout's) ``k`` times, uncached, on
    the failing must_pass cases a trusted flake list would excuse. Returns (the cases
    re-asked, why none could be: None when they were, or nothing needed it)."""
    from evalkit.corpus.cases import load_corpus
    from evalkit.corpus.manifest import build_manifest
    from evalkit.run.runner import RunOptions, run_suite

    failing = set(failing_must_pass(comparison))
    cases = sorted(
        rates.filter((pl.col("flake_rate") > 0) & pl.col("case_id").is_in(list(failing)))[
            "case_id"
        ].to_list()
    )
    if not cases or k <= 0:
        return [], None
    corpus = load_corpus(suite.root, user_template=suite.config.system.user_template)
    corpus = corpus.select(ids=cases)
    manifest = build_manifest(suite, corpus, run_id="reask", label="reask", selection={})
    if manifest["config_hash"] != comparison.cand.config_hash:
        return [], (
            "the checkout's configuration is not the candidate's (config_hash "
            f"{manifest['config_hash'][:12]} ≠ {str(comparison.cand.config_hash)[:12]})"
        )
    label = f"{LABEL_PREFIX}{comparison.cand.run_id}"
    for _ in range(k):
        run_suite(suite, corpus, store, RunOptions(label=label, use_cache=False, progress=False))
    return cases, None

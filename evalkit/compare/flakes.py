"""The noise floor, measured: rerun one configuration k times and see which verdicts move.

Temperature zero does not make a model deterministic. ``measure_flakes`` runs the same
configuration ``k`` times with the response cache bypassed, collapses each run to per-case
verdicts, and stores for that ``config_hash`` every case, with the hash of the version measured
and how many runs disagreed with its majority.

A flake list excuses only what it measured (`excusing_flakes`): a must_pass failure warns instead
of blocking only when that case was measured flaky on the *baseline's* configuration, in the
same version (case hash) the baseline and the candidate ran, before the candidate run started.
A list measured on the candidate's own configuration, on another wording of the case, after the
candidate, or before evalkit recorded case hashes excuses nothing; `shown_flakes` lists those
with the reason, for the report.

Examples:
    >>> result = measure_flakes(suite, corpus, store, runs=5)   # doctest: +SKIP
    >>> result.flaky["case_id"].to_list()                        # doctest: +SKIP
    ['billing-ambiguous-007', 'injection-roleplay-003']
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING

import polars as pl

from evalkit.compare.verdicts import verdicts
from evalkit.corpus.cases import Corpus
from evalkit.corpus.suite import Suite
from evalkit.errors import EvalkitError
from evalkit.records import Provider
from evalkit.run.runner import RunOptions, RunSummary, run_suite
from evalkit.store import Store

if TYPE_CHECKING:
    from collections.abc import Callable

    from evalkit.compare.analysis import RunData

    #: Why a record's writer (``written_by`` JSON, None: unknown) is not trusted; None: it is.
    Untrusted = Callable[[str | None], str | None]


@dataclass(frozen=True)
class FlakeResult:
    config_hash: str
    run_ids: tuple[str, ...]
    per_case: pl.DataFrame  # case_id, tags, runs, flips, flake_rate, case_hash
    per_slice: pl.DataFrame  # tag, cases, flaky, flake_rate

    @property
    def flaky(self) -> pl.DataFrame:
        return self.per_case.filter(pl.col("flips") > 0)


def measure_flakes(
    suite: Suite,
    corpus: Corpus,
    store: Store,
    runs: int = 5,
    *,
    label: str = "flakes",
    progress: bool = False,
    provider: Provider | None = None,
) -> FlakeResult:
    """Run the configuration ``runs`` times without the cache and store the flake list.

    A run that stops on an error is marked ``failed`` by the runner (never left ``running``)
    and no flake list is stored; the error names the runs that completed.

    Raises:
        EvalkitError: fewer than 2 runs, or one of the runs failed.
    """
    if runs < 2:
        raise EvalkitError("evalkit flakes measure needs --runs 2 or more to see anything move")
    started: list[str] = []
    summaries: list[RunSummary] = []
    for i in range(runs):
        options = RunOptions(
            label=f"{label}-{i + 1}",
            use_cache=False,
            progress=progress,
            on_start=lambda start: started.append(start.run_id),
        )
        try:
            summaries.append(run_suite(suite, corpus, store, options, provider))
        except Exception as exc:
            failed = started[-1] if len(started) > len(summaries) else "(not started)"
            done = ", ".join(s.run_id for s in summaries) or "none"
            raise EvalkitError(
                f"flakes: run {i + 1} of {runs} ({failed}) failed and is marked failed: {exc}; "
                f"completed runs: {done}; no flake list was stored — rerun evalkit flakes measure"
            ) from exc
    hashes = {s.config_hash for s in summaries}
    if len(hashes) != 1:  # cannot happen unless the config changed mid-measurement
        raise EvalkitError(f"flake runs disagree on config_hash: {sorted(hashes)}")
    per_run = pl.concat(
        [
            verdicts(store.outputs(s.run_id), store.scores(s.run_id), store.cases(s.run_id))
            for s in summaries
        ],
        how="diagonal_relaxed",
    )
    versions = {case.id: case.hash for case in corpus.cases}  # the version each case measured
    per_case = flake_table(per_run).with_columns(
        case_hash=pl.col("case_id").replace_strict(versions, default=None, return_dtype=pl.String)
    )
    config_hash = hashes.pop()
    store.save_flakes(config_hash, per_case)
    return FlakeResult(
        config_hash, tuple(s.run_id for s in summaries), per_case, flake_slices(per_case)
    )


def flake_table(per_run_verdicts: pl.DataFrame) -> pl.DataFrame:
    """Per case: decided runs, runs disagreeing with the majority (``flips``), and their share.

    Errored verdicts (no decision) are left out: an outage is not flakiness.
    """
    decided = per_run_verdicts.filter(pl.col("passed").is_not_null())
    return (
        decided.group_by("case_id")
        .agg(
            pl.col("tags").first(),
            pl.len().alias("runs"),
            pl.col("passed").sum().alias("passes"),
        )
        .with_columns(
            pl.min_horizontal(pl.col("passes"), pl.col("runs") - pl.col("passes")).alias("flips")
        )
        .with_columns((pl.col("flips") / pl.col("runs")).alias("flake_rate"))
        .select("case_id", "tags", "runs", "flips", "flake_rate")
        .sort("case_id")
    )


def flake_slices(per_case: pl.DataFrame) -> pl.DataFrame:
    """Share of each tag's cases that changed verdict with nothing changed."""
    return (
        per_case.explode("tags")
        .rename({"tags": "tag"})
        .drop_nulls("tag")
        .group_by("tag")
        .agg(
            pl.len().alias("cases"),
            (pl.col("flips") > 0).sum().alias("flaky"),
        )
        .with_columns((pl.col("flaky") / pl.col("cases")).alias("flake_rate"))
        .sort("flake_rate", "tag", descending=[True, False])
    )


#: Why a stored flake measurement excuses nothing (``shown_flakes``'s ``why_not``).
CANDIDATE_CONFIG = "measured on the candidate's configuration"
OTHER_WORDING = "measured on another wording of the case"
AFTER_CANDIDATE = "measured after the candidate run"
NO_CASE_HASH = "no case hash recorded (measured before evalkit recorded one)"
NOT_IN_BASELINE = "the baseline run does not have the case"
NO_START = "the candidate run's start is not recorded"


def excusing_flakes(
    store: Store, base: RunData, cand: RunData, untrusted: Untrusted | None = None
) -> pl.DataFrame:
    """The flake rates that may excuse a must_pass failure of ``cand`` against ``base``.

    Only measurements of the baseline's ``config_hash``, recorded before the candidate run was
    created, of the case version (case hash) both runs ran; per case the newest of them.

    Returns:
        ``case_id, flake_rate, runs, flips, case_hash, measured_at``, one row per case (rate 0
        included: a case measured stable).
    """
    rows = _judged(store, base, cand, untrusted).filter(pl.col("why_not").is_null())
    return (
        rows.sort("measured_at", descending=True)
        .unique("case_id", keep="first", maintain_order=True)
        .select("case_id", "flake_rate", "runs", "flips", "case_hash", "measured_at")
        .sort("case_id")
    )


def shown_flakes(
    store: Store, base: RunData, cand: RunData, untrusted: Untrusted | None = None
) -> pl.DataFrame:
    """The flake measurements of either run's configuration that excuse nothing, and why, for
    the report: must_pass cases of the candidate (or the baseline) with a rate above 0 that
    `excusing_flakes` does not excuse; per case and reason the newest measurement.

    Returns:
        ``case_id, flake_rate, why_not, config_hash, case_hash, measured_at``.
    """
    judged = _judged(store, base, cand, untrusted)
    excused = (
        judged.filter(pl.col("why_not").is_null())
        .sort("measured_at", descending=True)
        .unique("case_id", keep="first")
        .filter(pl.col("flake_rate") > 0)["case_id"]
    )
    must_pass = pl.concat(
        [r.cases.filter(pl.col("criticality") == "must_pass")["case_id"] for r in (base, cand)]
    )
    return (
        judged.filter(
            pl.col("why_not").is_not_null()
            & (pl.col("flake_rate") > 0)
            & pl.col("case_id").is_in(must_pass.implode())
            & pl.col("case_id").is_in(cand.cases["case_id"].implode())
            & ~pl.col("case_id").is_in(excused.implode())
        )
        .sort("measured_at", descending=True)
        .unique(["case_id", "why_not"], keep="first")
        .select("case_id", "flake_rate", "why_not", "config_hash", "case_hash", "measured_at")
        .sort("case_id", "why_not")
    )


def _judged(
    store: Store, base: RunData, cand: RunData, untrusted: Untrusted | None = None
) -> pl.DataFrame:
    """Every measurement of either run's configuration with ``why_not`` (null: it excuses);
    ``untrusted`` (`evalkit.compare.trust`) says why a measurement's writer is not trusted."""
    hashes = sorted({h for h in (base.config_hash, cand.config_hash) if h is not None})
    rows = store.flake_measurements(hashes)
    if "written_by" not in rows.columns:
        rows = rows.with_columns(written_by=pl.lit(None, pl.String))
    distrust = pl.lit(None, pl.String)
    if untrusted is not None:
        writers = rows["written_by"].unique().to_list()
        reasons = {w: untrusted(w) for w in writers}
        distrust = pl.col("written_by").replace_strict(
            reasons, default=None, return_dtype=pl.String
        )
        if None in reasons:  # replace_strict does not match null keys
            distrust = (
                pl.when(pl.col("written_by").is_null())
                .then(pl.lit(reasons[None], pl.String))
                .otherwise(distrust)
            )
    started = _created_at(store, cand)
    # the measured cases' versions alone: not a million cases joined for a few measurements
    measured = pl.col("case_id").is_in(rows["case_id"].unique().implode())
    versions = (
        cand.cases.filter(measured)
        .select("case_id", pl.col("case_hash").alias("cand_hash"))
        .join(
            base.cases.filter(measured).select("case_id", pl.col("case_hash").alias("base_hash")),
            on="case_id",
            how="left",
        )
    )
    rows = rows.join(versions, on="case_id", how="left")
    after = pl.lit(True) if started is None else pl.col("measured_at") >= pl.lit(started)
    why_not = (
        pl.when(distrust.is_not_null())
        .then(distrust)
        .when(pl.col("config_hash") != (base.config_hash or ""))
        .then(pl.lit(CANDIDATE_CONFIG))
        .when(after)
        .then(pl.lit(AFTER_CANDIDATE if started is not None else NO_START))
        .when(pl.col("case_hash").is_null())
        .then(pl.lit(NO_CASE_HASH))
        .when(pl.col("base_hash").is_null() & pl.col("cand_hash").is_not_null())
        .then(pl.lit(NOT_IN_BASELINE))
        .when(
            (pl.col("case_hash") != pl.col("cand_hash")).fill_null(True)
            | (pl.col("case_hash") != pl.col("base_hash")).fill_null(True)
        )
        .then(pl.lit(OTHER_WORDING))
        .otherwise(pl.lit(None, pl.String))
    )
    return rows.with_columns(why_not=why_not)


def _created_at(store: Store, run: RunData) -> dt.datetime | None:
    """When ``run`` was created: the runs table's ``created_at``, else its manifest's."""
    runs = store.runs().filter(pl.col("run_id") == run.run_id)
    if runs.height and runs["created_at"][0] is not None:
        created: dt.datetime = runs["created_at"][0]
        return created
    stamp = run.manifest.run.created_at
    return dt.datetime.fromisoformat(stamp) if isinstance(stamp, str) else None

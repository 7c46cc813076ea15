"""The noise floor, measured: rerun one configuration k times and see which verdicts move.

Temperature zero does not make a model deterministic. ``measure_flakes`` runs the same
configuration ``k`` times with the response cache bypassed, collapses each run to per-case
verdicts, and stores for that ``config_hash`` every case with how many runs disagreed with its
majority. The gate reads the latest list for the baseline's config_hash: a must_pass failure on
a measured flaky case warns instead of blocking.

Examples:
    >>> result = measure_flakes(suite, corpus, store, runs=5)   # doctest: +SKIP
    >>> result.flaky["case_id"].to_list()                        # doctest: +SKIP
    ['billing-ambiguous-007', 'injection-roleplay-003']
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from evalkit.compare.verdicts import verdicts
from evalkit.corpus.cases import Corpus
from evalkit.corpus.suite import Suite
from evalkit.errors import EvalkitError
from evalkit.records import Provider
from evalkit.run.runner import RunOptions, RunSummary, run_suite
from evalkit.store import Store


@dataclass(frozen=True)
class FlakeResult:
    config_hash: str
    run_ids: tuple[str, ...]
    per_case: pl.DataFrame  # case_id, tags, runs, flips, flake_rate
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
        raise EvalkitError("evalkit flakes needs --runs 2 or more to see anything move")
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
                f"completed runs: {done}; no flake list was stored — rerun evalkit flakes"
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
    per_case = flake_table(per_run)
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

"""A running run's figures, grown by what each of a driver's periodic merges adds.

:func:`evalkit.run.summary.summarize` reads the whole run back from the store; a Ray driver
merging every few seconds would read its growing run again at every merge, so merging would
cost the square of the run. Instead a periodic merge hands each batch it writes
(:class:`~evalkit.store.merge.MergedBatch`: the rows that won and their scores) to a
:class:`MergeTally`, which counts them as ``summarize`` counts the same rows, and the run's
stored summary grows by them (:meth:`MergeTally.onto`). The final merge counts every figure
again from the store, so what a finished run records never depends on this.

Two figures of a running run are near, not exact: the mean latency (the earlier mean is taken
over every earlier output, a null latency among them included) and the error causes (the
earlier top causes with this merge's counts added: a cause outside the earlier top ones
starts again from zero).

Examples:
    >>> import polars as pl
    >>> from evalkit.store import OUTPUT_SCHEMA, SCORE_SCHEMA
    >>> from evalkit.store.merge import MergedBatch
    >>> outputs = pl.DataFrame({"case_id": ["a", "b"], "replay": [0, 0], "error": [None, "timeout"],
    ...     "latency_ms": [10.0, 30.0], "prompt_tokens": [3, 3], "completion_tokens": [1, 0],
    ...     "cost_usd": [0.5, 0.0], "cached": [False, False]}).select(
    ...     pl.col(c).cast(t) if c in ("case_id", "replay", "error", "latency_ms", "prompt_tokens",
    ...     "completion_tokens", "cost_usd", "cached") else pl.lit(None, t).alias(c)
    ...     for c, t in OUTPUT_SCHEMA.items())
    >>> tally = MergeTally("r1/s0")
    >>> tally.add(MergedBatch(outputs, pl.DataFrame(schema=SCORE_SCHEMA), new_cases=2))
    >>> (tally.outputs, tally.passed, tally.errored, tally.error_causes)
    (2, 1, 1, Counter({'timeout': 1}))
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

import polars as pl

from evalkit.run.summary import RunSummary, top_causes
from evalkit.run.writer import OutputFigures
from evalkit.store.merge import MergedBatch


@dataclass
class MergeTally(OutputFigures):
    """What one merge's batches add to a run's figures (outputs of the run's own scoring;
    ``latency_ms`` summed over the outputs that have one, ``timed`` of them)."""

    scoring_id: str
    cases: int = 0  # case ids with no output before
    timed: int = 0

    def add(self, batch: MergedBatch) -> None:
        """One written batch, counted as :func:`~evalkit.run.summary.summarize` counts it."""
        scores = batch.scores.filter(pl.col("scoring_id") == self.scoring_id)
        verdicts = scores.group_by("case_id", "replay").agg(
            pl.col("error").any().alias("_serr"), pl.col("passed").all().alias("_ok")
        )
        rows = batch.outputs.join(verdicts, on=["case_id", "replay"], how="left").select(
            (pl.col("error").is_not_null() | pl.col("_serr").fill_null(False)).alias("errored"),
            (pl.col("fail_reason").is_null() & pl.col("_ok").fill_null(True)).alias("ok"),
            pl.col("cached").fill_null(False),
            "prompt_tokens",
            "completion_tokens",
            "cost_usd",
            "latency_ms",
        )
        figures = rows.select(
            pl.len().alias("n"),
            pl.col("errored").sum(),
            (~pl.col("errored") & pl.col("ok")).sum().alias("passed"),
            pl.col("cached").sum(),
            pl.col("prompt_tokens").sum(),
            pl.col("completion_tokens").sum(),
            pl.col("cost_usd").sum().alias("cost"),
            pl.col("cost_usd").filter(pl.col("cached")).sum().alias("cost_cached"),
            pl.col("latency_ms").sum().alias("latency"),
            pl.col("latency_ms").count().alias("timed"),
        ).row(0, named=True)
        self.outputs += int(figures["n"])
        self.cases += batch.new_cases
        self.errored += int(figures["errored"])
        self.passed += int(figures["passed"])
        self.cached += int(figures["cached"])
        self.prompt_tokens += int(figures["prompt_tokens"] or 0)
        self.completion_tokens += int(figures["completion_tokens"] or 0)
        self.cost_usd += float(figures["cost"] or 0.0)
        self.cost_cached_usd += float(figures["cost_cached"] or 0.0)
        self.latency_ms += float(figures["latency"] or 0.0)
        self.timed += int(figures["timed"])
        # the store's wording of a cause (error_causes), of the rows as stored (scrubbed)
        self.error_causes.update(e for e in batch.outputs["error"].to_list() if e is not None)
        failed = scores.filter(pl.col("error").fill_null(False))
        self.error_causes.update(
            f"scorer {scorer}: {reason or ''}"
            for scorer, reason in failed.select("scorer", "reason").iter_rows()
        )

    def onto(self, summary: RunSummary, *, expected_outputs: int) -> RunSummary:
        """``summary`` (the run's figures before this merge) with this merge's added."""
        outputs = summary.outputs + self.outputs
        errored, passed = summary.errored + self.errored, summary.passed + self.passed
        cost = summary.cost_usd + self.cost_usd
        cost_cached = summary.cost_cached_usd + self.cost_cached_usd
        timed = summary.outputs + self.timed
        latency = summary.mean_latency_ms * summary.outputs + self.latency_ms
        causes = Counter({c.cause: c.count for c in summary.error_causes}) + self.error_causes
        return replace(
            summary,
            cases=summary.cases + self.cases,
            outputs=outputs,
            passed=passed,
            failed=outputs - errored - passed,
            errored=errored,
            prompt_tokens=summary.prompt_tokens + self.prompt_tokens,
            completion_tokens=summary.completion_tokens + self.completion_tokens,
            cost_usd=cost,
            mean_latency_ms=round(latency / timed, 2) if timed else 0.0,
            expected_outputs=expected_outputs,
            cached_outputs=summary.cached_outputs + self.cached,
            cost_spent_usd=cost - cost_cached,
            cost_cached_usd=cost_cached,
            error_causes=top_causes(causes),
            case_counts=None,
        )

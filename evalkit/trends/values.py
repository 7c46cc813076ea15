"""The values `evalkit.history` returns: a tag's rate in one run, a point (one run of a series),
a series' trend test, and the history with its findings; frozen, with Polars frames and a
JSON form for notebooks and ``evalkit history --format json``.

Examples:
    >>> h = History(by="label", tag=None, points=(), trends=(), findings=(), alpha=0.05,
    ...     level=0.95)
    >>> h.critical_tags, h.frame().columns[:5], h.to_dict()["points"]
    ((), ['series', 'run_id', 'label', 'at', 'tag'], [])
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass
from typing import Any

import polars as pl

from evalkit.compare.decision import Finding
from evalkit.stats.trend import TrendResult
from evalkit.store.history_queries import ALL


@dataclass(frozen=True, kw_only=True)
class TagRate:
    """A tag's cases in one run: ``rate`` = passed / decided with its Wilson interval
    (``None`` when no case was decided), per case — each case the majority of its replays, the
    run's one pass rate (`evalkit.run.summary`); ``unstable`` cases had disagreeing replays."""

    tag: str
    cases: int
    decided: int
    passed: int
    errored: int
    unstable: int
    rate: float | None
    lo: float | None
    hi: float | None


@dataclass(frozen=True, kw_only=True)
class HistoryPoint:
    """One run of a series: its tags' rates, unstable and flaky cases, usage per case replay,
    and the models the provider served (``(model id, outputs)``, most first)."""

    series: str
    run_id: str
    label: str
    at: dt.datetime  # promoted_at for a baseline, created_at for a label's run
    config_hash: str
    tags: tuple[TagRate, ...]
    flaky: int | None  # flips > 0 in the newest flake measurement of its config; None: none
    outputs: int
    cached: int
    mean_latency_ms: float | None
    mean_cost_usd: float | None
    mean_total_tokens: float | None
    mean_steps: float | None
    served_models: tuple[tuple[str, int], ...]
    snapshot: str | None  # the configured system.snapshot
    critical_tags: tuple[str, ...]
    promoted_by: str | None = None
    replays: int = 1  # per case: each rate counts a case once, its replays under a pass rule
    rate_basis: str = "per case"  # what its rates count (`evalkit.run.rate_basis`)

    @property
    def served_model(self) -> str | None:
        """The model that served most of the run's outputs."""
        return self.served_models[0][0] if self.served_models else None

    def rate(self, tag: str = ALL) -> TagRate | None:
        return next((t for t in self.tags if t.tag == tag), None)

    @property
    def unstable(self) -> int:
        everything = self.rate(ALL)
        return everything.unstable if everything else 0


@dataclass(frozen=True)
class UnstableTrend:
    """The trend test of one series: the unstable share of its last points, oldest first."""

    series: str
    run_ids: tuple[str, ...]
    shares: tuple[float, ...]
    test: TrendResult


@dataclass(frozen=True, kw_only=True)
class GateReuse:
    """How often one baseline's pinned exam was consulted: the gate decisions logged against
    it (`evalkit.store.gate_log`; ``evalkit gate``, ``evalkit compare``, ``Project.gate`` and
    ``.compare``), each one more look at the same cases — the adaptive reuse that erodes a
    holdout — how many of them stopped the candidate and how many ran the sealed slice. A
    promoted baseline no decision was logged against has ``gates`` 0."""

    base_run_id: str
    exam_id: str | None  # the baseline's pinned exam (None: promoted without one)
    corpus_hash: str | None  # the baseline's corpus version
    n_cases: int | None
    gates: int
    stopped: int  # BLOCKED or UNVERIFIED
    sealed_gates: int  # decisions on a candidate that ran the sealed slice
    first_at: dt.datetime | None
    last_at: dt.datetime | None


@dataclass(frozen=True, kw_only=True)
class History:
    """What `history` returns: the points (series by series, oldest first), each series' trend
    test and the findings; `frame` and `runs_frame` give them as Polars frames."""

    by: str
    tag: str | None
    points: tuple[HistoryPoint, ...]
    trends: tuple[UnstableTrend, ...]
    findings: tuple[Finding, ...]
    alpha: float
    level: float
    reuse: tuple[GateReuse, ...] = ()

    @property
    def rate_basis(self) -> str:
        """What its pass rates count, in words (`evalkit.run.summary.rate_basis`): per case,
        each case's replays under its run's pass rule (majority by default).

        Examples:
            >>> History(by="label", tag=None, points=(), trends=(), findings=(), alpha=0.05,
            ...     level=0.95).rate_basis
            'per case'
        """
        from evalkit.run.summary import rate_basis

        bases = {p.rate_basis for p in self.points}
        if len(bases) <= 1:
            return bases.pop() if bases else rate_basis(1)
        if all("majority" in b or b == "per case" for b in bases):
            return "per case, majority of its replays"
        return "per case, each run's pass rule over its replays"

    @property
    def critical_tags(self) -> tuple[str, ...]:
        """The critical tags of the newest point's gate policy."""
        newest = max(self.points, key=lambda p: p.at, default=None)
        return newest.critical_tags if newest else ()

    def frame(self) -> pl.DataFrame:
        """One row per point and tag: ``series, run_id, label, at, tag, cases, decided,
        passed, errored, unstable, rate, lo, hi, served_model, model_changed``."""
        rows = [
            {"series": p.series, "run_id": p.run_id, "label": p.label, "at": p.at}
            | asdict(t)
            | {"served_model": p.served_model, "model_changed": changed}
            for p, changed in self._with_changes()
            for t in p.tags
        ]
        return pl.DataFrame(rows, schema=_FRAME_SCHEMA)

    def runs_frame(self) -> pl.DataFrame:
        """One row per point: ``series, run_id, label, at, pass_rate`` (per case, each the
        majority of its ``replays``: the run's one pass rate), ``replays, cases, unstable,
        flaky, mean_latency_ms, mean_cost_usd, mean_total_tokens, mean_steps, cached,
        served_model, model_changed``."""
        rows = []
        for p, changed in self._with_changes():
            everything = p.rate(ALL)
            rows.append({
                "series": p.series, "run_id": p.run_id, "label": p.label, "at": p.at,
                "pass_rate": everything.rate if everything else None, "replays": p.replays,
                "cases": everything.cases if everything else 0, "unstable": p.unstable,
                "flaky": p.flaky, "mean_latency_ms": p.mean_latency_ms,
                "mean_cost_usd": p.mean_cost_usd, "mean_total_tokens": p.mean_total_tokens,
                "mean_steps": p.mean_steps, "cached": p.cached,
                "served_model": p.served_model, "model_changed": changed,
            })  # fmt: skip
        return pl.DataFrame(rows, schema=_RUNS_SCHEMA)

    def reuse_frame(self) -> pl.DataFrame:
        """One row per baseline and pinned exam (`GateReuse`): the gate decisions taken
        against it, most recently consulted first.

        Examples:
            >>> empty = History(by="label", tag=None, points=(), trends=(), findings=(),
            ...     alpha=0.05, level=0.95)
            >>> empty.reuse_frame().columns[:5]
            ['base_run_id', 'exam_id', 'corpus_hash', 'n_cases', 'gates']
        """
        return pl.DataFrame([asdict(r) for r in self.reuse], schema=_REUSE_SCHEMA)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the points, trends and findings (``evalkit history --format json``)."""
        return {
            "by": self.by,
            "tag": self.tag,
            "critical_tags": list(self.critical_tags),
            "points": [_jsonable(asdict(p)) for p in self.points],
            "trends": [_jsonable(asdict(t)) for t in self.trends],
            "findings": [_jsonable(asdict(f) | {"key": f.key}) for f in self.findings],
            "reuse": [_jsonable(asdict(r)) for r in self.reuse],
        }

    def _with_changes(self) -> list[tuple[HistoryPoint, bool]]:
        """Each point with whether its served model differs from the previous point's."""
        out: list[tuple[HistoryPoint, bool]] = []
        before: dict[str, str | None] = {}
        for p in self.points:
            prev = before.get(p.series)
            out.append((p, prev is not None and p.served_model != prev))
            before[p.series] = p.served_model
        return out


_FRAME_SCHEMA: dict[str, Any] = {
    "series": pl.String, "run_id": pl.String, "label": pl.String,
    "at": pl.Datetime("us", "UTC"), "tag": pl.String, "cases": pl.Int64, "decided": pl.Int64,
    "passed": pl.Int64, "errored": pl.Int64, "unstable": pl.Int64, "rate": pl.Float64,
    "lo": pl.Float64, "hi": pl.Float64, "served_model": pl.String, "model_changed": pl.Boolean,
}  # fmt: skip
_RUNS_SCHEMA: dict[str, Any] = {
    "series": pl.String, "run_id": pl.String, "label": pl.String,
    "at": pl.Datetime("us", "UTC"), "pass_rate": pl.Float64, "replays": pl.Int64,
    "cases": pl.Int64, "unstable": pl.Int64, "flaky": pl.Int64,
    "mean_latency_ms": pl.Float64, "mean_cost_usd": pl.Float64,
    "mean_total_tokens": pl.Float64, "mean_steps": pl.Float64, "cached": pl.Int64,
    "served_model": pl.String, "model_changed": pl.Boolean,
}  # fmt: skip

_REUSE_SCHEMA: dict[str, Any] = {
    "base_run_id": pl.String, "exam_id": pl.String, "corpus_hash": pl.String,
    "n_cases": pl.Int64, "gates": pl.Int64, "stopped": pl.Int64, "sealed_gates": pl.Int64,
    "first_at": pl.Datetime("us", "UTC"), "last_at": pl.Datetime("us", "UTC"),
}  # fmt: skip


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dt.datetime):
        return value.isoformat()
    return value

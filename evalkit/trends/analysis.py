"""History across runs: per promoted baseline, or per label over time, how each tag's pass rate,
the unstable and flaky cases, cost, latency and the served model moved.

A point is one run. ``by="baseline"`` follows the promotions of each suite (and tier) in the
order they were made; ``by="label"`` follows the complete runs of each label (``nightly``, ...)
in the order they were created. Each series is a line of points; ``last`` keeps the newest N of
each. Pass rates are per case, each case the majority of its replays (the rate ``evalkit run``
and ``evalkit runs list`` state: `evalkit.run.summary`), over decided cases (errored ones are
counted apart), with Wilson intervals, which hold at the small n of a tag. Every count is made
in the store (`evalkit.store.history_queries`), so a long history reads no outputs into Python.

"Unstable cases are growing" is a warning finding with a stated false-alarm rate: a series is
cut into non-overlapping windows of ``trend_runs`` points from its first run (runs 1-10,
11-20, ...), and each window is tested *once*, when it is complete, for an increasing
Mann–Kendall trend in the share of cases whose replays disagreed (the permutation p-value,
valid with ties at any n: `evalkit.stats.trend.mann_kendall_permutation`) at
``alpha * trend_runs / horizon``. A stationary series then raises the warning at most
``alpha`` of the time over any ``horizon`` runs (5 % over 30 runs by default: at most 3 windows
at 1.67 % each; a seeded simulation in the tests checks it). Testing a sliding window at every
run instead fired within 30 runs with probability 0.52. The warning stays on the newest
complete window until the next one completes. The share, not the count, so that a corpus
growing over months does not read as instability growing. A change of the served model between
two points of a series is an info finding (the chart marks it).

``History.reuse`` counts, per baseline and pinned exam, the gate decisions taken against it
(`evalkit.trends.reuse`): the looks at the same cases that erode a holdout.

Examples:
    >>> h = history(open_store("data/evalkit.duckdb"), by="label", last=10)  # doctest: +SKIP
    >>> h.frame().columns[:5]                                                  # doctest: +SKIP
    ['series', 'run_id', 'label', 'at', 'tag']
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import polars as pl

from evalkit.compare.decision import Finding
from evalkit.errors import StoreError
from evalkit.replay_rules import PassRules
from evalkit.run.rate_basis import rate_basis
from evalkit.run_manifest import RunManifest
from evalkit.stats.intervals import wilson_interval
from evalkit.stats.trend import TrendResult, mann_kendall, mann_kendall_permutation
from evalkit.store.history_queries import (
    ALL,
    counted_rules,
    flaky_counts,
    tag_counts,
    usage_by_model,
)
from evalkit.trends.reuse import gate_reuse
from evalkit.trends.values import (
    GateReuse,
    History,
    HistoryPoint,
    TagRate,
    UnstableTrend,
)

if TYPE_CHECKING:
    from evalkit.store import Store

By = Literal["baseline", "label"]
#: How many points a window of the unstable-cases trend test holds.
TREND_RUNS = 10
#: Over this many runs a stationary series raises the trend warning with probability <= alpha.
TREND_HORIZON = 30
UNSTABLE_GROWING = "history:unstable_growing"
SERVED_MODEL_CHANGE = "history:served_model_change"
__all__ = ["GateReuse", "History", "HistoryPoint", "TagRate", "UnstableTrend", "history"]


def history(
    store: Store,
    tag: str | None = None,
    last: int | None = None,
    by: By = "baseline",
    *,
    label: str | None = None,
    trend_runs: int = TREND_RUNS,
    alpha: float = 0.05,
    horizon: int = TREND_HORIZON,
    level: float = 0.95,
) -> History:
    """The history of the store's promoted baselines (``by="baseline"``) or of each label's
    complete runs (``by="label"``): see the module docstring.

    Args:
        tag: only the cases carrying this tag (their rate is the tag's and ``ALL``'s).
        last: keep each series' newest ``last`` points.
        label: only the runs with this label (``by="label"``: one series; ``by="baseline"``:
            the promoted runs carrying it).
        trend_runs: the points in each window of the unstable trend test.
        horizon: the runs over which its false-alarm rate is at most ``alpha``.

    Raises:
        StoreError: ``tag`` is carried by no case of the selected runs.
        ValueError: ``by`` is neither "baseline" nor "label", or ``last``/``trend_runs`` < 1.
    """
    if by not in ("baseline", "label"):
        raise ValueError(f"by must be 'baseline' or 'label', got {by!r}")
    if (last is not None and last < 1) or trend_runs < 1:
        raise ValueError(f"last and trend_runs must be >= 1, got {last}, {trend_runs}")
    if horizon < trend_runs:
        raise ValueError(f"horizon ({horizon}) must be at least trend_runs ({trend_runs})")
    chosen = _chosen_runs(store, by, last, label)
    run_ids = chosen["run_id"].unique().to_list()
    counts = tag_counts(store, run_ids, tag)
    if tag is not None and run_ids and counts.is_empty():
        raise StoreError(
            f"{store.path}: no case of the {len(run_ids)} runs in this history carries tag "
            f"{tag!r}; drop --tag or name a tag of the suite"
        )
    rates = _rates(counts, level)
    rules = counted_rules(store, run_ids)
    usage = _usage(usage_by_model(store, run_ids))
    flaky = {r["run_id"]: r["flaky"] for r in flaky_counts(store, run_ids).iter_rows(named=True)}
    points = tuple(
        _point(
            row,
            rates.get(row["run_id"], ()),
            usage.get(row["run_id"], {}),
            flaky,
            rules.get(row["run_id"]),
        )
        for row in chosen.iter_rows(named=True)
    )
    positions = dict(chosen.select("run_id", "pos").iter_rows())
    window_alpha = alpha * trend_runs / horizon
    trends = _trends(points, positions, tag or ALL, trend_runs)
    findings = _findings(points, trends, window_alpha, tag, (alpha, horizon))
    return History(
        by=by,
        tag=tag,
        points=points,
        trends=trends,
        findings=findings,
        alpha=alpha,
        level=level,
        reuse=gate_reuse(store),
    )


def _chosen_runs(store: Store, by: By, last: int | None, label: str | None) -> pl.DataFrame:
    """``series, run_id, label, at, config_hash, manifest, promoted_by``, oldest first."""
    runs = store.runs()
    if by == "label":
        chosen = runs.filter(pl.col("status") == "complete").select(
            pl.col("label").alias("series"), "run_id", "label",
            pl.col("created_at").alias("at"), "config_hash", "manifest",
            pl.lit(None, pl.String).alias("promoted_by"),
        )  # fmt: skip
    else:
        promoted = store.baselines().sort("promoted_at")
        series = pl.col("suite") + pl.when(pl.col("tier").is_null()).then(pl.lit("")).otherwise(
            "@" + pl.col("tier")
        )
        chosen = (
            promoted.select(
                series.alias("series"),
                "run_id",
                pl.col("promoted_at").alias("at"),
                pl.col("who").alias("promoted_by"),
            )
            .unique(["series", "run_id"], keep="first", maintain_order=True)
            .join(runs.select("run_id", "label", "config_hash", "manifest"), on="run_id")
            .select("series", "run_id", "label", "at", "config_hash", "manifest", "promoted_by")
        )
    if label is not None:
        chosen = chosen.filter(pl.col("label") == label)
    chosen = chosen.sort("series", "at", "run_id")
    chosen = chosen.with_columns(pos=pl.int_range(pl.len()).over("series"))  # before `last`
    if last is not None:
        chosen = chosen.group_by("series", maintain_order=True).tail(last)
    return chosen.sort("series", "at", "run_id")


def _rates(counts: pl.DataFrame, level: float) -> dict[str, tuple[TagRate, ...]]:
    rates: dict[str, list[TagRate]] = {}
    for r in counts.iter_rows(named=True):
        k, n = int(r["passed"]), int(r["decided"])
        lo, hi = wilson_interval(k, n, level) if n else (None, None)
        rates.setdefault(r["run_id"], []).append(
            TagRate(
                tag=r["tag"],
                cases=int(r["cases"]),
                decided=n,
                passed=k,
                errored=int(r["errored"]),
                unstable=int(r["unstable"]),
                rate=k / n if n else None,
                lo=lo,
                hi=hi,
            )
        )
    # ALL first, then the tags by name
    return {
        run: tuple(sorted(tags, key=lambda t: (t.tag != ALL, t.tag))) for run, tags in rates.items()
    }


def _usage(rows: pl.DataFrame) -> dict[str, dict[str, Any]]:
    usage: dict[str, dict[str, Any]] = {}
    for r in rows.iter_rows(named=True):
        u = usage.setdefault(r["run_id"], dict.fromkeys(
            ("outputs", "cached", "timed", "latency_ms", "cost_usd", "total_tokens", "steps"), 0
        ) | {"models": []})  # fmt: skip
        for key in ("outputs", "cached", "timed", "latency_ms", "cost_usd", "total_tokens"):
            u[key] += r[key] or 0
        u["steps"] += r["steps"] or 0
        if r["model"] is not None:
            u["models"].append((r["model"], int(r["outputs"])))
    return usage


def _mean(total: float, n: int) -> float | None:
    return float(total) / n if n else None


def _point(
    row: Mapping[str, Any],
    rates: tuple[TagRate, ...],
    usage: Mapping[str, Any],
    flaky: Mapping[str, int],
    rules: PassRules | None = None,
) -> HistoryPoint:
    manifest = RunManifest.from_stored(json.loads(row["manifest"]) if row["manifest"] else {})
    outputs = int(usage.get("outputs", 0))
    models = sorted(usage.get("models", []), key=lambda m: (-m[1], m[0]))
    critical = (manifest.gate_policy or {}).get("critical_tags") or ()
    return HistoryPoint(
        series=row["series"], run_id=row["run_id"], label=row["label"], at=row["at"],
        config_hash=row["config_hash"], tags=rates, flaky=flaky.get(row["run_id"]),
        outputs=outputs, cached=int(usage.get("cached", 0)),
        mean_latency_ms=_mean(usage.get("latency_ms", 0), int(usage.get("timed", 0))),
        mean_cost_usd=_mean(usage.get("cost_usd", 0), outputs),
        mean_total_tokens=_mean(usage.get("total_tokens", 0), outputs),
        mean_steps=_mean(usage.get("steps", 0), outputs),
        served_models=tuple(models), snapshot=manifest.model.snapshot if manifest.model else None,
        critical_tags=tuple(critical), promoted_by=row["promoted_by"],
        replays=manifest.replays, rate_basis=rate_basis(manifest.replays, rules),
    )  # fmt: skip


def latest_window(positions: list[int], window: int) -> tuple[int, int] | None:
    """Indices [i, j) into ``positions`` (a series' run positions from its first run, oldest
    first, possibly cut by ``last``) of its newest complete non-overlapping window, or None.

    Examples:
        >>> latest_window(list(range(25)), 10), latest_window(list(range(9)), 10)
        ((10, 20), None)
        >>> latest_window(list(range(15, 35)), 10)   # runs 16-35 of a longer series: 21-30
        (5, 15)
    """
    if not positions:
        return None
    k = (positions[-1] + 1) // window - 1
    while k >= 0:
        lo = k * window
        if lo >= positions[0]:
            i = positions.index(lo)
            return i, i + window
        k -= 1
    return None


def _trends(
    points: tuple[HistoryPoint, ...], positions: Mapping[str, int], tag: str, trend_runs: int
) -> tuple[UnstableTrend, ...]:
    by_series: dict[str, list[HistoryPoint]] = {}
    for p in points:
        by_series.setdefault(p.series, []).append(p)
    trends = []
    for series, pts in by_series.items():
        span = latest_window([positions[p.run_id] for p in pts], trend_runs)
        if span is None:
            continue
        window = pts[span[0] : span[1]]
        shares = []
        for p in window:
            rate = p.rate(tag)
            shares.append(rate.unstable / rate.cases if rate and rate.cases else 0.0)
        ids = tuple(p.run_id for p in window)
        trends.append(UnstableTrend(series, ids, tuple(shares), unstable_trend(shares)))
    return tuple(trends)


def unstable_trend(shares: list[float]) -> TrendResult:
    """The trend test of one window: exact Mann–Kendall without ties, the seeded permutation
    test with them (`evalkit.stats.trend.mann_kendall_permutation`)."""
    exact = mann_kendall(shares, "greater")
    if exact.method in ("exact", "none"):
        return exact
    return mann_kendall_permutation(shares, seed=0)


def _findings(
    points: tuple[HistoryPoint, ...],
    trends: tuple[UnstableTrend, ...],
    alpha: float,
    tag: str | None,
    stated: tuple[float, int],
) -> tuple[Finding, ...]:
    findings = []
    for t in trends:
        if t.test.method == "none" or t.test.p_value > alpha:
            continue
        statistic = {"s": t.test.s, "tau": t.test.tau, "p_value": t.test.p_value,
                     "n": t.test.n, "method": t.test.method, "runs": list(t.run_ids),
                     "window_alpha": alpha, "false_alarm": stated[0],
                     "horizon": stated[1]}  # fmt: skip
        findings.append(
            Finding(
                3,
                tag,
                (),
                statistic,
                f"unstable cases are growing in {t.series}: {t.shares[0]:.1%} of cases had "
                f"disagreeing replays in {t.run_ids[0]}, {t.shares[-1]:.1%} in {t.run_ids[-1]} "
                f"(Mann–Kendall S={t.test.s}, p={t.test.p_value:.3g} ≤ {alpha:.3g}, one test per "
                f"{len(t.shares)} runs: a steady series warns at most {stated[0]:.0%} of the time "
                f"over {stated[1]} runs)",
                severity="warn",
                kind=f"{UNSTABLE_GROWING}:{t.series}",
            )
        )
    before: dict[str, HistoryPoint] = {}
    for p in points:
        prev = before.get(p.series)
        if prev is not None and p.served_model != prev.served_model:
            findings.append(
                Finding(
                    3,
                    None,
                    (),
                    {
                        "from": prev.served_model,
                        "to": p.served_model,
                        "run_id": p.run_id,
                        "previous_run_id": prev.run_id,
                    },
                    f"served model changed in {p.series}: {prev.served_model} -> {p.served_model} "
                    f"at {p.run_id}",
                    severity="info",
                    kind=f"{SERVED_MODEL_CHANGE}:{p.series}:{p.run_id}",
                )
            )
        before[p.series] = p
    return tuple(findings)

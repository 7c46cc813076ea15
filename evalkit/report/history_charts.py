"""Charts of a history across runs (`evalkit.history`): each tag's pass rate as a line with its
Wilson band, one panel per tag, and the unstable and flaky cases per run; a run where the
served model changed is marked by a dashed rule in every panel, labelled with the new model.

Charts take a `History` and show themselves in Jupyter like every evalkit chart
(`evalkit.report.charts`).

Examples:
    >>> from evalkit.trends.values import History
    >>> empty = History(by="label", tag=None, points=(), trends=(), findings=(), alpha=0.05,
    ...     level=0.95)
    >>> pass_rate_history(empty).to_dict()["title"]
    'Pass rate over runs: no runs in this history'
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import altair as alt
import polars as pl

from evalkit.report.charts import BROKEN, NEUTRAL, Chart, LayerChart, VConcatChart
from evalkit.trends.values import History

_WIDTH = 620


def _x(frame: pl.DataFrame | None = None) -> alt.X:
    """The time axis. With one moment only (a first promotion), Vega would stretch that one
    millisecond across the panel and label its ticks ".578": the domain is then a day around
    it, labelled by date and time, so the one run is a point in the middle."""
    title = "run (time of promotion or creation, UTC)"
    moments = frame["at"].drop_nulls().unique() if frame is not None and "at" in frame else None
    if moments is None or moments.len() != 1:
        return alt.X("at:T", title=title)
    at = moments[0]
    domain = [(at - dt.timedelta(hours=12)).isoformat(), (at + dt.timedelta(hours=12)).isoformat()]
    axis = alt.Axis(format="%Y-%m-%d %H:%M", tickCount=3)
    return alt.X("at:T", title=title, scale=alt.Scale(domain=domain), axis=axis)


def _changes(frame: pl.DataFrame) -> alt.LayerChart:
    """Dashed rules at the runs where the served model changed, with the new model's name."""
    changed = frame.filter(pl.col("model_changed")).unique(["series", "run_id"])
    rule = alt.Chart(changed).mark_rule(color=BROKEN, strokeDash=[4, 3], strokeWidth=1.5)
    x = _x(frame)
    rule = rule.encode(x=x, tooltip=["series", "run_id", "served_model"])
    text = alt.Chart(changed).mark_text(align="left", dx=3, dy=-4, color=BROKEN, fontSize=10)
    layered = alt.layer(rule, text.encode(x=x, y=alt.value(0), text="served_model:N"))
    assert isinstance(layered, alt.LayerChart)  # alt.layer facets only when given facet arguments
    return layered


def _nothing() -> Chart:
    """A panel that says the history is empty (a chart with no data has no size to draw)."""
    note = Chart(pl.DataFrame({"note": ["no runs in this history"]})).mark_text(size=14)
    return note.encode(text="note:N").properties(width=_WIDTH, height=60)


def pass_rate_history(history: History, tags: Sequence[str] | None = None) -> VConcatChart:
    """One panel per tag (``tags``; default: the critical tags, else ``ALL``): the pass rate of
    each series over its runs, a band for the Wilson interval, the model changes marked.

    Examples:
        >>> from evalkit.trends.values import History, HistoryPoint, TagRate
        >>> import datetime as dt
        >>> rate = TagRate(tag="ALL", cases=10, decided=10, passed=9, errored=0, unstable=1,
        ...     rate=0.9, lo=0.6, hi=0.98)
        >>> point = HistoryPoint(series="nightly", run_id="r1", label="nightly",
        ...     at=dt.datetime(2026, 1, 1), config_hash="cfg", tags=(rate,), flaky=None,
        ...     outputs=10, cached=0, mean_latency_ms=100.0, mean_cost_usd=0.001,
        ...     mean_total_tokens=15.0, mean_steps=1.0, served_models=(("m-0513", 10),),
        ...     snapshot="m", critical_tags=())
        >>> history = History(by="label", tag=None, points=(point,), trends=(), findings=(),
        ...     alpha=0.05, level=0.95)
        >>> spec = pass_rate_history(history)
        >>> [panel["title"] for panel in spec.to_dict()["vconcat"]]
        ['ALL: pass rate (per case; Wilson 95% band)']

        One point: a day's axis around it, not a millisecond's.

        >>> x = spec.to_dict()["vconcat"][0]["layer"][1]["encoding"]["x"]
        >>> x["scale"]["domain"]
        ['2025-12-31T12:00:00+00:00', '2026-01-01T12:00:00+00:00']
    """
    frame = history.frame()
    if frame.is_empty():
        return VConcatChart(vconcat=[_nothing()]).properties(
            title="Pass rate over runs: no runs in this history"
        )
    wanted = list(tags or history.critical_tags or ["ALL"])
    level, basis = f"{history.level:.0%}", history.rate_basis
    panels = []
    for tag in wanted:
        rows = frame.filter(pl.col("tag") == tag).drop_nulls("rate")
        color = alt.Color("series:N", title="series", legend=alt.Legend(orient="bottom"))
        y = alt.Y("rate:Q", title="pass rate", axis=alt.Axis(format="%"),
                  scale=alt.Scale(zero=False))  # fmt: skip
        lo = alt.Y("lo:Q", title="pass rate", axis=alt.Axis(format="%"))
        x = _x(frame)
        band = alt.Chart(rows).mark_area(opacity=0.2).encode(x=x, y=lo, y2="hi:Q", color=color)
        tooltip = ["series", "run_id", "label", "served_model", "passed", "decided",
                   alt.Tooltip("rate:Q", format=".1%"), alt.Tooltip("lo:Q", format=".1%"),
                   alt.Tooltip("hi:Q", format=".1%"), "unstable"]  # fmt: skip
        line = alt.Chart(rows).mark_line(point=True).encode(x=x, y=y, color=color, tooltip=tooltip)
        panel = LayerChart(layer=[band, line, _changes(frame)])
        panels.append(
            panel.properties(
                title=f"{tag}: pass rate ({basis}; Wilson {level} band)",
                width=_WIDTH,
                height=160,
            )
        )
    return VConcatChart(vconcat=panels, spacing=20)


def unstable_history(history: History) -> LayerChart:
    """The unstable cases (replays disagreeing) and the flaky cases (the newest flake list of
    the run's configuration) of each run, the model changes marked."""
    runs = history.runs_frame()
    if runs.is_empty():
        return LayerChart(layer=[_nothing()]).properties(
            title="Unstable and flaky cases per run: no runs in this history"
        )
    data = runs.unpivot(
        index=["series", "run_id", "at", "served_model", "model_changed"],
        on=["unstable", "flaky"],
        variable_name="kind",
        value_name="cases_n",
    ).drop_nulls("cases_n")
    color = alt.Color("kind:N", title=None, scale=alt.Scale(range=[BROKEN, NEUTRAL]))
    lines = alt.Chart(data).mark_line(point=True).encode(
        x=_x(runs), y=alt.Y("cases_n:Q", title="cases"), color=color,
        strokeDash=alt.StrokeDash("series:N", title="series"),
        tooltip=["series", "run_id", "kind", "cases_n", "served_model"],
    )  # fmt: skip
    chart = LayerChart(layer=[lines, _changes(runs)])
    return chart.properties(title="Unstable and flaky cases per run", width=_WIDTH, height=160)

"""Altair charts: each function takes Polars frames and returns a chart that shows itself.

A chart here is an Altair chart (compose it, ``.properties(...)`` it, ``.to_dict()`` it) whose
Jupyter display is `to_mimebundle`: the Vega-Lite spec under the mimetype JupyterLab renders
natively, with no CDN and even in an untrusted notebook (interactive: tooltips, click a slice),
and a static SVG and PNG drawn offline by vl-convert for nbconvert's HTML (``gate.html``),
GitHub and other viewers without Vega. The renderer set by ``alt.renderers.enable`` is not
consulted. Save with :func:`save_chart` (SVG, and PNG at 2×); embed with :func:`to_svg`.
Colours are Okabe–Ito (colour-blind safe); every chart has a title, axis titles with units and a
legend.

The slice charts the gate draws (`slice_forest`, `flip_counts`, `pass_rate_by_slice`,
`slice_overview`) carry their static image written directly (`evalkit.report.svg`), so saving,
embedding or showing them starts no JavaScript engine: their display is the Vega-Lite spec and
that SVG (no PNG: every viewer that shows a notebook's images shows SVG). A copy Altair makes of
such a chart (``.properties(...)``, ``+``, ``.encode(...)``) or an attribute set on it draws
with vl-convert again, since the static image no longer shows it.

Examples:
    >>> chart = Chart(pl.DataFrame({"n": [1, 2]})).mark_bar().encode(x="n:Q")
    >>> sorted(chart._repr_mimebundle_())
    ['application/vnd.vegalite.v5+json', 'image/png', 'image/svg+xml', 'text/plain']
"""

from __future__ import annotations

import base64
import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypedDict

import altair as alt
import polars as pl

from evalkit.report.chart_rows import AGGREGATE as _AGG
from evalkit.report.chart_rows import BASELINE, BROKEN, FIXED, NEUTRAL
from evalkit.report.chart_rows import axis_limit as _limit
from evalkit.report.chart_rows import count_ticks as _count_ticks
from evalkit.report.chart_rows import labelled as _labelled
from evalkit.report.chart_rows import slice_rows as _slice_rows
from evalkit.report.chart_rows import with_ids as _with_ids
from evalkit.report.svg import flips_svg, forest_svg, pass_rates_svg, stacked_svg

#: The Vega-Lite mimetype JupyterLab 4 renders with its bundled Vega (rank above the images).
#: Altair 6 labels its specs Vega-Lite 6 (``application/vnd.vegalite.v6.json``), which Lab does
#: not render, so the text ``alt.LayerChart(...)`` was shown instead; the specs built here use
#: nothing Vega-Lite 5 lacks (a test compiles each with Vega-Lite 5.8) and travel as v5.
VEGALITE_MIMETYPE = "application/vnd.vegalite.v5+json"
_VL5_SCHEMA = "https://vega.github.io/schema/vega-lite/v5.json"


def to_mimebundle(chart: alt.TopLevelMixin) -> dict[str, Any]:
    """What Jupyter stores for a chart: its Vega-Lite spec (interactive where Vega runs), an SVG
    and a PNG (static, for nbconvert, GitHub and untrusted viewers) and a one-line text; a
    chart with its own static SVG (`static_svg`) stores that SVG and no PNG.

    The PNG is drawn at 1×: it is only the last resort (a viewer with neither Vega nor SVG), and
    at 2× its base64 would be most of the notebook's size.
    """
    spec = chart.to_dict()
    text = f"<evalkit chart: {_title(spec) or 'untitled'}>"
    if (static := static_svg(chart)) is not None:
        return {VEGALITE_MIMETYPE: spec | {"$schema": _VL5_SCHEMA}, "image/svg+xml": static,
                "text/plain": text}  # fmt: skip
    import vl_convert

    svg = _svg(spec)
    return {
        VEGALITE_MIMETYPE: spec | {"$schema": _VL5_SCHEMA},
        "image/svg+xml": svg,
        "image/png": base64.b64encode(vl_convert.svg_to_png(svg)).decode("ascii"),
        "text/plain": text,
    }


def static_svg(chart: alt.TopLevelMixin) -> str | None:
    """The SVG the chart's maker wrote directly (`evalkit.report.svg`), if it has one and is
    still as made: None for any other chart, a copy, or a chart whose attributes were set since.

    Examples:
        >>> from evalkit.compare.slices import slices
        >>> p = pl.DataFrame({"case_id": ["a"], "tags": [["x"]], "base": [True],
        ...     "cand": [False], "base_error": [False], "cand_error": [False]})
        >>> chart = pass_rate_by_slice(slices(p))
        >>> static_svg(chart).startswith("<svg"), static_svg(chart.properties(width=300))
        (True, None)
    """
    made = chart.__dict__.get("_evalkit_static")
    if made is None:
        return None
    draw, kwds = made
    now: dict[str, Any] = chart.__dict__["_kwds"]  # SchemaBase sets it untyped (__setattr__)
    if now.keys() != kwds.keys() or any(now[k] is not v for k, v in kwds.items()):
        return None
    return draw()


def _with_static(chart: Any, draw: Callable[[], str]) -> Any:
    """``chart``, carrying ``draw`` (called once, when first needed) as its static image."""
    drawn = functools.cache(draw)
    object.__setattr__(chart, "_evalkit_static", (drawn, dict(chart._kwds)))  # not a chart field
    return chart


def _svg(spec: dict[str, Any]) -> str:
    """The SVG vl-convert draws for ``spec``, drawn once per process: the judge-agreement
    notebook saves each chart and then shows it, and a Vega render is the costly step (a PNG
    rasterized from this SVG is byte-for-byte vl-convert's own PNG of the spec, for less).

    Examples:
        >>> spec = Chart(pl.DataFrame({"n": [1]})).mark_bar().encode(x="n:Q").to_dict()
        >>> _svg(spec) is _svg(spec), _svg(spec).startswith("<svg")
        (True, True)
    """
    return _svg_of(json.dumps(spec, sort_keys=True))


@functools.lru_cache(maxsize=16)
def _svg_of(spec_json: str) -> str:
    import vl_convert

    return vl_convert.vegalite_to_svg(spec_json)  # it takes the JSON text as well as a dict


def _title(spec: Any) -> str | None:
    """The first title in a spec (a concatenation's is its first part's)."""
    if isinstance(spec, dict):
        title = spec.get("title")
        if title:
            return str(title.get("text") if isinstance(title, dict) else title)
        for key in ("vconcat", "hconcat", "concat", "layer"):
            for part in spec.get(key, ()):
                if found := _title(part):
                    return found
    return None


class _Shown:
    """Mixin: display as `to_mimebundle` (Vega-Lite and static images), whatever renderer
    Altair has enabled."""

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return to_mimebundle(self)  # type: ignore[arg-type]


class Chart(_Shown, alt.Chart):
    """An ``alt.Chart`` that displays as `to_mimebundle`; its encodings and marks return one too."""


class LayerChart(_Shown, alt.LayerChart):
    """An ``alt.LayerChart`` that displays as `to_mimebundle`."""


class VConcatChart(_Shown, alt.VConcatChart):
    """An ``alt.VConcatChart`` that displays as `to_mimebundle`."""


class HConcatChart(_Shown, alt.HConcatChart):
    """An ``alt.HConcatChart`` that displays as `to_mimebundle`."""


def save_chart(chart: alt.TopLevelMixin, path_stem: str | Path, png: bool = True) -> list[Path]:
    """Write ``<stem>.svg`` (and ``<stem>.png`` at 2×, when ``png``), both drawn offline: the
    chart's own static SVG where it has one (`static_svg`), else vl-convert's (an Altair
    ``.html`` would load Vega from a CDN); the PNG is that SVG rasterized. Returns the paths."""
    stem = Path(path_stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    svg = to_svg(chart)
    written = [stem.with_suffix(".svg")]
    written[0].write_text(svg, encoding="utf-8")
    if png:
        import vl_convert  # its SVG rasterizer (resvg); no JavaScript runs for this

        written.append(stem.with_suffix(".png"))
        written[1].write_bytes(vl_convert.svg_to_png(svg, scale=2.0))
    return written


#: The selection parameter on the forest plot's slices: a click picks a slice (a double click
#: clears it); in `slice_overview` the flips below show only the picked slice's.
PICK = "picked_slice"


def _pick() -> alt.Parameter:
    return alt.selection_point(name=PICK, fields=["slice"], on="click", clear="dblclick")


def slice_forest(
    slices: pl.DataFrame,
    tolerance: float | None = 0.02,
    critical: tuple[str, ...] | list[str] = (),
    method: str = "95% Tango score interval, consistent with the exact McNemar test",
    paired: pl.DataFrame | None = None,
) -> LayerChart:
    """Forest plot: each slice's paired pass-rate difference (candidate − baseline) with its
    interval, one row per slice labelled with its n; critical tags (★) first, the aggregate last.

    A labelled rule marks no change (0) and ``-tolerance``; intervals reaching past the axis are
    clipped there with an arrow. Colour says whether the interval lies below zero (worse), above
    (better) or across it. The tooltip gives the counts, the interval and p, and, given the
    ``paired`` frame, the broken and fixed case ids. Clicking a slice picks it (`PICK`).

    Examples:
        >>> from evalkit.compare.slices import slices
        >>> chart = slice_forest(slices(paired), 0.02, ["billing"])  # doctest: +SKIP
    """
    chart = _forest(slices, tolerance, critical, method, paired, _pick())
    return _with_static(
        chart, functools.partial(forest_svg, slices, tolerance, critical, method, paired)
    )


class _Reference(TypedDict):  # a labelled vertical line of the forest plot
    x: float
    what: str
    align: Literal["left", "right"]
    dx: float


def _forest(
    slices: pl.DataFrame,
    tolerance: float | None,
    critical: tuple[str, ...] | list[str],
    method: str,
    paired: pl.DataFrame | None,
    pick: alt.Parameter,
) -> LayerChart:
    tol = tolerance or 0.0
    data = _labelled(_with_ids(_slice_rows(slices), paired), tuple(critical))
    lim = _limit(data, tol)
    lo, hi = pl.col("diff_lo"), pl.col("diff_hi")
    data = data.with_columns(
        pl.when(hi < 0)
        .then(pl.lit("worse: interval below 0"))
        .when(lo > 0)
        .then(pl.lit("better: interval above 0"))
        .otherwise(pl.lit("interval includes 0"))
        .alias("reading"),
        lo.clip(-lim, lim).alias("lo_c"),
        hi.clip(-lim, lim).alias("hi_c"),
        pl.col("diff").clip(-lim, lim).alias("diff_c"),
        (pl.col("diff").abs() > lim).alias("clipped_point"),
    )
    order = data["label"].to_list()
    y = alt.Y("label:N", sort=order, title=None, axis=alt.Axis(labelLimit=260))
    x_axis = alt.Axis(format="+.0%", title="pass-rate difference, candidate − baseline (points)")
    x_scale = alt.Scale(domain=[-lim, lim], clamp=True)
    readings = ["worse: interval below 0", "interval includes 0", "better: interval above 0"]
    color = alt.Color(
        "reading:N",
        title="interval",
        scale=alt.Scale(domain=readings, range=[BROKEN, NEUTRAL, FIXED]),
        legend=alt.Legend(orient="bottom"),
    )
    tip = [
        alt.Tooltip("slice:N", title="slice"),
        alt.Tooltip("n:Q", title="paired cases"),
        alt.Tooltip("broken:Q", title="broken (pass → fail)"),
        alt.Tooltip("fixed:Q", title="fixed (fail → pass)"),
        alt.Tooltip("diff:Q", format="+.1%", title="difference"),
        alt.Tooltip("diff_lo:Q", format="+.1%", title="interval, lower"),
        alt.Tooltip("diff_hi:Q", format="+.1%", title="interval, upper"),
        alt.Tooltip("p_value:Q", format=".3g", title="one-sided p"),
        alt.Tooltip("broken_ids:N", title="broken cases"),
        alt.Tooltip("fixed_ids:N", title="fixed cases"),
    ]
    # A picked slice stays solid and the others fade, so the click shows what it picked.
    faded = alt.condition(pick, alt.value(1.0), alt.value(0.3))
    base = alt.Chart(data).encode(y=y)
    rule = base.mark_rule(strokeWidth=2).encode(
        x=alt.X("lo_c:Q", scale=x_scale, axis=x_axis), x2="hi_c:Q", color=color, opacity=faded,
        tooltip=tip,
    )  # fmt: skip
    point = (
        base.mark_point(filled=True, size=90, cursor="pointer")
        .encode(
            x="diff_c:Q",
            color=color,
            opacity=faded,
            tooltip=tip,
            shape=alt.condition(alt.datum.clipped_point, alt.value("diamond"), alt.value("circle")),
        )
        .add_params(pick)
    )
    left = (
        base.transform_filter(alt.datum.diff_lo < -lim)
        .mark_point(shape="triangle-left", filled=True, size=90)
        .encode(x=alt.datum(-lim), color=color)
    )
    right = (
        base.transform_filter(alt.datum.diff_hi > lim)
        .mark_point(shape="triangle-right", filled=True, size=90)
        .encode(x=alt.datum(lim), color=color)
    )
    refs: list[_Reference] = [{"x": 0.0, "what": "no change", "align": "left", "dx": 3}]
    if tol:
        refs.append({"x": -tol, "what": f"−tolerance ({100 * tol:.0f} pts)", "align": "right",
                     "dx": -3})  # fmt: skip
    ref_rule = alt.Chart(pl.DataFrame(refs)).mark_rule(strokeDash=[4, 4], color="#444")
    ref_rule = ref_rule.encode(x="x:Q")
    ref_text = [
        alt.Chart(pl.DataFrame([r]))
        .mark_text(
            align=r["align"], dx=r["dx"], dy=-4, baseline="bottom", fontSize=10, color="#444"
        )
        .encode(x="x:Q", y=alt.value(0), text="what:N")
        for r in refs
    ]
    subtitle = f"bars: {method}; ★ critical tag; ◆ / ▶ clipped at ±{100 * lim:.0f} pts"
    return LayerChart(layer=[rule, point, left, right, ref_rule, *ref_text]).properties(
        title=alt.Title("Paired difference per slice", subtitle=subtitle),
        width=620,
        height=max(24 * len(order), 80),
    )


def flip_counts(
    slices: pl.DataFrame,
    critical: tuple[str, ...] | list[str] = (),
    paired: pl.DataFrame | None = None,
) -> VConcatChart:
    """Diverging bars per slice: broken cases (pass → fail) to the left, fixed (fail → pass) to
    the right; the aggregate is its own panel below, so its size does not set the scale. Given
    the ``paired`` frame, each bar's tooltip lists its case ids."""
    chart = VConcatChart(vconcat=_flip_panels(slices, critical, paired))
    chart = chart.resolve_scale(x="independent")
    return _with_static(chart, functools.partial(flips_svg, slices, critical, paired))


def _flip_panels(
    slices: pl.DataFrame,
    critical: tuple[str, ...] | list[str],
    paired: pl.DataFrame | None,
    pick: alt.Parameter | None = None,
) -> list[alt.LayerChart]:
    """The per-slice panel (filtered to the picked slice, given ``pick``) and the aggregate's."""
    rows = _labelled(_with_ids(_slice_rows(slices), paired), tuple(critical))
    sides = [("broken (pass → fail)", "broken", -1), ("fixed (fail → pass)", "fixed", 1)]
    long = pl.concat(
        [
            rows.select(
                "slice",
                "label",
                "order",
                pl.lit(flip).alias("flip"),
                (sign * pl.col(col)).alias("cases"),
                pl.col(col).alias("count"),
                pl.col(f"{col}_ids").alias("case_ids"),
            )
            for flip, col, sign in sides
        ]
    )
    color = alt.Color(
        "flip:N",
        title="flip",
        legend=alt.Legend(orient="bottom"),
        scale=alt.Scale(domain=[s[0] for s in sides], range=[BROKEN, FIXED]),
    )
    x_title = "cases: ← broken · fixed →"
    tip = [
        alt.Tooltip("slice:N", title="slice"),
        alt.Tooltip("flip:N", title="flip"),
        alt.Tooltip("count:Q", title="cases"),
        alt.Tooltip("case_ids:N", title="case ids"),
    ]

    def panel(data: pl.DataFrame, title: str, pick: alt.Parameter | None) -> alt.LayerChart:
        order = data.sort("order")["label"].unique(maintain_order=True).to_list()
        top = max(int(data.select(pl.col("count").max()).item() or 0), 1)
        y = alt.Y("label:N", sort=order, title=None, axis=alt.Axis(labelLimit=260))
        x = alt.X(
            "cases:Q",
            title=x_title,
            scale=alt.Scale(domain=[-top, top], nice=True),
            # counts: whole-number ticks only (with no flips the domain is ±1, and Vega would
            # otherwise tick at 0.1 cases)
            axis=alt.Axis(values=_count_ticks(top), labelExpr="abs(datum.value)"),
        )
        bars = alt.Chart(data, title=title)
        if pick is not None:
            bars = bars.transform_filter(pick)
        bars = bars.mark_bar().encode(y=y, x=x, color=color, tooltip=tip)
        zero = alt.Chart(pl.DataFrame({"x": [0]})).mark_rule(color="#444").encode(x="x:Q")
        return (bars + zero).properties(width=620, height=max(22 * len(order), 40))

    picked = (
        " (in Jupyter, click a slice above for only its flips; double-click: all)" if pick else ""
    )
    parts = [panel(long.filter(pl.col("slice") != _AGG), f"Flips per slice{picked}", pick)]
    if (agg := long.filter(pl.col("slice") == _AGG)).height:
        parts.append(panel(agg, "Flips over all paired cases (own scale)", None))
    return parts


def slice_overview(
    slices: pl.DataFrame,
    tolerance: float | None = 0.02,
    critical: tuple[str, ...] | list[str] = (),
    method: str = "95% Tango score interval, consistent with the exact McNemar test",
    paired: pl.DataFrame | None = None,
) -> VConcatChart:
    """`slice_forest` above `flip_counts`, linked: clicking a slice in the forest (`PICK`)
    filters the flips per slice to that slice's; a double click shows them all again. Static
    images show every flip.

    Examples:
        >>> from evalkit.compare.slices import slices
        >>> p = pl.DataFrame({"case_id": ["a", "b"], "tags": [["x"], ["x"]], "base": [True] * 2,
        ...     "cand": [False, True], "base_error": [False] * 2, "cand_error": [False] * 2})
        >>> spec = slice_overview(slices(p), paired=p).to_dict()
        >>> [param["name"] for param in spec["params"]]
        ['picked_slice']
    """
    pick = _pick()
    forest = _forest(slices, tolerance, critical, method, paired, pick)
    chart = VConcatChart(
        vconcat=[forest, *_flip_panels(slices, critical, paired, pick)], spacing=24
    ).resolve_scale(x="independent", y="independent", color="independent")

    def draw() -> str:
        forest = forest_svg(slices, tolerance, critical, method, paired)
        return stacked_svg(forest, flips_svg(slices, critical, paired))

    return _with_static(chart, draw)


def pass_rate_by_slice(slices: pl.DataFrame) -> LayerChart:
    """Baseline and candidate pass rates per slice with Wilson intervals, side by side."""
    rows = _slice_rows(slices)
    data = pl.concat(
        [
            rows.select(
                "slice",
                pl.lit(run).alias("run"),
                pl.col(f"{p}_pass").alias("pass_rate"),
                pl.col(f"{p}_lo").alias("lo"),
                pl.col(f"{p}_hi").alias("hi"),
                "n",
            )
            for run, p in (("baseline", "base"), ("candidate", "cand"))
        ]
    )
    order = rows["slice"].to_list()
    color = alt.Color(
        "run:N",
        title="run",
        legend=alt.Legend(orient="bottom"),
        scale=alt.Scale(domain=["baseline", "candidate"], range=[BASELINE, FIXED]),
    )
    enc = {
        "y": alt.Y("slice:N", sort=order, title=None),
        "yOffset": alt.YOffset("run:N"),
        "color": color,
    }
    x = alt.X(
        "lo:Q",
        title="pass rate (Wilson 95% interval)",
        axis=alt.Axis(format="%"),
        scale=alt.Scale(domain=[0, 1]),
    )
    bars = alt.Chart(data).mark_rule(strokeWidth=2).encode(x=x, x2="hi:Q", **enc)
    points = (
        alt.Chart(data)
        .mark_point(filled=True, size=50, opacity=1)
        .encode(
            x="pass_rate:Q",
            tooltip=["slice", "run", "n", alt.Tooltip("pass_rate:Q", format=".1%")],
            **enc,
        )
    )
    height = max(30 * len(order), 80)
    chart = LayerChart(layer=[bars, points])
    chart = chart.properties(title="Pass rate by slice", width=620, height=height)
    return _with_static(chart, functools.partial(pass_rates_svg, slices))


def min_detectable_drop(power: pl.DataFrame) -> Chart:
    """Per slice, the smallest drift (at the assumed flip rate) and the smallest collapse (every
    flip a break) it can detect; frame from `evalkit.compare.power.power_table`. Missing bar =
    cannot."""
    data = power.unpivot(
        index=["slice", "n"],
        on=["min_detectable_drop", "min_detectable_collapse"],
        variable_name="kind",
        value_name="drop",
    ).with_columns(
        pl.col("kind").replace(
            {"min_detectable_drop": "drift, at ψ", "min_detectable_collapse": "collapse"}
        )
    )
    return (
        Chart(data.drop_nulls("drop"))
        .mark_bar()
        .encode(
            y=alt.Y("slice:N", title=None),
            yOffset="kind:N",
            color=alt.Color("kind:N", title="smallest detectable"),
            x=alt.X("drop:Q", title="smallest detectable drop", axis=alt.Axis(format="%")),
            tooltip=["slice", "n", "kind", alt.Tooltip("drop:Q", format=".1%")],
        )
        .properties(title="What each slice can detect", width=420)
    )


def to_svg(chart: alt.TopLevelMixin) -> str:
    """A chart as an SVG string drawn offline, for self-contained HTML reports: its own static
    SVG (`static_svg`), else vl-convert's."""
    static = static_svg(chart)
    return static if static is not None else _svg(chart.to_dict())

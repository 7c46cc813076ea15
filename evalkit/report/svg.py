"""The slice charts as static SVG, written directly: what the gate saves and shows in its report.

`evalkit.report.charts` draws the same charts with Altair, for a notebook's interactive
Vega-Lite; its static images came from vl-convert, which starts a JavaScript engine and runs
Vega for every chart. These functions write the SVG text themselves from the same rows
(`evalkit.report.chart_rows`): one ``<g class="mark">`` per slice with a ``<title>`` (a
browser's tooltip where the SVG is inline), every text escaped, the Okabe–Ito colours, a title,
axis titles with units and a legend. `evalkit.report.charts` uses them for the images of
`slice_forest`, `flip_counts`, `pass_rate_by_slice` and `slice_overview`; `save_slice_charts`
writes a report's three as files, as the gate keeps them.

Examples:
    >>> import xml.etree.ElementTree as ET
    >>> rows = pl.DataFrame({"slice": ["<b>", "ALL"], "n": [8, 8], "broken": [2, 2],
    ...     "fixed": [0, 0], "diff": [-0.25] * 2, "diff_lo": [-0.6] * 2, "diff_hi": [0.0] * 2,
    ...     "p_value": [0.25] * 2})
    >>> svg = forest_svg(rows, 0.02, ["<b>"])
    >>> ET.fromstring(svg).tag, svg.count('class="mark"'), "&lt;b&gt;" in svg
    ('{http://www.w3.org/2000/svg}svg', 2, True)
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from xml.sax.saxutils import escape, quoteattr, unescape

import polars as pl

from evalkit.report.chart_rows import (
    AGGREGATE,
    BASELINE,
    BROKEN,
    FIXED,
    NEUTRAL,
    axis_limit,
    count_ticks,
    labelled,
    slice_rows,
    with_ids,
)

if TYPE_CHECKING:
    from evalkit.report.build import Report

WIDTH = 620  # the plot area's width, as the Altair charts have it
_FONT = "font-family:-apple-system,'Segoe UI',Helvetica,Arial,sans-serif"
_CHAR = 6.4  # mean width of an 11 px label character, for the label column's width
_INK, _GRID, _REF = "#1f2328", "#e6e6e6", "#444"
_BACKGROUND = '<rect width="100%" height="100%" fill="#fff"/>'


class _Canvas:
    """SVG elements in drawing order; numbers rounded to 0.1 px."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def add(self, tag: str, text: str | None = None, **attrs: object) -> None:
        attr = _attrs(attrs)
        self.parts.append(
            f"<{tag}{attr}>{escape(text)}</{tag}>" if text is not None else f"<{tag}{attr}/>"
        )

    def open(self, tag: str, title: str | None = None, **attrs: object) -> None:
        self.parts.append(f"<{tag}{_attrs(attrs)}>")
        if title:
            self.add("title", title)

    def close(self, tag: str) -> None:
        self.parts.append(f"</{tag}>")


def _attrs(attrs: dict[str, object]) -> str:
    """``font_size=11, class_="mark"`` as `` font-size="11" class="mark"``, values escaped."""
    return "".join(
        f" {k.rstrip('_').replace('_', '-')}={quoteattr(_num(v))}" for k, v in attrs.items()
    )


def _num(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.1f}".rstrip("0").rstrip(".")
    return str(value)


def _document(width: float, height: float, title: str, body: Sequence[str]) -> str:
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_num(float(width))}" '
        f'height="{_num(float(height))}" viewBox="0 0 {_num(float(width))} '
        f'{_num(float(height))}" role="img" style="{_FONT}">'
    )
    return "".join([head, f"<title>{escape(title)}</title>", _BACKGROUND, *body, "</svg>"])


def _scale(lo: float, hi: float, x0: float, x1: float) -> Callable[[float], float]:
    return lambda v: x0 + (v - lo) / (hi - lo) * (x1 - x0)


def _ticks(lo: float, hi: float, count: int = 6) -> list[float]:
    """Round tick values from ``lo`` to ``hi`` (steps of 1, 2 or 5 times a power of ten).

    Examples:
        >>> _ticks(-0.3, 0.3)
        [-0.3, -0.2, -0.1, 0.0, 0.1, 0.2, 0.3]
    """
    raw = (hi - lo) / max(count, 1)
    power = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(lo / step - 1e-9)
    return [round(i * step, 10) for i in range(first, math.floor(hi / step + 1e-9) + 1)]


def _pct(value: float, signed: bool = False) -> str:
    text = f"{100 * value:+.0f}%" if signed else f"{100 * value:.0f}%"
    return text.replace("-", "−")


def _header(c: _Canvas, title: str, subtitle: str | None, left: float) -> float:
    """Title (and subtitle) at the top; returns the height they take."""
    c.add("text", title, x=left, y=18.0, font_size=14, font_weight="bold", fill=_INK)
    if subtitle:
        c.add("text", subtitle, x=left, y=34.0, font_size=11, fill="#555")
        return 48.0
    return 32.0


def _x_axis(c: _Canvas, x, ticks: Sequence[float], labels: Sequence[str], top: float,
            bottom: float, title: str) -> None:  # fmt: skip
    """Grid lines, tick labels under the plot and the axis title."""
    for value, label in zip(ticks, labels, strict=True):
        c.add("line", x1=x(value), x2=x(value), y1=top, y2=bottom, stroke=_GRID)
        c.add("text", label, x=x(value), y=bottom + 14, font_size=10, fill=_INK,
              text_anchor="middle")  # fmt: skip
    c.add("line", x1=x(ticks[0]), x2=x(ticks[-1]), y1=bottom, y2=bottom, stroke="#888")
    mid = (x(ticks[0]) + x(ticks[-1])) / 2
    c.add("text", title, x=mid, y=bottom + 30, font_size=11, font_weight="bold", fill=_INK,
          text_anchor="middle")  # fmt: skip


def _legend(c: _Canvas, title: str, entries: Sequence[tuple[str, str]], left: float,
            y: float) -> None:  # fmt: skip
    c.add("text", title, x=left, y=y, font_size=11, font_weight="bold", fill=_INK)
    at = left + _CHAR * len(title) + 12
    for label, colour in entries:
        c.add("circle", cx=at + 5, cy=y - 4, r=5.0, fill=colour)
        c.add("text", label, x=at + 14, y=y, font_size=11, fill=_INK)
        at += 14 + _CHAR * len(label) + 18


def _label_width(labels: Sequence[str]) -> float:
    return 12 + _CHAR * max((len(s) for s in labels), default=4)


def forest_svg(
    slices: pl.DataFrame,
    tolerance: float | None = 0.02,
    critical: tuple[str, ...] | list[str] = (),
    method: str = "95% Tango score interval, consistent with the exact McNemar test",
    paired: pl.DataFrame | None = None,
) -> str:
    """`evalkit.report.charts.slice_forest` as SVG: per slice (critical tags ★ first, the
    aggregate last) its paired difference and interval, coloured by where the interval lies,
    clipped at the axis with a ◆ / ▶; dashed rules at no change and at ``-tolerance``."""
    tol = tolerance or 0.0
    data = labelled(with_ids(slice_rows(slices), paired), tuple(critical))
    lim = axis_limit(data, tol)
    labels = data["label"].to_list()
    left = _label_width(labels)
    c = _Canvas()
    subtitle = f"bars: {method}; ★ critical tag; ◆ / ▶ clipped at ±{100 * lim:.0f} pts"
    top = _header(c, "Paired difference per slice", subtitle, 8.0) + 14
    row = 24.0
    bottom = top + max(row * len(labels), 80.0)
    x = _scale(-lim, lim, left, left + WIDTH)
    ticks = [t for t in _ticks(-lim, lim, 8) if -lim - 1e-9 <= t <= lim + 1e-9]
    _x_axis(c, x, ticks, [_pct(t, signed=True) for t in ticks], top, bottom,
            "pass-rate difference, candidate − baseline (points)")  # fmt: skip
    refs = [(0.0, "no change", "start", 3)]
    if tol:
        refs.append((-tol, f"−tolerance ({100 * tol:.0f} pts)", "end", -3))
    for value, what, anchor, dx in refs:
        c.add("line", x1=x(value), x2=x(value), y1=top, y2=bottom, stroke=_REF,
              stroke_dasharray="4,4")  # fmt: skip
        c.add("text", what, x=x(value) + dx, y=top - 4, font_size=10, fill=_REF,
              text_anchor=anchor)  # fmt: skip
    for i, r in enumerate(data.iter_rows(named=True)):
        y = top + row * (i + 0.5)
        lo, hi, diff = r["diff_lo"], r["diff_hi"], r["diff"]
        colour = (
            BROKEN if hi is not None and hi < 0 else FIXED if lo is not None and lo > 0 else NEUTRAL
        )
        tip = (
            f"{r['slice']}: {r['n']} paired, {r['broken']} broken, {r['fixed']} fixed; "
            f"difference {_signed(diff)} [{_signed(lo)}, {_signed(hi)}], one-sided p "
            f"{_p(r.get('p_value'))}; broken: {r['broken_ids']}; fixed: {r['fixed_ids']}"
        )
        c.open("g", tip, class_="mark", data_slice=r["slice"])
        c.add("text", r["label"], x=left - 8, y=y + 4, font_size=11, fill=_INK,
              text_anchor="end")  # fmt: skip
        if lo is not None and hi is not None:
            a, b = x(max(-lim, min(lim, lo))), x(max(-lim, min(lim, hi)))
            c.add("line", x1=a, x2=b, y1=y, y2=y, stroke=colour, stroke_width=2)
            if lo < -lim:
                c.add("path", d=f"M{_num(x(-lim))} {_num(y)}l7 -5v10z", fill=colour)
            if hi > lim:
                c.add("path", d=f"M{_num(x(lim))} {_num(y)}l-7 -5v10z", fill=colour)
        if diff is not None:
            px = x(max(-lim, min(lim, diff)))
            if abs(diff) > lim:
                c.add("path", d=f"M{_num(px)} {_num(y - 6)}l6 6l-6 6l-6 -6z", fill=colour)
            else:
                c.add("circle", cx=px, cy=y, r=5.0, fill=colour)
        c.close("g")
    readings = [("worse: interval below 0", BROKEN), ("interval includes 0", NEUTRAL),
                ("better: interval above 0", FIXED)]  # fmt: skip
    _legend(c, "interval", readings, left, bottom + 56)
    return _document(left + WIDTH + 24, bottom + 68, "Paired difference per slice", c.parts)


def _signed(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:+.1f}%"


def _p(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}"


def flips_svg(
    slices: pl.DataFrame,
    critical: tuple[str, ...] | list[str] = (),
    paired: pl.DataFrame | None = None,
) -> str:
    """`evalkit.report.charts.flip_counts` as SVG: per slice, broken cases (pass → fail) to the
    left and fixed (fail → pass) to the right; the aggregate in its own panel below, on its own
    scale."""
    rows = labelled(with_ids(slice_rows(slices), paired), tuple(critical))
    left = _label_width(rows["label"].to_list())
    c = _Canvas()
    y = 0.0
    aggregate = pl.col("slice") == AGGREGATE
    panels = [(rows.filter(~aggregate), "Flips per slice"),
              (rows.filter(aggregate), "Flips over all paired cases (own scale)")]  # fmt: skip
    for data, title in panels:
        if not data.height:
            continue
        y = _flip_panel(c, data, title, left, y)
    _legend(c, "flip", [("broken (pass → fail)", BROKEN), ("fixed (fail → pass)", FIXED)], left,
            y + 14)  # fmt: skip
    return _document(left + WIDTH + 24, y + 26, "Flips per slice", c.parts)


def _flip_panel(c: _Canvas, data: pl.DataFrame, title: str, left: float, y0: float) -> float:
    """One panel of `flips_svg` from ``y0`` down; returns where the next starts."""
    top_count = max([*data["broken"].to_list(), *data["fixed"].to_list(), 1])
    c.open("g", None, transform=f"translate(0,{_num(y0)})")
    top = _header(c, title, None, 8.0) + 4
    row = 22.0
    bottom = top + max(row * data.height, 40.0)
    x = _scale(-top_count, top_count, left, left + WIDTH)
    ticks = [float(t) for t in count_ticks(top_count)]
    _x_axis(c, x, ticks, [str(abs(int(t))) for t in ticks], top, bottom,
            "cases: ← broken · fixed →")  # fmt: skip
    for i, r in enumerate(data.iter_rows(named=True)):
        y = top + row * i + 3
        tip = (f"{r['slice']}: {r['broken']} broken ({r['broken_ids']}), {r['fixed']} fixed "
               f"({r['fixed_ids']})")  # fmt: skip
        c.open("g", tip, class_="mark", data_slice=r["slice"])
        c.add("text", r["label"], x=left - 8, y=y + row / 2 + 1, font_size=11, fill=_INK,
              text_anchor="end")  # fmt: skip
        if r["broken"]:
            c.add("rect", x=x(-r["broken"]), y=y, width=x(0) - x(-r["broken"]), height=row - 6,
                  fill=BROKEN)  # fmt: skip
        if r["fixed"]:
            c.add("rect", x=x(0), y=y, width=x(r["fixed"]) - x(0), height=row - 6, fill=FIXED)
        c.close("g")
    c.add("line", x1=x(0), x2=x(0), y1=top, y2=bottom, stroke=_REF)
    c.close("g")
    return y0 + bottom + 44


def pass_rates_svg(slices: pl.DataFrame) -> str:
    """`evalkit.report.charts.pass_rate_by_slice` as SVG: per slice, the baseline's and the
    candidate's pass rate with its Wilson interval, one above the other."""
    rows = slice_rows(slices)
    labels = [f"{s} (n={n})" for s, n in zip(rows["slice"], rows["n"], strict=True)]
    left = _label_width(labels)
    c = _Canvas()
    top = _header(c, "Pass rate by slice", None, 8.0) + 4
    row = 30.0
    bottom = top + max(row * rows.height, 80.0)
    x = _scale(0.0, 1.0, left, left + WIDTH)
    ticks = _ticks(0.0, 1.0, 10)
    _x_axis(c, x, ticks, [_pct(t) for t in ticks], top, bottom, "pass rate (Wilson 95% interval)")
    sides = (("baseline", "base", BASELINE, -6.0), ("candidate", "cand", FIXED, 6.0))
    for i, (r, label) in enumerate(zip(rows.iter_rows(named=True), labels, strict=True)):
        y = top + row * (i + 0.5)
        tip = "; ".join(
            f"{run} {_rate(r[f'{p}_pass'])} [{_rate(r[f'{p}_lo'])}, {_rate(r[f'{p}_hi'])}]"
            for run, p, _, _ in sides
        )
        c.open("g", f"{r['slice']}: {tip}", class_="mark", data_slice=r["slice"])
        c.add("text", label, x=left - 8, y=y + 4, font_size=11, fill=_INK, text_anchor="end")
        for _, p, colour, dy in sides:
            if r[f"{p}_lo"] is not None and r[f"{p}_hi"] is not None:
                c.add("line", x1=x(r[f"{p}_lo"]), x2=x(r[f"{p}_hi"]), y1=y + dy, y2=y + dy,
                      stroke=colour, stroke_width=2)  # fmt: skip
            if r[f"{p}_pass"] is not None:
                c.add("circle", cx=x(r[f"{p}_pass"]), cy=y + dy, r=4.0, fill=colour)
        c.close("g")
    _legend(c, "run", [("baseline", BASELINE), ("candidate", FIXED)], left, bottom + 56)
    return _document(left + WIDTH + 24, bottom + 68, "Pass rate by slice", c.parts)


def _rate(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def stacked_svg(*svgs: str, gap: float = 24.0) -> str:
    """SVG documents of this module one below the other, as one document (`slice_overview`'s
    static image): each one's drawing moved down in a group.

    Examples:
        >>> both = stacked_svg(_document(10, 5, "a", ["<g/>"]), _document(20, 5, "b", ["<g/>"]))
        >>> both.count("<svg"), 'height="34"' in both.split(">")[0], both.count("<g/>")
        (1, True, 2)
    """
    body, y, width, titles = [], 0.0, 0.0, []
    for svg in svgs:
        head, rest = svg.split(">", 1)
        w, h = (float(v) for v in re.findall(r'(?:width|height)="([0-9.]+)"', head)[:2])
        title = re.match(r"<title>([^<]*)</title>", rest)
        if title:
            titles.append(unescape(title[1]))
            rest = rest[title.end() :]
        drawing = rest.removesuffix("</svg>").replace(_BACKGROUND, "", 1)
        body.append(f'<g transform="translate(0,{_num(y)})">{drawing}</g>')
        y, width = y + h + gap, max(width, w)
    return _document(width, y - gap, "; ".join(titles), body)


@dataclass(frozen=True)
class SliceChartInputs:
    """What a report's slice charts draw: its slices, the policy's tolerance and critical tags,
    the name of the interval, and the paired cases whose ids the tooltips list (unsealed)."""

    slices: pl.DataFrame
    tolerance: float
    critical: tuple[str, ...]
    method: str
    paired: pl.DataFrame


def slice_chart_inputs(report: Report) -> SliceChartInputs:
    """The inputs of ``report``'s slice charts, as its page and the gate's files draw them."""
    from evalkit.compare.slices import interval_name

    methods = report.slices["interval_method"].drop_nulls().unique().sort().to_list()
    named = ", ".join(interval_name(m) for m in methods) or "interval"
    return SliceChartInputs(
        report.slices,
        report.decision.policy.tolerance if report.decision else 0.02,
        report.critical_tags,
        f"{100 * report.level:.4g}% {named}",
        report.paired.filter(~pl.col("sealed").fill_null(False)),  # the slices' cases
    )


def save_slice_charts(report: Report, folder: str | Path) -> list[Path]:
    """Write ``report``'s slice charts into ``folder`` as SVG drawn here (no JavaScript engine):
    ``slice_forest.svg``, ``flip_counts.svg`` and ``pass_rate_by_slice.svg``, as the gate
    keeps them; returns the paths. The same charts, interactive, are
    `evalkit.report.charts.slice_forest` and its siblings.
    """
    c = slice_chart_inputs(report)
    drawn = {
        "slice_forest": forest_svg(c.slices, c.tolerance, c.critical, c.method, c.paired),
        "flip_counts": flips_svg(c.slices, c.critical, c.paired),
        "pass_rate_by_slice": pass_rates_svg(c.slices),
    }
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    for name, text in drawn.items():
        (out / f"{name}.svg").write_text(text, encoding="utf-8")
    return [out / f"{name}.svg" for name in drawn]


@dataclass(frozen=True)
class StaticChart:
    """A chart as its SVG alone: what a notebook output shows where nobody can click it (a
    gate run by CI), with no Altair chart and no Vega-Lite spec built for it.

    Examples:
        >>> sorted(StaticChart("<svg/>", "Flips")._repr_mimebundle_())
        ['image/svg+xml', 'text/plain']
    """

    svg: str
    title: str

    def _repr_mimebundle_(self, include: object = None, exclude: object = None) -> dict[str, str]:
        return {"image/svg+xml": self.svg, "text/plain": f"<evalkit chart: {self.title}>"}


def slice_overview_svg(inputs: SliceChartInputs) -> StaticChart:
    """`evalkit.report.charts.slice_overview`'s static image (the forest above the flips)."""
    c = inputs
    forest = forest_svg(c.slices, c.tolerance, c.critical, c.method, c.paired)
    return StaticChart(stacked_svg(forest, flips_svg(c.slices, c.critical, c.paired)),
                       "Paired difference per slice")  # fmt: skip

"""The slice charts' static SVG (`evalkit.report.svg`): well-formed, one mark per slice, every
label escaped, drawn where the data says; and the gate's charts use it without vl-convert (no
JavaScript engine), while a chart changed after it was made draws with vl-convert again."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import polars as pl
import pytest
import vl_convert
from synthetic_runs import seed000_runs

from evalkit.compare.analysis import compare
from evalkit.compare.gate import decide
from evalkit.compare.policy import GatePolicy
from evalkit.compare.slices import slices
from evalkit.report import charts, svg
from evalkit.report.build import build_report

SVG = "{http://www.w3.org/2000/svg}"
TAGS = ["<script>alert(1)</script>", "billing & refunds", 'say "hi"', "orders"]


@pytest.fixture(scope="module")
def paired() -> pl.DataFrame:
    """Eight cases per tag: in ``orders`` two broken, in the others one fixed, one broken."""
    rows = []
    for t, tag in enumerate(TAGS):
        for i in range(8):
            broke, fixed = i < (2 if tag == "orders" else 1), tag != "orders" and i == 7
            rows.append({"case_id": f"c{t}-{i}", "tags": [tag], "base": not fixed,
                         "cand": not broke, "base_error": False, "cand_error": False})  # fmt: skip
    return pl.DataFrame(rows)


@pytest.fixture(scope="module")
def seed000():
    cmp = compare(*seed000_runs())
    return build_report(cmp, decide(cmp.paired, GatePolicy(critical_tags=("billing",))))


def _marks(root: ET.Element) -> list[ET.Element]:
    return root.findall(f".//{SVG}g[@class='mark']")


def _drawn(paired: pl.DataFrame) -> dict[str, str]:
    s = slices(paired)
    return {
        "forest": svg.forest_svg(s, 0.02, ["orders"], paired=paired),
        "flips": svg.flips_svg(s, ["orders"], paired),
        "pass rates": svg.pass_rates_svg(s),
        "overview": svg.stacked_svg(svg.forest_svg(s, 0.02), svg.flips_svg(s)),
    }


def test_each_chart_is_well_formed_with_one_mark_per_slice(paired):
    shown = {*TAGS, "ALL (aggregate)"}
    for name, text in _drawn(paired).items():
        root = ET.fromstring(text)  # raises on anything not well-formed
        slices_drawn = [g.get("data-slice") for g in _marks(root)]
        copies = 2 if name == "overview" else 1  # the forest's marks and the flips'
        assert sorted(slices_drawn) == sorted([*shown] * copies), name
        assert root.find(f"{SVG}title").text, name  # a title for screen readers


def test_a_tag_named_like_markup_is_text(paired):
    for name, text in _drawn(paired).items():
        root = ET.fromstring(text)
        assert not [e for e in root.iter() if e.tag.rsplit("}", 1)[-1] == "script"], name
        labels = [e.text or "" for e in root.iter(f"{SVG}text")]
        assert any(label.startswith("<script>alert(1)</script>") for label in labels), name
        assert any(label.startswith("billing & refunds") for label in labels), name
        assert "<script>" not in text  # escaped in the file, shown as text


def test_the_forest_draws_each_difference_where_the_axis_puts_it(paired):
    root = ET.fromstring(svg.forest_svg(slices(paired), 0.0))
    rules = {e.get("x1") for e in root.iter(f"{SVG}line") if e.get("stroke-dasharray")}
    assert len(rules) == 1  # no tolerance: one dashed rule, at no change
    zero = float(rules.pop())
    points = {g.get("data-slice"): float(g.find(f"{SVG}circle").get("cx")) for g in _marks(root)}
    assert points["billing & refunds"] == pytest.approx(zero)  # one broken, one fixed: 0
    # orders: 2 of 8 broken (−25 pts); the aggregate: 5 broken, 3 fixed of 32 (−6.25 pts)
    assert points["orders"] < points["ALL (aggregate)"] < zero
    assert (zero - points["orders"]) / (zero - points["ALL (aggregate)"]) == pytest.approx(4, 0.01)
    colours = {g.get("data-slice"): g.find(f"{SVG}circle").get("fill") for g in _marks(root)}
    assert colours["billing & refunds"] == charts.NEUTRAL


def test_the_gate_charts_draw_without_vl_convert(paired, monkeypatch, tmp_path):
    def no_engine(*args, **kwargs):
        raise AssertionError("vl-convert ran Vega for a chart that draws itself")

    monkeypatch.setattr(vl_convert, "vegalite_to_svg", no_engine)
    monkeypatch.setattr(vl_convert, "svg_to_png", no_engine)
    s = slices(paired)
    made = {
        "slice_forest": charts.slice_forest(s, 0.02, ["orders"], paired=paired),
        "flip_counts": charts.flip_counts(s, ["orders"], paired),
        "pass_rate_by_slice": charts.pass_rate_by_slice(s),
        "slice_overview": charts.slice_overview(s, 0.02, ["orders"], paired=paired),
    }
    for name, chart in made.items():
        bundle = charts.to_mimebundle(chart)
        assert set(bundle) == {charts.VEGALITE_MIMETYPE, "image/svg+xml", "text/plain"}, name
        assert bundle["image/svg+xml"] == charts.to_svg(chart) == charts.static_svg(chart)
        written = charts.save_chart(chart, tmp_path / name, png=False)
        assert [p.name for p in written] == [f"{name}.svg"]
        assert _marks(ET.parse(written[0]).getroot()), name


def test_a_chart_changed_after_it_was_made_draws_with_vl_convert(paired, monkeypatch):
    drawn = []
    monkeypatch.setattr(vl_convert, "vegalite_to_svg", lambda spec: drawn.append(spec) or "<svg/>")
    charts._svg_of.cache_clear()
    chart = charts.pass_rate_by_slice(slices(paired))
    assert charts.to_svg(chart.properties(width=300)) == "<svg/>" and len(drawn) == 1
    chart.title = "Pass rate, renamed in place"
    assert charts.static_svg(chart) is None
    charts.to_svg(chart)
    assert len(drawn) == 2
    charts._svg_of.cache_clear()


def test_a_reports_slice_charts_are_saved_as_the_gate_keeps_them(seed000, monkeypatch, tmp_path):
    monkeypatch.setattr(vl_convert, "vegalite_to_svg", None)  # any call would fail
    written = svg.save_slice_charts(seed000, tmp_path / "out")
    assert [p.name for p in written] == [
        "slice_forest.svg", "flip_counts.svg", "pass_rate_by_slice.svg"
    ]  # fmt: skip
    forest = ET.parse(written[0]).getroot()
    shown = [g.get("data-slice") for g in _marks(forest)]
    assert shown == [r for r in charts_order(seed000)]
    tips = " ".join(g.find(f"{SVG}title").text for g in _marks(forest))
    assert "billing-000" in tips  # the broken cases' ids, from the report's paired cases


def charts_order(report) -> list[str]:
    """The forest's rows: critical tags first (policy order), the others, the aggregate last."""
    critical = list(report.critical_tags)
    rest = sorted(s for s in report.slices.filter(pl.col("n") > 0)["slice"] if s != "ALL")
    return [*critical, *(s for s in rest if s not in critical), "ALL (aggregate)"]

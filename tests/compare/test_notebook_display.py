"""What the notebooks show: charts as Vega-Lite that JupyterLab renders natively (tooltips, a
click on a slice) with static SVG and PNG for everything else, and case cards that carry their
own scoped styles, the same markup in a notebook, ``gate.html`` and ``compare --html``."""

from __future__ import annotations

import base64
import json
import re
from html import unescape
from pathlib import Path

import altair as alt
import nbformat
import papermill as pm
import polars as pl
import pytest
import vl_convert
from synthetic_runs import seed000_runs, write_store

from evalkit.cli import main
from evalkit.compare.analysis import compare
from evalkit.compare.gate import decide
from evalkit.compare.policy import GatePolicy
from evalkit.notebooks import _ThisPython, to_report_html
from evalkit.report import charts, gate_charts, html, judge_charts
from evalkit.report.build import build_report

VL = "application/vnd.vegalite.v5+json"  # what JupyterLab 4 renders with its own Vega
EXTERNAL = re.compile(r"<script[^>]+src=|cdn\.jsdelivr|cdnjs|unpkg\.com", re.I)
TESTS = Path(__file__).resolve().parents[1]
CONFIG = "suite: demo\nsystem: {provider: demo, model: demo-model}\ncritical_tags: [billing]\n"


@pytest.fixture(scope="module")
def seed000():
    cmp = compare(*seed000_runs())
    return build_report(cmp, decide(cmp.paired, GatePolicy(critical_tags=("billing",))))


def _walk(spec: object):
    """Every dict inside a Vega-Lite spec."""
    if isinstance(spec, dict):
        yield spec
        for value in spec.values():
            yield from _walk(value)
    elif isinstance(spec, list):
        for value in spec:
            yield from _walk(value)


def _tooltips(spec: dict) -> dict[str, str]:
    """Each tooltip field of a spec -> its title."""
    tips = [d["tooltip"] for d in _walk(spec) if isinstance(d.get("tooltip"), list)]
    return {t["field"]: t.get("title", t["field"]) for tip in tips for t in tip}


def test_a_chart_displays_as_vega_lite_with_tooltips_a_slice_pick_and_static_images(seed000):
    live = seed000.paired.filter(~pl.col("sealed"))
    chart = charts.slice_overview(seed000.slices, 0.02, ["billing"], paired=live)
    with alt.renderers.enable("svg"):  # what the shipped notebooks enable: not consulted
        bundle = chart._repr_mimebundle_()
    assert {VL, "image/svg+xml", "text/plain"} == set(bundle)  # its own SVG: no PNG drawn
    spec = bundle[VL]
    assert spec["$schema"].endswith("/vega-lite/v5.json")
    tips = _tooltips(spec)
    for field in ("n", "broken", "fixed", "diff_lo", "diff_hi", "broken_ids", "case_ids"):
        assert field in tips, field
    assert tips["broken_ids"] == "broken cases" and tips["diff_hi"] == "interval, upper"
    datasets = spec["datasets"].values()
    rows = {r["slice"]: r for values in datasets for r in values if "broken_ids" in r}
    billing = rows["billing"]
    assert billing["broken_ids"].startswith("billing-000, billing-001") and billing["n"] == 100
    assert rows["ALL (aggregate)"]["broken_ids"].count(", ") == 11  # all 12, none left out
    assert "more" not in rows["ALL (aggregate)"]["broken_ids"]
    # the pick: a click on a slice in the forest; the flips per slice are filtered by it
    (param,) = spec["params"]
    assert param["name"] == charts.PICK and param["select"]["fields"] == ["slice"]
    assert param["select"]["on"] == "click"
    filters = [d["filter"] for d in _walk(spec) if isinstance(d.get("filter"), dict)]
    assert {"param": charts.PICK} in filters
    assert (
        bundle["image/svg+xml"].startswith("<svg") and "Flips per slice" in bundle["image/svg+xml"]
    )
    assert "LayerChart(" not in bundle["text/plain"] and "Paired difference" in bundle["text/plain"]
    # a chart without its own SVG: vl-convert's, and a PNG for viewers without SVG
    rates = pl.DataFrame({"tag": ["a"], "cases": [10], "flaky": [1], "flake_rate": [0.1]})
    flakes = gate_charts.flake_rate_by_slice(rates)
    other = flakes._repr_mimebundle_()
    assert base64.b64decode(other["image/png"])[:8] == b"\x89PNG\r\n\x1a\n"
    assert other["image/svg+xml"].startswith("<svg") and charts.static_svg(flakes) is None


def test_the_case_ids_in_a_tooltip_are_the_slices_flips(seed000):
    spec = charts.flip_counts(seed000.slices, paired=seed000.paired).to_dict()
    rows = [r for values in spec["datasets"].values() for r in values if "flip" in r]
    by = {(r["slice"], r["flip"][:5]): r for r in rows}
    assert by["policy", "broke"]["case_ids"] == "policy-000"
    assert by["policy", "fixed"]["case_ids"] == "none"
    general = by["ALL (aggregate)", "fixed"]["case_ids"]
    assert general.count(", ") == 11 and general.endswith(" … +6 more")  # 18 fixed, 12 listed
    unlisted = charts.flip_counts(seed000.slices).to_dict()
    assert "paired=" in json.dumps(unlisted)  # says how to get them, never a wrong "none"


def _power() -> pl.DataFrame:
    return pl.DataFrame({"slice": ["a", "b"], "n": [30, 100], "min_detectable_drop": [0.2, None],
                         "min_detectable_collapse": [0.1, 0.05]})  # fmt: skip


def _every_chart(seed000) -> dict[str, alt.TopLevelMixin]:
    s, p = seed000.slices, seed000.paired
    null = {"flake": 0.02, "n": 30, "sizes": {"a": 30}, "per_tag": 0.03, "fwer": {"1": 0.03}}
    power = {"drop": 0.05, "n": 30, "sizes": {"a": 30}, "power": 0.4}
    oc = {"alpha": 0.05, "null": [null], "power": [power]}
    conf = pl.DataFrame({"human": [1, 1, 2, 2], "judge": [1, 2, 1, 2], "n": [5, 1, 2, 7]})
    agree = pl.DataFrame({"slice": ["a"], "agreement": [0.6], "lo": [0.4], "hi": [0.8], "n": [20]})
    orders = pl.DataFrame({"slice": ["a"], "accuracy_ab": [0.8], "accuracy_ba": [0.7],
                           "consistency": [0.85]})  # fmt: skip
    flakes = pl.DataFrame({"tag": ["a"], "cases": [10], "flaky": [1], "flake_rate": [0.1]})
    return {
        "slice_forest": charts.slice_forest(s, 0.02, ["billing"], paired=p),
        "flip_counts": charts.flip_counts(s, ["billing"], p),
        "slice_overview": charts.slice_overview(s, 0.02, ["billing"], paired=p),
        "pass_rate_by_slice": charts.pass_rate_by_slice(s),
        "min_detectable_drop": charts.min_detectable_drop(_power()),
        "flake_rate_by_slice": gate_charts.flake_rate_by_slice(flakes),
        "gate_operating_characteristics": gate_charts.gate_operating_characteristics(oc),
        "confusion_heatmap": judge_charts.confusion_heatmap(conf),
        "agreement_by_slice": judge_charts.agreement_by_slice(agree),
        "order_consistency": judge_charts.order_consistency(orders),
    }


def test_every_chart_shows_itself_and_compiles_with_the_vega_lite_5_jupyterlab_has(seed000):
    for name, chart in _every_chart(seed000).items():
        assert type(chart)._repr_mimebundle_ is charts._Shown._repr_mimebundle_, name
        spec = chart.to_dict() | {"$schema": "https://vega.github.io/schema/vega-lite/v5.json"}
        vega = vl_convert.vegalite_to_vega(spec, vl_version="5.8")  # JupyterLab 4 bundles 5.x
        assert vega["marks"], name
        assert _tooltips(chart.to_dict()), f"{name} has no tooltip"


def _notebook(path: Path, db: Path, cells: list[str]) -> Path:
    setup = (
        "import sys\n"
        f"sys.path.insert(0, {str(TESTS)!r})\n"
        "import altair as alt\nimport polars as pl\nfrom IPython.display import display\n"
        "from evalkit.report import charts, html\n"
        "from evalkit.compare.analysis import load_comparison\n"
        "from evalkit.compare.gate import decide\nfrom evalkit.compare.policy import GatePolicy\n"
        "from evalkit.report.build import build_report\nfrom evalkit.store import open_store\n"
        'alt.renderers.enable("svg")  # as the shipped notebooks do\n'
        f"with open_store({str(db)!r}, read_only=True) as store:\n"
        '    comparison = load_comparison(store, "base", "cand")\n'
        'paired = comparison.paired.filter(~pl.col("sealed"))\n'
        'report = build_report(comparison, decide(paired, GatePolicy(critical_tags=("billing",))))'
    )
    nb = nbformat.v4.new_notebook()
    nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(c) for c in [setup, *cells]]
    nbformat.write(nb, path)
    out = path.with_name(f"{path.stem}-out.ipynb")
    pm.execute_notebook(str(path), str(out), kernel_name="python3", progress_bar=False,
                        kernel_manager_class=_ThisPython, cwd=str(path.parent))  # fmt: skip
    return out


def _card(markup: str, case_id: str) -> str:
    found = re.search(rf'<article [^>]*id="case-{case_id}".*?</article>', markup, re.S)
    assert found, f"no card for {case_id}"
    return found[0]


def test_a_notebook_stores_vega_lite_and_images_and_the_cards_compare_html_shows(tmp_path, seed000):
    db = tmp_path / "e.duckdb"
    write_store(db, list(seed000_runs()))
    (tmp_path / "evalkit.yaml").write_text(CONFIG)
    page_path = tmp_path / "r.html"
    assert main(["compare", "base", "cand", "--db", str(db), "--config",
                 str(tmp_path / "evalkit.yaml"), "--html", str(page_path)]) == 0  # fmt: skip
    cells = [
        'charts.slice_forest(report.slices, 0.02, ["billing"])',
        'display(html.fragment(report, ["broken"], max_cases=3))',
        'html.fragment(report, ["slices"])',
    ]
    out = _notebook(tmp_path / "show.ipynb", db, cells)
    nb = nbformat.read(out, as_version=4)
    forest, broken, slices = (c.outputs for c in nb.cells[1:])
    (shown,) = forest
    assert {VL, "image/svg+xml", "text/plain"} == set(shown.data)  # evalkit's own SVG
    assert shown.data[VL]["params"][0]["name"] == charts.PICK
    (cards,) = broken
    assert (
        set(cards.data) == {"text/html", "text/plain"} and html.CARD_CSS in cards.data["text/html"]
    )
    # the slices section: its tables as HTML, the linked chart as its own output, then the
    # per-scorer table as HTML
    assert [set(o.data) >= {VL, "image/svg+xml"} for o in slices] == [False, True, False]
    assert "Per scorer (reported, not gated by itself)" in slices[2].data["text/html"]
    assert (
        "<svg" not in slices[0].data["text/html"] and 'id="slices"' in slices[0].data["text/html"]
    )
    # one renderer: the same markup for the same case in the notebook, compare --html and here
    want = html.case_card(seed000.broken[0], "base", "cand")
    assert seed000.broken[0].case_id == "policy-000" and "BLOCKING" in want
    page = page_path.read_text()
    assert _card(cards.data["text/html"], "policy-000") == _card(page, "policy-000") == want
    assert html.CARD_CSS in page
    # gate.html is nbconvert's rendering of the executed notebook: static images, no CDN
    report_page = to_report_html(out).read_text()
    assert report_page.count("data:image/svg+xml;base64,") == 2 and not EXTERNAL.search(report_page)
    # nbconvert re-serialises the outputs' HTML: the same card, "'" written for "&#x27;"
    assert unescape(_card(report_page, "policy-000")) == unescape(want)
    assert html.CARD_CSS in report_page


def test_a_case_card_carries_its_scoped_css_and_its_side_by_side_layout(seed000):
    d = seed000.broken[0]
    markup = html.case_cards([d], "base", "cand")
    style = re.fullmatch(r"<style>(.*?)</style>(.*)", markup, re.S)
    assert style and style[1] == html.CARD_CSS
    selectors = re.findall(r"(?:^|})\s*([^{}]+)\{", html.CARD_CSS)
    assert len(selectors) > 10
    for selector in selectors:  # every rule is scoped to a card: nothing clashes with Lab's
        assert all(part.strip().startswith(".evalkit-card") for part in selector.split(",")), (
            selector
        )
    card = style[2]
    classes = {c for attr in re.findall(r'class="([^"]+)"', card) for c in attr.split()}
    assert classes and all(c.startswith("evalkit-card") for c in classes), classes
    assert "evalkit-card-blocking" in classes and "evalkit-card-badge" in classes
    # the badge stands apart from the text before it ("must_passBLOCKING" was the bug)
    assert re.search(r"must_pass</span> <span class=\"evalkit-card-badge\" style=\"[^\"]*"
                     r"margin-left:8px", card)  # fmt: skip
    # side by side: two table cells of half the width each, in a fixed-layout table
    sides = re.search(r'class="evalkit-card-sides" style="([^"]+)"', card)[1]
    assert "display:table" in sides and "table-layout:fixed" in sides and "width:100%" in sides
    cells = re.findall(r'class="evalkit-card-side" style="([^"]+)"', card)
    assert len(cells) == 2 and all("display:table-cell" in c and "width:50%" in c for c in cells)


# JupyterLab's HTML sanitizer (packages/apputils/src/sanitizer.ts, `allowedStyles`) keeps these
# inline properties among others; `gap`, `grid-template-columns` and `flex` it drops.
LAB_KEEPS = {"display", "table-layout", "width", "border-collapse", "vertical-align", "padding",
             "margin", "margin-left", "border", "border-left", "border-radius", "background",
             "color", "font-size", "font-weight", "white-space"}  # fmt: skip


def test_a_card_keeps_its_layout_where_jupyterlab_drops_the_style_block(seed000):
    card = html.case_card(seed000.broken[0], "base", "cand")
    assert "<style" not in card  # a sanitizer has nothing to drop from the card itself
    inline = [decl for s in re.findall(r'style="([^"]+)"', card) for decl in s.split(";")]
    assert inline and {d.split(":")[0] for d in inline} <= LAB_KEEPS
    plain = html.case_card(seed000.broken[-1], "base", "cand")
    assert "BLOCKING" not in plain and 'class="evalkit-card"' in plain
    # a blocking card's edge is red without the stylesheet too
    assert "border-left:5px solid #cf222e" in card and "border-left:5px solid #d0d7de" in plain

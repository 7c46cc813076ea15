"""The report: flips first and the aggregate last, in the terminal, JSON, JUnit XML, HTML and
Markdown; model text is inert in the terminal and escaped everywhere else."""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET
from dataclasses import replace

import polars as pl
import pytest
from rich.console import Console
from synthetic_runs import C, make_run, seed000_runs, write_store

from evalkit import stats
from evalkit.cli import main
from evalkit.compare.analysis import compare
from evalkit.compare.decision import Override
from evalkit.compare.gate import decide
from evalkit.compare.policy import GatePolicy
from evalkit.report.build import build_report, render_terminal, to_dict, to_json, to_text
from evalkit.report.formatting import inert
from evalkit.report.html import to_html
from evalkit.report.junit import to_junit
from evalkit.report.markdown import GITHUB_COMMENT_LIMIT, tag_rows, to_markdown


@pytest.fixture(scope="module")
def seed000():
    cmp = compare(*seed000_runs())
    decision = decide(cmp.paired, GatePolicy(critical_tags=("billing",)))
    return build_report(cmp, decision)


def test_terminal_report_leads_with_flips_and_ends_with_the_aggregate(seed000):
    text = to_text(seed000, max_cases=20)
    order = [
        text.index("evalkit gate: BLOCKED"),
        text.index("BLOCK tier 1: must_pass case policy-000 fails"),  # the reasons lead
        text.index("Broken: 12"),
        text.index("policy-000 policy · must_pass · BLOCKING"),
        text.index("billing-000"),
        text.index("general-000"),
        text.index("Fixed: 18"),
        text.index("Gate findings"),
        text.index("Critical tags"),
        text.index("Slices"),
        text.index("Failing in both runs"),
        text.index("Aggregate (last, on purpose)"),
    ]
    assert order == sorted(order)
    assert "9 in blocking tiers first" in text
    assert "missing 'refund'" in text and "unexpected tool call refund(x=1)" in text
    assert "user: question billing-000" in text  # the input
    assert "87.0% → 88.0% (+1.0 pts" in text
    assert "baseline failed" in text and "contains: missing 'refund'" in text


def test_broken_cases_carry_input_both_outputs_and_every_scorers_reason(seed000):
    assert [c.case_id for c in seed000.broken[:2]] == ["policy-000", "billing-000"]
    assert sum(c.blocking for c in seed000.broken) == 9
    first = seed000.broken[1]
    assert first.input == "user: question billing-000"
    assert first.base_output == "base-run says p to billing-000"
    assert first.cand_output == "cand-run says f to billing-000"
    assert [(n.scorer, n.passed) for n in first.cand_notes] == [
        ("contains", False),
        ("json_schema", True),
    ]


def test_json_report_parses_with_the_right_counts(seed000):
    data = json.loads(to_json(seed000))
    assert (data["n_paired"], data["n_broken"], data["n_fixed"]) == (600, 12, 18)
    assert data["decision"]["blocked"] is True and data["decision"]["exit_code"] == 1
    assert data["broken"][0]["case_id"] == "policy-000"
    assert data["aggregate"]["slice"] == "ALL"
    assert data["aggregate"]["cand_pass"] - data["aggregate"]["base_pass"] == pytest.approx(0.01)
    assert len(data["failing_both"]) == 60 and len(data["always_passing"]) == 510
    assert [s["slice"] for s in data["slices"]] == ["billing", "general", "policy", "ALL"]


def test_junit_has_one_testcase_per_paired_case_plus_the_decision(seed000):
    root = ET.fromstring(to_junit(seed000))
    assert root.tag == "testsuite"
    cases = root.findall("testcase")
    assert (len(cases) == root.get("tests") and False) or len(cases) == 600 + 1
    failing = 12 + 60  # broken, and failing in both runs: every candidate failure fails
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("601", "73", "0")
    failed = {c.get("name") for c in cases if c.find("failure") is not None}
    assert len(failed) == failing + 1 and {c.case_id for c in seed000.broken} <= failed
    billing = next(c for c in cases if c.get("name") == "billing-000")
    assert billing.get("classname") == "demo.billing"
    assert "missing 'refund'" in billing.find("failure").text
    assert "baseline passed" in billing.find("failure").get("message")
    # the message, which CI dashboards show while they collapse the body, says what failed
    assert billing.find("failure").get("message").startswith("contains: missing 'refund'")
    decision = cases[-1]
    assert (decision.get("classname"), decision.get("name")) == ("demo.gate", "decision")
    assert decision.find("failure").get("message") == "gate BLOCKED"
    assert "must_pass case policy-000" in decision.find("failure").text


def test_junit_errors_skips_and_a_passing_decision():
    base = make_run("b", [C("mp", "p", criticality="must_pass"), C("n", "p"), C("ok", "p"),
                          C("ed", "p"), C("gone", "p")])  # fmt: skip
    cand = make_run("c", [C("mp", "e", criticality="must_pass"), C("n", "e"), C("ok", "p"),
                          C("ed", "p", hash="h2"), C("new", "p")])  # fmt: skip
    root = ET.fromstring(to_junit(build_report(compare(base, cand))))
    # 3 paired + 3 unpaired (edited, removed, added) + the decision
    assert (root.get("tests"), root.get("errors"), root.get("skipped")) == ("7", "2", "3")
    assert root.get("failures") == "0"
    skipped = {c.get("name"): c.find("skipped").get("message") for c in root.iter("testcase")
               if c.find("skipped") is not None}  # fmt: skip
    assert set(skipped) == {"ed", "gone", "new"} and "edited" in skipped["ed"]


def test_html_report_leads_with_the_decision_and_is_self_contained(seed000):
    page = to_html(seed000)
    assert page.lstrip().lower().startswith("<!doctype html")
    order = [page.index("evalkit gate: BLOCKED"), page.index("must_pass case policy-000 fails"),
             page.index('id="broken"'), page.index('id="case-policy-000"'),
             page.index('id="fixed"'), page.index('id="slices"'), page.index('id="suite"'),
             page.index('id="budgets"'), page.index('id="manifest"'),
             page.index('id="aggregate"')]  # fmt: skip
    assert order == sorted(order)
    # one inline figure: the forest plot above the flips it is linked to (charts.slice_overview)
    figure = page[page.index('id="slices"') : page.index('id="suite"')]
    assert figure.count("<svg") == 1 and "status-blocked" in page
    assert "Paired difference per slice" in figure and "Flips per slice" in figure
    assert "<script" not in page and "cdn" not in page.lower()


@pytest.mark.parametrize(
    ("status", "css"),
    [("PASSED", "status-passed"), ("BLOCKED", "status-blocked"),
     ("UNVERIFIED", "status-unverified"), ("PASSED WITH OVERRIDE", "status-passed-with-override")],
)  # fmt: skip
def test_each_gate_status_has_its_own_style(seed000, status, css):
    from evalkit.report import html

    class Decision:  # any status string renders; the four known ones are styled apart
        def __init__(self, d):
            self._d = d

        def __getattr__(self, name):
            return getattr(self._d, name)

    decision = Decision(seed000.decision)
    decision.status = status
    page = html.to_html(replace(seed000, decision=decision), charts=False)
    assert f'class="banner {css}"' in page and f"evalkit gate: {status}" in page
    assert f".{css}{{" in html.CSS


def test_hostile_text_is_escaped_in_html_and_markdown_and_inert_in_the_terminal():
    evil = "\x1b[2J\x1b]0;owned\x07\x1b[32mgate PASSED\x1b[0m <script>alert(1)</script> @team [x](http://e)"
    base = make_run("b", [C("a", "p", ["x"])])
    cand = make_run("c", [C("a", "f", ["x"])])
    cand = replace(cand, outputs=cand.outputs.with_columns(text=pl.lit(evil)),
                   scores=cand.scores.with_columns(reason=pl.lit(evil)))  # fmt: skip
    report = build_report(compare(base, cand), decide(compare(base, cand).paired, GatePolicy()))
    text = to_text(report)
    assert "\x1b" not in text and "\\x1b[2J" in text and "\\x1b]0;owned\\x07" in text
    console_out = io.StringIO()
    render_terminal(report, Console(file=console_out, force_terminal=True, color_system=None))
    assert "\x1b[2J" not in console_out.getvalue() and "\x1b]0" not in console_out.getvalue()
    page = to_html(report, charts=False)
    assert "<script>alert" not in page and "&lt;script&gt;" in page and "\x1b" not in page
    md = to_markdown(report)
    assert "<script>" not in md and "&lt;script&gt;" in md and "\\@team" in md
    assert "[x](http" not in md and "\\[x\\](http\\://e)" in md
    assert inert("tab\tand\nnewline") == "tab\tand\nnewline"
    assert inert("\u202eevil") == "\\u202eevil"


def test_markdown_per_tag_table_matches_the_statistics(seed000):
    md = to_markdown(seed000, link="gate.html")
    assert md.index("evalkit gate: BLOCKED") < md.index("### Why") < md.index("### Per tag")
    assert md.index("### Per tag") < md.index("### Broken: 12") < md.index("### Aggregate")
    rows = {r["tag"]: r for r in tag_rows(seed000)}
    assert list(rows) == ["billing", "general", "policy"]  # the critical tag first
    paired = seed000.paired
    for tag, r in rows.items():
        sub = paired.filter(pl.col("tags").list.contains(tag) & ~pl.col("base_error")
                            & ~pl.col("cand_error"))  # fmt: skip
        b = sub.filter(pl.col("base") & ~pl.col("cand")).height
        c = sub.filter(~pl.col("base") & pl.col("cand")).height
        assert (r["n"], r["broken"], r["fixed"]) == (sub.height, b, c)
        assert (r["base_k"], r["cand_k"]) == (sub["base"].sum(), sub["cand"].sum())
        assert r["p_value"] == pytest.approx(stats.mcnemar_exact(b, c, "greater"))
    assert rows["billing"]["verdict"].startswith("**regressed**")
    assert "| **billing** | 100 | 92 | 84 | 8 | 0 | 0.00391 |" in md
    assert "- `policy-000` (policy; must\\_pass) **blocking**: runner\\: unexpected tool" in md
    assert "76.0% → 77.0%" in md or "Aggregate" in md


def test_markdown_fits_a_github_comment_on_2000_cases_with_300_flips():
    long = "x" * 3000
    base, cand = [], []
    for i in range(2000):
        tag = [f"tag-{i % 40:02d}"]
        base.append(C(f"case-{i:04d}", "p" if i < 1700 else "f", tag))
        after = "f" if i < 150 else "p" if i >= 1850 or i < 1700 else "f"
        cand.append(C(f"case-{i:04d}", after, tag))
    b, c = make_run("b", base), make_run("c", cand)
    c = replace(c, scores=c.scores.with_columns(reason=pl.lit(long)))
    cmp = compare(b, c)
    report = build_report(cmp, decide(cmp.paired, GatePolicy()), iters=200)
    assert (report.n_broken, report.n_fixed) == (150, 150)
    md = to_markdown(report, link="https://ci.example/gate.html")
    assert len(md) <= GITHUB_COMMENT_LIMIT
    assert md.count("| tag-") == 40  # every tag's row is there
    small = to_markdown(report, link="gate.html", limit=12_000)
    assert len(small) <= 12_000 and "more broken cases: see [the full report](gate.html)" in small


def test_suite_lists_unstable_failing_both_saturated_edited_sealed_and_costs():
    base = make_run(
        "b",
        [
            C("shaky", "ppf", ["x"]),
            C("bad-label", "f", ["x"]),
            C("easy", "p", ["x"]),
            C("edited", "p", ["x"]),
            C("gone", "p"),
            C("held-out", "p", ["sealed-slice"], sealed=True),
        ],
    )
    cand = make_run(
        "c",
        [
            C("shaky", "pff", ["x"]),
            C("bad-label", "f", ["x"]),
            C("easy", "p", ["x"]),
            C("edited", "f", ["x"], hash="h2"),
            C("new", "p"),
            C("held-out", "f", ["sealed-slice"], sealed=True),
        ],
    )
    cand = replace(cand, outputs=cand.outputs.with_columns(latency_ms=150.0))
    report = build_report(compare(base, cand), decide(compare(base, cand).paired, GatePolicy()))
    assert report.unstable == ("shaky",)
    assert report.failing_both == ("bad-label",)
    assert report.always_passing == ("easy",)
    assert [c.case_id for c in report.broken] == ["shaky"]  # never the sealed or edited case
    assert report.sealed["slice"].to_list() == ["sealed-slice", "ALL"]
    assert report.sealed.row(0, named=True)["broken"] == 1
    assert report.usage["mean_latency_ms"] == (100.0, 150.0)
    text = to_text(report)
    assert "edited (edited)" in text and "gone (removed)" in text and "new (added)" in text
    assert "Sealed slices (reported, never gated)" in text and "+50.0%" in text
    changes = {c["case_id"]: c["change"] for c in to_dict(report)["changes"]}
    assert changes == {"edited": "edited", "gone": "removed", "new": "added"}


def test_an_override_is_shown_in_every_rendering():
    base, cand = seed000_runs()
    cmp = compare(base, cand)
    keys = tuple(f.key for f in decide(cmp.paired, GatePolicy()).blocking())
    override = Override("ana", "billing wording change is intended (PR 812)", None, keys)
    report = build_report(cmp, decide(cmp.paired, GatePolicy(), overrides=[override]))
    assert "PASSED WITH OVERRIDE" in to_text(report)
    assert "billing wording change is intended (PR 812)" in to_text(report)
    assert json.loads(to_json(report))["decision"]["overrides"][0]["who"] == "ana"
    assert "billing wording change is intended" in to_html(report, charts=False)


def test_evalkit_compare_prints_the_report_and_writes_json_junit_html(tmp_path, capsys):
    write_store(tmp_path / "e.duckdb", list(seed000_runs()))
    (tmp_path / "evalkit.yaml").write_text(
        "suite: demo\nsystem: {provider: demo, model: demo-model}\ncritical_tags: [billing]\n"
    )
    args = ["compare", "base", "cand", "--db", str(tmp_path / "e.duckdb"), "--config",
            str(tmp_path / "evalkit.yaml"), "--json", str(tmp_path / "r.json"), "--junit",
            str(tmp_path / "r.xml"), "--html", str(tmp_path / "r.html"), "--markdown",
            str(tmp_path / "r.md")]  # fmt: skip
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert printed.index("Broken: 12") < printed.index("Aggregate (last, on purpose)")
    assert json.loads((tmp_path / "r.json").read_text())["n_broken"] == 12
    assert ET.parse(tmp_path / "r.xml").getroot().get("tests") == "601"
    page = (tmp_path / "r.html").read_text()
    heading = "evalkit compare: the gate would say BLOCKED"  # compare exits 0: not the gate
    assert "<svg" in page and page.index(heading) < page.index('id="broken"')
    md = (tmp_path / "r.md").read_text()
    assert md.startswith(f"## 🔴 {heading}") and "[the full report](r.html)" in md
    assert "evalkit gate:" not in printed + page + md


def test_charts_sort_critical_first_aggregate_last_and_label_their_lines(seed000):
    from evalkit.report import charts

    spec = charts.slice_forest(seed000.slices, 0.02, ["policy"]).to_dict()
    order = spec["layer"][0]["encoding"]["y"]["sort"]
    assert order == ["★ policy (n=50)", "billing (n=100)", "general (n=450)",
                     "ALL (aggregate) (n=600)"]  # fmt: skip
    assert "Tango score interval" in spec["title"]["subtitle"]
    texts = [layer for layer in spec["layer"] if layer["mark"]["type"] == "text"]
    assert len(texts) == 2  # "no change" and "−tolerance (2 pts)"
    assert spec["layer"][0]["encoding"]["x"]["axis"]["title"].endswith("(points)")
    flips_spec = charts.flip_counts(seed000.slices).to_dict()
    assert len(flips_spec["vconcat"]) == 2  # the slices, and the aggregate on its own scale
    bars = flips_spec["vconcat"][0]["layer"][0]["encoding"]
    assert bars["color"]["scale"]["range"] == [charts.BROKEN, charts.FIXED]
    rates = charts.pass_rate_by_slice(seed000.slices).to_dict()
    assert rates["layer"][0]["encoding"]["color"]["title"] == "run"
    assert "<svg" in charts.to_svg(charts.pass_rate_by_slice(seed000.slices))


def test_forest_plot_clips_wide_intervals_with_an_arrow():
    from evalkit.report import charts

    frame = pl.DataFrame({"slice": ["a", "b", "ALL"], "n": [100, 8, 108], "broken": [1, 6, 7],
                          "fixed": [0, 0, 0], "diff": [-0.01, -0.75, -0.06],
                          "diff_lo": [-0.03, -1.0, -0.1], "diff_hi": [0.01, -0.4, -0.02],
                          "p_value": [0.5, 0.016, 0.008]})  # fmt: skip
    spec = charts.slice_forest(frame, 0.02).to_dict()
    lim = spec["layer"][0]["encoding"]["x"]["scale"]["domain"][1]
    assert lim < 0.75  # the wide slice does not set the scale ...
    left = next(x for x in spec["layer"] if x["mark"].get("shape") == "triangle-left")
    assert left["encoding"]["x"]["datum"] == -lim  # ... it is clipped with an arrow

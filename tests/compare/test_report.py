"""The report: flips first and the aggregate last, in the terminal, JSON, JUnit XML and HTML."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import replace

import pytest
from synthetic_runs import C, make_run, seed000_runs, write_store

from evalkit.cli import main
from evalkit.compare.analysis import compare
from evalkit.compare.gate import GatePolicy, Override, decide
from evalkit.compare.report import build_report, to_dict, to_html, to_json, to_junit, to_text


@pytest.fixture(scope="module")
def seed000():
    cmp = compare(*seed000_runs())
    decision = decide(cmp.paired, GatePolicy(critical_tags=("billing",)))
    return build_report(cmp, decision)


def test_terminal_report_leads_with_flips_and_ends_with_the_aggregate(seed000):
    text = to_text(seed000, max_cases=20)
    order = [
        text.index("evalkit gate: BLOCKED"),
        text.index("Broken: 12"),
        text.index("policy-000"),
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


def test_junit_has_one_testcase_per_paired_case_and_broken_ones_fail(seed000):
    root = ET.fromstring(to_junit(seed000))
    assert root.tag == "testsuite"
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("600", "12", "0")
    cases = root.findall("testcase")
    assert len(cases) == 600
    failed = {c.get("name") for c in cases if c.find("failure") is not None}
    assert failed == {c.case_id for c in seed000.broken}
    billing = next(c for c in cases if c.get("name") == "billing-000")
    assert billing.get("classname") == "evalkit.billing"
    assert "missing 'refund'" in billing.find("failure").text


def test_junit_errors_for_errored_must_pass_cases_and_skips_other_errors():
    base = make_run("b", [C("mp", "p", criticality="must_pass"), C("n", "p"), C("ok", "p")])
    cand = make_run("c", [C("mp", "e", criticality="must_pass"), C("n", "e"), C("ok", "p")])
    root = ET.fromstring(to_junit(build_report(compare(base, cand))))
    assert (root.get("tests"), root.get("errors"), root.get("skipped")) == ("3", "1", "1")
    assert root.get("failures") == "0"


def test_html_report_is_self_contained_with_charts(seed000):
    page = to_html(seed000)
    assert page.lstrip().lower().startswith("<!doctype html")
    assert page.count("<svg") >= 2 and "policy-000" in page and "Aggregate" in page
    assert "cdn" not in page.lower()


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
    override = Override("ana", "billing wording change is intended (PR 812)")
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
            str(tmp_path / "r.xml"), "--html", str(tmp_path / "r.html")]  # fmt: skip
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert printed.index("Broken: 12") < printed.index("Aggregate (last, on purpose)")
    assert json.loads((tmp_path / "r.json").read_text())["n_broken"] == 12
    assert ET.parse(tmp_path / "r.xml").getroot().get("failures") == "12"
    assert "<svg" in (tmp_path / "r.html").read_text()


def test_charts_put_the_aggregate_last_and_mark_the_tolerance(seed000):
    from evalkit.compare import charts

    spec = charts.slice_forest(seed000.slices, tolerance=0.02).to_dict()
    order = spec["layer"][0]["encoding"]["y"]["sort"]
    assert order == ["billing", "general", "policy", "ALL (aggregate)"]
    assert len(spec["layer"]) == 4  # interval, point, zero line, -tolerance line
    flips_spec = charts.flip_counts(seed000.slices).to_dict()
    assert flips_spec["encoding"]["color"]["scale"]["domain"] == ["broken", "fixed"]
    assert charts.pass_rate_by_slice(seed000.slices).to_dict()["layer"]

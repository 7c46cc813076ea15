"""The per-scorer table: each check's broken and fixed, counted by hand from the score rows,
with the exact test scipy gives; shown in the terminal, Markdown and JSON reports."""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict

import polars as pl
from scipy import stats as scipy_stats
from synthetic_runs import seed000_runs

from evalkit.compare.analysis import compare
from evalkit.compare.gate import decide
from evalkit.compare.policy import GatePolicy
from evalkit.compare.scorer_flips import scorer_flips
from evalkit.report.build import build_report, to_json, to_text
from evalkit.report.html import to_html
from evalkit.report.markdown import to_markdown


def _by_hand(scores: pl.DataFrame, cases: set[str]) -> dict[tuple[str, str], bool]:
    votes: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for row in scores.iter_rows(named=True):
        if row["case_id"] in cases and not row["error"] and row["passed"] is not None:
            votes[(row["scorer"], row["case_id"])][0 if row["passed"] else 1] += 1
    return {key: ok > bad for key, (ok, bad) in votes.items()}


def _judged(run, worse: set[str]):
    """The run with a judge check on every case: it fails the cases in ``worse``."""
    judge = run.scores.filter(pl.col("scorer") == "contains").with_columns(
        scorer=pl.lit("judge:reply_tone"), passed=~pl.col("case_id").is_in(list(worse)),
        tier=pl.lit(3).cast(run.scores["tier"].dtype),
        scorer_index=pl.lit(2).cast(run.scores["scorer_index"].dtype),
    )  # fmt: skip
    return dataclasses.replace(run, scores=pl.concat([run.scores, judge]))


def test_per_scorer_counts_match_a_hand_count_and_scipy():
    base, cand = seed000_runs()
    base = _judged(base, set())
    cand = _judged(cand, {f"billing-{i:03d}" for i in range(5)})
    cmp = compare(base, cand)
    cases = set(cmp.paired.filter(~pl.col("sealed").fill_null(False))["case_id"])
    table = scorer_flips(base.scores, cand.scores, sorted(cases))
    b, c = _by_hand(base.scores, cases), _by_hand(cand.scores, cases)
    for row in table.iter_rows(named=True):
        keys = [k for k in b if k[0] == row["scorer"] and k in c]
        assert row["n"] == len(keys)
        assert row["broken"] == sum(b[k] and not c[k] for k in keys)
        assert row["fixed"] == sum(c[k] and not b[k] for k in keys)
        m = row["broken"] + row["fixed"]
        expected = 1.0 if m == 0 else scipy_stats.binomtest(row["broken"], m, 0.5, "greater").pvalue
        assert abs(row["p_broken"] - expected) < 1e-12
    by_name = {r["scorer"]: r for r in table.to_dicts()}
    assert by_name["json_schema"]["broken"] == by_name["json_schema"]["fixed"] == 0
    assert by_name["judge:reply_tone"]["broken"] == 5 and by_name["judge:reply_tone"]["tier"] == 3
    assert table["scorer"].to_list()[-1] == "judge:reply_tone"  # deterministic checks first


def test_the_table_is_in_every_report_format():
    base, cand = seed000_runs()
    cmp = compare(base, cand)
    report = build_report(cmp, decide(cmp.paired, GatePolicy(critical_tags=("billing",))))
    rows = {r["scorer"]: r for r in report.scorer_rows()}
    assert set(rows) == {"contains", "json_schema"} and rows["contains"]["kind"] == "deterministic"
    assert "Per scorer (reported, not gated by itself)" in to_text(report, max_cases=3)
    markdown = to_markdown(report)
    assert "### Per scorer" in markdown and "| contains | deterministic |" in markdown
    assert json.loads(to_json(report))["scorers"][0]["scorer"] == "contains"
    page = to_html(report)
    assert "Per scorer (reported, not gated by itself)" in page and "<td>json_schema</td>" in page

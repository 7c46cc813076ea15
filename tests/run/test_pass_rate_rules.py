"""A run's pass rate follows the suite's replay pass rule (``replays: {pass_rule: ...}``), as the
gate's verdicts do, and says so: under ``all`` and ``k_of_n: 1/3`` the run summary, `evalkit
runs list/show`, `evalkit.Project`, `evalkit history` and the report state the rule's rate,
which is the gate's per-case count; a run recorded before its rule was stored reads as
majority, labelled so.

A Python system answers each case's three replays from a fixed pattern, so majority (3 of 5
cases), all (1 of 5) and 1 of 3 (4 of 5) differ by construction.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import duckdb
import pytest

from evalkit import Project
from evalkit.cli import main
from evalkit.compare.analysis import load_comparison
from evalkit.compare.policy import GatePolicy
from evalkit.report.build import build_report
from evalkit.store import open_store
from evalkit.store.history_queries import case_counts
from tests.replay_app import replay_app

#: Per case, what its three replays answer ("answer" passes the `contains` check).
PATTERNS = {"a": "ppp", "b": "ppf", "c": "pff", "d": "fff", "e": "pfp"}

APP = replay_app(PATTERNS)

#: rule as written -> (cases passed of 5, the basis every surface states)
RULES = {
    "all": (1, "per case, all of 3 replays"),
    "'k_of_n: 1/3'": (4, "per case, 1 of 3 replays"),
}


def _project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rule: str) -> Project:
    (tmp_path / "rule_app.py").write_text(APP)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("rule_app", None)
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "a.yaml").write_text(
        "".join(
            f"- {{id: case-{x}, tags: [t], input: {{messages: [{{role: user, content: {x}}}]}}, "
            "expect: [{contains: answer}]}\n"
            for x in PATTERNS
        )
    )
    (tmp_path / "evalkit.yaml").write_text(
        textwrap.dedent(f"""\
            suite: rules
            system: {{provider: python, model: rule-app, function: "rule_app:answer"}}
            replays: {{n: 3, pass_rule: {rule}}}
            """)
    )
    monkeypatch.chdir(tmp_path)
    return Project(tmp_path, db=tmp_path / "e.duckdb")


@pytest.mark.parametrize("rule", list(RULES))
def test_every_surface_states_the_rules_rate_which_is_the_gates_count(
    rule: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    passed, basis = RULES[rule]
    majority = sum(p.count("p") * 2 > 3 for p in PATTERNS.values())
    assert passed != majority  # the test can tell which one each place shows
    project = _project(tmp_path, monkeypatch, rule)
    result = project.run(label="r", cache=False, concurrency=1, progress=False)
    run_id, rate = result.run_id, passed / 5

    # the gate's verdicts: under the policy the run pinned
    with open_store(project.db, read_only=True) as store:
        pinned = store.manifest(run_id).gate_policy or {}
        policy = GatePolicy.from_manifest(pinned)
        cmp = load_comparison(store, run_id, run_id, pass_rules=policy.pass_rules)
    verdicts = cmp.cand_verdicts
    assert int(verdicts["passed"].fill_null(False).sum()) == passed
    assert int((~verdicts["error"]).sum()) == 5
    report = build_report(cmp)
    assert report.run_rates == (rate, rate) and report.rate_bases == (basis, basis)
    assert f"pass rate of each run ({basis};" in (report.rates_line() or "")

    # the run summary and the result a notebook holds
    assert result.pass_rate == rate
    line = str(result).splitlines()[1].strip()
    assert line.startswith(f"pass rate {rate:.1%} ({basis}): {passed} of 5 cases passed")

    # Project.runs() and history
    row = project.runs().row(0, named=True)
    assert (row["pass_rate"], row["rate_basis"], row["passed"]) == (rate, basis, passed)
    history = project.history(by="label")
    assert history.points[0].rate().rate == history.points[0].rate("t").rate == rate
    assert history.rate_basis == basis

    db = str(project.db)
    assert main(["runs", "list", "--db", db, "--json"]) == 0
    (listed,) = json.loads(capsys.readouterr().out)
    assert (listed["pass_rate"], listed["pass_rate_basis"]) == (rate, basis)
    assert main(["runs", "show", run_id, "--db", db]) == 0
    shown = capsys.readouterr().out
    assert f"{rate:.1%} ({basis.removeprefix('per case, ')})" in shown
    assert main(["history", "--db", db, "--by", "label"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith(f"pass rate ({basis})")
    assert f"{rate:.1%} [" in next(line for line in out.splitlines() if run_id[:25] in line)


def test_a_run_recorded_before_its_rule_was_stored_reads_as_majority(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = _project(tmp_path, monkeypatch, "all")
    result = project.run(label="r", cache=False, concurrency=1, progress=False)
    con = duckdb.connect(str(project.db))  # as an older evalkit recorded it: by majority
    con.execute("DROP TABLE history_rules")
    con.execute("UPDATE history_counts SET passed = 3 WHERE tag = 'ALL'")
    con.close()
    with open_store(project.db, read_only=True) as store:
        counts = case_counts(store, [result.run_id])[result.run_id]
    assert counts.pass_rules.is_default and counts.rate == 3 / 5
    row = project.runs().row(0, named=True)
    assert (row["pass_rate"], row["rate_basis"]) == (3 / 5, "per case, majority of 3 replays")

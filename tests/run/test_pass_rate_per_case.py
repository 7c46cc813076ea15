"""A run's pass rate is one figure everywhere it is shown: per case, each case the majority of
its replays (as the gate and `evalkit history` count), labelled so.

A Python system answers each case's three replays from a fixed pattern, so the per-output and
per-case rates differ by construction: 7 of 12 outputs pass (58.3 %), 3 of 4 cases (75 %).
The run summary, `evalkit runs list`, `evalkit history` and `evalkit.Project` must all say 75 %.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from evalkit import Project
from evalkit.cli import main
from tests.replay_app import replay_app

#: Per case, what its three replays answer ("answer" passes the `contains` check).
PATTERNS = {"a": "ppp", "b": "ppf", "c": "ppf", "d": "fff"}
OUTPUTS_PASSED = sum(p.count("p") for p in PATTERNS.values())  # 7 of 12
CASES_PASSED = sum(p.count("p") * 2 > len(p) for p in PATTERNS.values())  # 3 of 4

APP = replay_app(PATTERNS)


@pytest.fixture()
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Project:
    (tmp_path / "rate_app.py").write_text(APP)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("rate_app", None)
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "a.yaml").write_text(
        "".join(
            f"- {{id: case-{x}, tags: [t], input: {{messages: [{{role: user, content: {x}}}]}}, "
            "expect: [{contains: answer}]}\n"
            for x in PATTERNS
        )
    )
    (tmp_path / "evalkit.yaml").write_text(
        textwrap.dedent("""\
            suite: rates
            system: {provider: python, model: rate-app, function: "rate_app:answer"}
            """)
    )
    monkeypatch.chdir(tmp_path)
    return Project(tmp_path, db=tmp_path / "e.duckdb")


def test_summary_runs_history_and_project_state_one_per_case_rate(
    project: Project, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    result = project.run(label="r3", replays=3, cache=False, concurrency=1, progress=False)
    summary = result.summary
    # The two definitions differ on this run: the test can tell which one each place shows.
    assert (summary.outputs, summary.passed, summary.errored) == (12, OUTPUTS_PASSED, 0)
    per_output, per_case = OUTPUTS_PASSED / 12, CASES_PASSED / 4
    assert per_output != per_case

    # The run summary (what `evalkit run` prints and a notebook shows).
    assert result.pass_rate == per_case
    lines = str(result).splitlines()
    assert lines[1].strip() == (
        "pass rate 75.0% (per case, majority of 3 replays): 3 of 4 cases passed, 2 unstable"
    )
    assert "75.0%" in result._repr_html_() and "58.3%" not in str(result)

    # Project.runs()
    row = project.runs().row(0, named=True)
    assert (row["pass_rate"], row["rate_basis"]) == (per_case, "per case, majority of 3 replays")
    assert (row["passed"], row["decided"], row["unstable"], row["outputs"]) == (3, 4, 2, 12)

    # Project.history(): the same rate for ALL and for the run's one tag
    point = project.history(by="label").points[0]
    assert point.rate().rate == point.rate("t").rate == per_case and point.replays == 3

    db = str(project.db)
    # evalkit runs: JSON, and the table a terminal gets
    assert main(["runs", "list", "--db", db, "--json"]) == 0
    (listed,) = json.loads(capsys.readouterr().out)
    assert listed["pass_rate"] == per_case
    assert listed["pass_rate_basis"] == "per case, majority of 3 replays"
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["runs", "list", "--db", db]) == 0
    table = capsys.readouterr().out
    assert "pass rate (per case)" in table and "75.0% (majority of 3 replays)" in table
    monkeypatch.undo()

    # evalkit history: the header names the basis, the ALL cell is the same rate
    assert main(["history", "--db", db, "--by", "label"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("pass rate (per case, majority of 3 replays)")
    run_line = next(line for line in out.splitlines() if result.run_id[:25] in line)
    assert "75.0% [" in run_line and "n=4" in run_line and "58.3%" not in out

    # runs of different replays in one history: each series says its own basis
    project.run(label="r1", replays=1, cache=False, progress=False)
    capsys.readouterr()
    assert main(["history", "--db", db, "--by", "label"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("pass rate (per case, majority of its replays)")
    assert "label r1 (pass rate per case):" in lines
    assert "label r3 (pass rate per case, majority of 3 replays):" in lines


def test_a_rescore_moves_every_rate_together(
    project: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    """After the outputs are scored again under a stricter check, `evalkit runs list`, the
    Project and history read the newest scoring alike (none keeps the run's first figure)."""
    result = project.run(label="r3", replays=3, cache=False, concurrency=1, progress=False)
    cases = project.root / "cases" / "a.yaml"
    cases.write_text(cases.read_text().replace("contains: answer", "contains: the answer!"))
    assert main(["runs", "rescore", result.run_id, "--db", str(project.db), "--config",
                 str(project.config)]) == 0  # fmt: skip
    capsys.readouterr()
    assert project.runs().row(0, named=True)["pass_rate"] == 0.0
    assert project.history(by="label").points[0].rate().rate == 0.0

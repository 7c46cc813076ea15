"""Which runs a gate compares: promoted baselines, ambiguous labels, self-comparison, and runs
that are not complete (a killed candidate never passes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from synthetic_runs import MANIFEST, C, make_run, write_store

from evalkit.cli import main
from evalkit.compare.pairing import completeness, require_complete, resolve_pair
from evalkit.errors import ConfigError, IncompleteRunError, StoreError
from evalkit.store import open_store


def _cases(prefix: str, verdict: str, n: int = 10) -> list[C]:
    return [C(f"{prefix}-{i:02d}", verdict, ["general"]) for i in range(n)]


@pytest.fixture(autouse=True)
def _no_critical_tags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run the CLI where ``corpus/evalkit.yaml`` is absent: the default gate policy applies."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "runs.duckdb"
    write_store(path, [make_run("b1", _cases("c", "p"), label="baseline"),
                       make_run("c1", _cases("c", "p"), label="candidate")])  # fmt: skip
    return path


def test_a_label_naming_several_runs_is_an_error_listing_them(db: Path) -> None:
    write_store(db, [make_run("b2", _cases("c", "p"), label="baseline")])
    with open_store(db, write=True) as store, pytest.raises(StoreError) as caught:
        store.resolve_run("baseline")
    assert "names 2 runs: b2" in str(caught.value) and "b1" in str(caught.value)
    assert "baseline@latest" in str(caught.value)
    with open_store(db, write=True) as store:
        assert store.resolve_run("baseline@latest") == "b2"
        assert store.resolve_run("b1") == "b1"


def test_a_failed_or_killed_run_does_not_capture_the_label(db: Path) -> None:
    write_store(db, [make_run("b2", _cases("c", "p"), label="baseline")], status="failed")
    write_store(db, [make_run("b3", _cases("c", "p"), label="baseline")], status="running")
    with open_store(db, read_only=True) as store:
        assert store.resolve_run("baseline") == "b1"  # the one complete run with the label
        assert store.resolve_run("baseline@latest") == "b3"  # the newest, as asked
        # per-run frames take labels too, and an unknown one is an error, not an empty frame
        assert store.outputs("baseline")["run_id"].unique().to_list() == ["b1"]
        assert store.scores("candidate")["run_id"].unique().to_list() == ["c1"]
        with pytest.raises(StoreError, match="no run with id or label 'nope'"):
            store.outputs("nope")


def test_an_unknown_label_gets_a_did_you_mean_and_the_labels(db: Path) -> None:
    with open_store(db, write=True) as store, pytest.raises(StoreError) as caught:
        store.resolve_run("candidat")
    assert "did you mean 'candidate'" in str(caught.value)
    assert "labels: baseline, candidate" in str(caught.value)


def test_promote_show_and_gate_against_the_promoted_baseline(db: Path, capsys) -> None:
    with (
        open_store(db, write=True) as store,
        pytest.raises(ConfigError, match="no promoted baseline"),
    ):
        resolve_pair(store, None, "candidate")
    args = ["--db", str(db)]
    assert main(["baseline", "promote", "b1", *args, "--who", "ana", "--reason", "v1 ships"]) == 0
    assert "baseline of suite 'demo' is now b1" in capsys.readouterr().out
    assert main(["baseline", "show", *args]) == 0
    shown = capsys.readouterr().out
    assert "b1" in shown and "ana" in shown and "v1 ships" in shown
    with open_store(db, write=True) as store:
        assert resolve_pair(store, None, "candidate") == ("b1", "c1")
        history = store.baselines("demo")
        assert history.height == 1 and history["promoted_at"][0] is not None
    report, markdown = db.parent / "r.json", db.parent / "r.md"
    capsys.readouterr()
    assert (
        main(["compare", *args, "candidate", "--json", str(report), "--markdown", str(markdown)])
        == 0
    )
    assert json.loads(report.read_text())["baseline"]["run_id"] == "b1"  # the promoted one
    # compare exits 0 whatever the gate would say, so it never heads itself as the gate
    said = capsys.readouterr().out
    assert "evalkit compare: the gate would say " in said and "evalkit gate:" not in said
    assert "evalkit compare: the gate would say " in markdown.read_text().splitlines()[0]


def test_a_newer_run_with_the_baseline_label_does_not_become_the_baseline(db: Path) -> None:
    regression = _cases("c", "p")
    regression[:6] = [C(f"c-{i:02d}", "f", ["general"], "must_pass") for i in range(6)]
    with open_store(db, write=True) as store:
        store.promote_baseline("demo", "b1", "ana", "v1 ships")
    write_store(db, [make_run("b9", regression, label="baseline")])
    with open_store(db, write=True) as store:
        assert resolve_pair(store, None, "c1") == ("b1", "c1")
        with pytest.raises(StoreError, match="names 2 runs"):
            resolve_pair(store, "baseline", "c1")  # the label alone no longer picks one


def test_gating_a_run_against_itself_is_refused(db: Path, capsys) -> None:
    with open_store(db, write=True) as store, pytest.raises(ConfigError, match="with itself"):
        resolve_pair(store, "baseline", "b1")
    assert main(["gate", "--db", str(db), "b1", "b1"]) == 2
    assert "with itself" in capsys.readouterr().err


def test_a_killed_candidate_is_refused_with_the_resume_command(tmp_path: Path, capsys) -> None:
    db = tmp_path / "k.duckdb"
    write_store(db, [make_run("b1", _cases("c", "p"), label="baseline")])
    killed = make_run("k1", [], label="candidate")
    cases = make_run("k1", _cases("c", "p"), label="candidate").cases
    write_store(db, [killed.__class__(**{**killed.__dict__, "cases": cases})], status="running")
    with open_store(db, write=True) as store:
        state = completeness(store, "k1")
        assert (state.status, state.stored, state.expected, state.complete) == (
            "running",
            0,
            10,
            False,
        )
        with pytest.raises(IncompleteRunError) as caught:
            require_complete(store, "k1", "candidate", db=str(db))
    assert f"evalkit run --resume k1 --db {db}" in str(caught.value)
    assert caught.value.exit_code == 1
    assert main(["compare", "--db", str(db), "baseline", "candidate"]) == 1
    assert "incomplete (status running, 0 of 10 outputs stored)" in capsys.readouterr().err
    # --allow-incomplete: the missing outputs count as errored, so the gate is unverified
    out = tmp_path / "r.json"
    assert main(["compare", "--db", str(db), "baseline", "candidate", "--allow-incomplete",
                 "--json", str(out)]) == 0  # fmt: skip
    decision = json.loads(out.read_text())["decision"]
    assert decision["status"] == "UNVERIFIED" and decision["exit_code"] == 1


def test_an_all_errored_candidate_gates_unverified_through_the_store(tmp_path: Path) -> None:
    from evalkit.compare.analysis import load_comparison
    from evalkit.compare.gate import gate_comparison
    from evalkit.compare.policy import GatePolicy

    db = tmp_path / "e.duckdb"
    write_store(db, [make_run("b1", _cases("c", "p"), label="baseline"),
                     make_run("c1", _cases("c", "e"), label="candidate")])  # fmt: skip
    with open_store(db, write=True) as store:
        decision = gate_comparison(store, load_comparison(store, "b1", "c1"), GatePolicy())
    assert decision.status == "UNVERIFIED" and decision.exit_code == 1
    (finding,) = decision.blocking()
    assert "10 of 10 candidate outputs errored" in finding.message
    assert "10 × timeout after 4 retries" in finding.message


def test_an_override_is_refused_for_a_pair_that_is_not_blocked(db: Path, capsys) -> None:
    args = ["--db", str(db), "baseline", "candidate", "--who", "ana", "--reason", "why not"]
    assert main(["override", *args]) == 2
    assert "no blocking finding to override" in capsys.readouterr().err


def test_an_override_records_the_findings_it_accepts(tmp_path: Path, capsys) -> None:
    db = tmp_path / "o.duckdb"
    broken = [C("inc-1", "f", ["general"], "must_pass"), *_cases("c", "p")]
    fine = [C("inc-1", "p", ["general"], "must_pass"), *_cases("c", "p")]
    write_store(db, [make_run("b1", fine, label="baseline"),
                     make_run("c1", broken, label="candidate")])  # fmt: skip
    args = ["--db", str(db), "baseline", "candidate"]
    assert main(["override", *args, "--who", "ana", "--reason", "replayed by hand"]) == 0
    assert "accepts tier1/must_pass/failed/inc-1" in capsys.readouterr().out
    with open_store(db, write=True) as store:
        assert store.overrides("b1", "c1")["findings"].to_list() == [
            ["tier1/must_pass/failed/inc-1"]
        ]
    out = tmp_path / "r.json"
    assert main(["compare", *args, "--json", str(out)]) == 0
    assert json.loads(out.read_text())["decision"]["status"] == "PASSED WITH OVERRIDE"


def test_warnings_reach_the_decision_and_errored_cases_are_not_label_error_candidates(
    tmp_path: Path,
) -> None:
    from evalkit.compare.analysis import load_comparison
    from evalkit.compare.gate import gate_comparison
    from evalkit.compare.policy import GatePolicy
    from evalkit.report.build import build_report

    db = tmp_path / "w.duckdb"
    warned = MANIFEST | {"warnings": ["model alias 'gpt-x' is not pinned to a snapshot"]}
    cases = [*_cases("c", "p"), C("gone", "e", ["general"]), C("bad", "f", ["general"])]
    base_cases = [*_cases("c", "p"), C("gone", "f", ["general"]), C("bad", "f", ["general"])]
    write_store(db, [make_run("b1", base_cases, label="baseline"),
                     make_run("c1", cases, manifest=warned, label="candidate")])  # fmt: skip
    with open_store(db, write=True) as store:
        comparison = load_comparison(store, "b1", "c1")
        decision = gate_comparison(
            store, comparison, GatePolicy.from_suite([], {"max_error_rate": 0.5})
        )
    messages = [f.message for f in decision.findings if f.slice == "warnings"]
    assert messages == ["candidate run: model alias 'gpt-x' is not pinned to a snapshot"]
    report = build_report(comparison, decision)
    assert report.failing_both == ("bad",)  # "gone" errored: it is not a label-error candidate
    from evalkit.report.html import to_html

    page = to_html(report, charts=False)
    assert "model alias &#x27;gpt-x&#x27; is not pinned to a snapshot" in page

"""Adaptive reuse in `evalkit history` counts gate decisions (the gate log), not runs: two
decisions against one baseline count 2, runs nobody gated count 0, a gate that failed counts
nothing, and a decision whose log cannot be written still stands."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from synthetic_runs import MANIFEST, C, make_run, write_store

import evalkit
from evalkit.cli import main
from evalkit.compare import decision_log
from evalkit.errors import StoreError
from evalkit.store import open_store
from evalkit.trends.analysis import history

CORPUS = {"hash": "c0ffee" * 4, "n_cases": 12}


def _cases(fails: int, sealed: bool = False) -> list[C]:
    return [C(f"case-{i}", "f" if i < fails else "p", ["billing"], sealed=sealed and i == 11)
            for i in range(12)]  # fmt: skip


@pytest.fixture()
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A promoted baseline, two candidates (one ran the sealed slice) and a third run; no
    suite config, so the default policy decides."""
    monkeypatch.chdir(tmp_path)
    manifest = MANIFEST | {"corpus": CORPUS}
    sealed = manifest | {"selection": {"sealed": True}}
    runs = [
        make_run("base", _cases(0), manifest=manifest, label="base"),
        make_run("cand-1", _cases(2), manifest=manifest, label="cand"),
        make_run("cand-2", _cases(0, sealed=True), manifest=sealed, label="cand"),
        make_run("other", _cases(1), manifest=manifest, label="other"),
    ]
    path = tmp_path / "e.duckdb"
    write_store(path, runs)
    with open_store(path, write=True) as store:
        store.promote_baseline("demo", "base", "ana", "looked right")
    return path


def _reuse(db: Path) -> dict[str, tuple[int, int, int]]:
    with open_store(db) as store:
        return {r.base_run_id: (r.gates, r.stopped, r.sealed_gates)
                for r in history(store, by="label").reuse}  # fmt: skip


def test_runs_nobody_gated_count_zero(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _reuse(db) == {"base": (0, 0, 0)}  # four runs, one promoted, no decision
    assert main(["history", "--db", str(db), "--by", "label"]) == 0
    out = capsys.readouterr().out
    assert "  base (no pinned exam, corpus c0ffeec0ffee, 12 cases): 0 gate decisions" in out


def test_two_decisions_against_one_baseline_count_two(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["compare", "base", "cand-1", "--db", str(db)]) == 0  # decides: logged
    project = evalkit.Project(db.parent, db=db)
    decision = project.gate("base", "cand-2")
    assert decision.status == "PASSED"
    capsys.readouterr()

    assert _reuse(db) == {"base": (2, 0, 1)}
    with open_store(db) as store:
        log = store.gate_log()
    assert log.select("command", "base_run_id", "cand_run_id", "status", "sealed").rows() == [
        ("compare", "base", "cand-1", "PASSED", False),
        ("project.gate", "base", "cand-2", "PASSED", True),
    ]  # fmt: skip
    assert log["n_paired"].to_list() == [12, 11]  # cand-2's sealed case is not paired live
    assert set(log["corpus_hash"]) == {CORPUS["hash"]}

    assert main(["history", "--db", str(db), "--by", "label"]) == 0
    out = capsys.readouterr().out
    assert "adaptive reuse — gate decisions taken against each baseline's exam" in out
    line = next(x for x in out.splitlines() if x.startswith("  base ("))
    assert ": 2 gate decisions (0 stopped), 1 with the sealed slice, last " in line
    assert main(["history", "--db", str(db), "--by", "label", "--format", "json"]) == 0
    (reuse,) = json.loads(capsys.readouterr().out)["reuse"]
    assert (reuse["base_run_id"], reuse["gates"], reuse["sealed_gates"]) == ("base", 2, 1)


def test_a_failed_gate_logs_nothing_and_keeps_what_was_logged(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["compare", "base", "cand-1", "--db", str(db)]) == 0
    # a run compared with itself: a usage error (exit 2) and no decision
    assert main(["compare", "base", "base", "--db", str(db)]) == 2
    assert "itself" in capsys.readouterr().err
    assert _reuse(db) == {"base": (1, 0, 0)}


def test_a_decision_whose_log_cannot_be_written_stands_with_a_note(
    db: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def refused(*args: object, **kwargs: object) -> None:
        raise StoreError(f"{db}: cannot write the store: Read-only file system")

    monkeypatch.setattr(decision_log, "gate_record", refused)
    assert main(["compare", "base", "cand-1", "--db", str(db)]) == 0
    err = capsys.readouterr().err
    assert "note: the gate decision was not logged for `evalkit history`" in err
    assert "Read-only file system" in err and "Traceback" not in err
    assert _reuse(db) == {"base": (0, 0, 0)}

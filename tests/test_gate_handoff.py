"""``evalkit gate`` decides once: the CLI's decision is handed to the gate notebook
(`evalkit.compare.handoff`), which reports it without deciding again; alone, the notebook
decides itself, and both ways the decision is the same."""

from __future__ import annotations

import json
import os
import pickle

import polars as pl
import pytest
from synthetic_runs import seed000_runs, write_store

import evalkit
from evalkit.cli import main
from evalkit.compare import handoff, pin
from evalkit.compare.handoff import load_decided_pair, write_decided_pair
from evalkit.errors import ComparabilityError, ConfigError, CorpusError
from evalkit.notebooks import execute_notebook

CONFIG = """\
suite: demo
system: {provider: demo, model: demo-model}
critical_tags: [billing]
"""


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("handoff")
    write_store(root / "evalkit.duckdb", list(seed000_runs(cand_label="cand")))
    (root / "evalkit.yaml").write_text(CONFIG)
    return root


def _as_json(decision: evalkit.GateDecision) -> dict:
    """A decision as the notebook writes ``decision.json``."""
    return json.loads(json.dumps(decision.to_dict(), indent=2, default=str))


def test_evalkit_gate_decides_once_and_the_notebook_reports_that_decision(
    store, tmp_path, monkeypatch
):
    taken = []
    real = pin.gate_pair

    def counted(*args, **kwargs):
        comparison, decision = real(*args, **kwargs)
        taken.append(decision)
        return comparison, decision

    monkeypatch.setattr(pin, "gate_pair", counted)  # the CLI's calls, in this process
    counter = tmp_path / "decisions.txt"
    monkeypatch.setenv(pin.COUNT_DECISIONS_ENV, str(counter))  # every process's, the kernel's too
    db, config = str(store / "evalkit.duckdb"), str(store / "evalkit.yaml")
    code = main(["gate", "base", "cand", "--db", db, "--config", config, "--out", str(tmp_path)])

    assert code == 1  # seed000's candidate breaks a must_pass case
    assert len(taken) == 1
    assert counter.read_text().split() == [str(os.getpid())]  # none in the kernel
    written = json.loads((tmp_path / "cand-run" / "decision.json").read_text())
    assert written == _as_json(taken[0]) and written["status"] == "BLOCKED"
    executed = (tmp_path / "cand-run" / "gate.ipynb").read_text()
    assert "load_decided_pair" in executed and "decided.pickle" in executed
    assert not any(p.name.startswith("evalkit-gate-") for p in (tmp_path / "cand-run").iterdir())
    with evalkit.open_store(db) as opened:  # the one decision is logged once, for history
        logged = opened.gate_log().filter(pl.col("command") == "gate")
    assert logged.select("base_run_id", "cand_run_id", "status").rows() == [
        ("base-run", "cand-run", "BLOCKED")
    ]


def test_the_notebook_alone_decides_itself_and_decides_the_same(store, tmp_path, monkeypatch):
    counter = tmp_path / "decisions.txt"
    monkeypatch.setenv(pin.COUNT_DECISIONS_ENV, str(counter))
    out = tmp_path / "alone"
    params = {"DB_PATH": str(store / "evalkit.duckdb"), "BASELINE": "base", "CANDIDATE": "cand",
              "CONFIG": str(store / "evalkit.yaml"), "OUTPUT_DIR": str(out)}  # fmt: skip
    _, ename, _ = execute_notebook("gate.ipynb", out / "gate.ipynb", params)

    assert ename == "GateBlocked"
    kernel_pid = counter.read_text().split()
    assert len(kernel_pid) == 1 and kernel_pid != [str(os.getpid())]  # the kernel decided
    with evalkit.open_store(store / "evalkit.duckdb") as opened:
        _, decision = pin.gate_pair(opened, "base", "cand", str(store / "evalkit.yaml"))
    assert json.loads((out / "decision.json").read_text()) == _as_json(decision)


def test_a_decided_pair_round_trips_with_its_frames(store, tmp_path):
    with evalkit.open_store(store / "evalkit.duckdb") as opened:
        comparison, decision = pin.gate_pair(opened, "base", "cand", str(store / "evalkit.yaml"))
    path = write_decided_pair(tmp_path / "decided.pickle", comparison, decision)
    got_comparison, got_decision = load_decided_pair(path, wait_s=0)
    assert _as_json(got_decision) == _as_json(decision)
    assert got_comparison.paired.equals(comparison.paired)
    assert not path.with_name("decided.pickle.part").exists()


@pytest.mark.parametrize(
    "error",
    [
        ConfigError("no promoted baseline"),
        ComparabilityError("refusing to compare: model"),
        CorpusError("duplicate id", path="cases/a.yaml", line=3, case_id="x-1"),
    ],
)
def test_a_failed_decision_is_raised_in_the_notebook_as_its_class_and_line(tmp_path, error):
    path = write_decided_pair(tmp_path / "decided.pickle", error=error)
    with pytest.raises(type(error)) as raised:
        load_decided_pair(path, wait_s=0)
    assert str(raised.value) == str(error)


def test_a_file_not_written_by_evalkit_gate_or_never_written_is_a_config_error(tmp_path):
    foreign = tmp_path / "foreign.pickle"
    foreign.write_bytes(pickle.dumps({"comparison": None}))
    with pytest.raises(ConfigError, match="not a decided pair"):
        load_decided_pair(foreign, wait_s=0)
    with pytest.raises(ConfigError, match="no decided pair arrived"):
        load_decided_pair(tmp_path / "missing.pickle", wait_s=0.05)


def test_an_executed_notebook_run_again_is_told_to_decide_itself(tmp_path, monkeypatch):
    """The gate removed its folder: no waiting for a file that will never come."""

    def no_waiting(seconds: float) -> None:
        raise AssertionError("waited for a decided pair whose gate has ended")

    monkeypatch.setattr(handoff.time, "sleep", no_waiting)
    with pytest.raises(ConfigError, match='set DECIDED = "" to decide here'):
        load_decided_pair(tmp_path / "evalkit-gate-gone" / "decided.pickle", wait_s=600)

"""``evalkit gate`` decides once: the CLI's decision is handed to the gate notebook
(`evalkit.compare.handoff`), which reports it without deciding again; alone, the notebook
decides itself, and both ways the decision is the same."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

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
    assert "load_decided_report" in executed and "decided.pickle" in executed
    # run by the CLI, nobody clicks its chart: the static SVG alone, no Vega-Lite spec built
    assert "image/svg+xml" in executed and "application/vnd.vegalite" not in executed
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
    assert "application/vnd.vegalite" in (out / "gate.ipynb").read_text()  # opened: interactive
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


def test_the_handed_over_report_is_the_one_the_notebook_would_build(store, tmp_path):
    """`evalkit gate` hands over the report it built: the notebook shows the same report it
    would have built from the pair (and builds it itself from a file without one)."""
    with evalkit.open_store(store / "evalkit.duckdb") as opened:
        comparison, decision = pin.gate_pair(opened, "base", "cand", str(store / "evalkit.yaml"))
    built = evalkit.build_report(comparison, decision)
    with_report = write_decided_pair(tmp_path / "a.pickle", comparison, decision, report=built)
    without = write_decided_pair(tmp_path / "b.pickle", comparison, decision)
    for path in (with_report, without):
        got = evalkit.load_decided_report(path, wait_s=0)
        assert evalkit.report_json(got) == evalkit.report_json(built)
        assert _as_json(got.decision) == _as_json(decision)


#: What the kernel of `evalkit gate` needs for none of its cells, given the report.
KERNEL_NEVER = {"scipy", "duckdb", "numpy", "yaml", "altair", "vl_convert", "papermill"}
PROBE = """
import json, sys
import evalkit
report = evalkit.load_decided_report(sys.argv[1], wait_s=0)
for sections in (["decision"], ["broken", "fixed"], ["slices"], ["suite", "budgets", "manifest"],
                 ["aggregate"]):
    fragment = evalkit.report_fragment(report, sections, interactive=False)
    for part in fragment.parts:
        part if isinstance(part, str) else part._repr_mimebundle_()
evalkit.save_slice_charts(report, sys.argv[2])
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules})))
"""


def test_the_gate_kernel_reports_without_statistics_store_or_chart_engine(store, tmp_path):
    """The notebook's cells, on a handed-over report, in a fresh interpreter: no scipy, DuckDB,
    numpy, YAML, Altair or vl-convert is imported (the CLI already paid for them)."""
    with evalkit.open_store(store / "evalkit.duckdb") as opened:
        comparison, decision = pin.gate_pair(opened, "base", "cand", str(store / "evalkit.yaml"))
    report = evalkit.build_report(comparison, decision)
    path = write_decided_pair(tmp_path / "d.pickle", comparison, decision, report=report)
    done = subprocess.run([sys.executable, "-c", PROBE, str(path), str(tmp_path / "charts")],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout.splitlines()[-1]))
    assert "polars" in loaded and "great_tables" in loaded  # the probe saw the imports
    assert loaded & KERNEL_NEVER == set()
    assert (tmp_path / "charts" / "slice_forest.svg").is_file()


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

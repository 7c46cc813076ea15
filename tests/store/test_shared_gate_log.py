"""Gate decisions travel with the runs they looked at: a pull-request job's store is thrown
away after its gate, so its decisions against the team's baseline reach `evalkit history`'s
reuse count only through the team store. A push publishes the decisions naming the run (as
base or candidate); a pull of a baseline brings those taken against it, once each."""

from __future__ import annotations

from pathlib import Path

from synthetic_runs import seed000_runs, write_store
from test_shared_store import _uri

from evalkit.store import open_store
from evalkit.store.gate_log import GateRecord
from evalkit.store.shared import open_shared_store
from evalkit.trends.reuse import gate_reuse


def _decision(status: str, **changes: object) -> GateRecord:
    fields = {"command": "gate", "base_run_id": "base-run", "cand_run_id": "cand-run",
              "status": status, "n_paired": 600} | changes  # fmt: skip
    return GateRecord(**fields)  # type: ignore[arg-type]


def test_a_pull_request_jobs_gate_decisions_reach_the_baselines_next_pull(
    tmp_path: Path,
) -> None:
    base, cand = seed000_runs()
    uri = _uri(tmp_path)
    shared = open_shared_store(uri)
    write_store(tmp_path / "main.duckdb", [base])
    with open_store(tmp_path / "main.duckdb", read_only=True) as main:
        shared.push_run(main, "base-run")
    # the pull-request job: a fresh store, the baseline pulled, two gates, the candidate pushed
    write_store(tmp_path / "pr.duckdb", [cand])
    with open_store(tmp_path / "pr.duckdb", write=True) as pr:
        shared.pull(pr, "base-run")
        pr.log_gate(_decision("BLOCKED"))
        pr.log_gate(_decision("PASSED"))
        pr.log_gate(_decision("PASSED", base_run_id="other-run"))  # another pair, not pushed
        pushed = shared.push_run(pr, "cand-run")
        again = shared.push_run(pr, "cand-run")
    assert pushed.added["gates"] == 3  # every decision naming the candidate
    assert again.added["gates"] == 0
    # main's store had never logged a decision: the pull brings those against its baseline
    with open_store(tmp_path / "main.duckdb", write=True) as main:
        assert not main.has_table("gates")
        first = shared.pull(main, "base-run")
        second = shared.pull(main, "base-run")
        log = main.gate_log()
        (reuse,) = [r for r in gate_reuse(main) if r.base_run_id == "base-run"]
    assert first.added["gates"] == 2 and second.added.get("gates", 0) == 0
    assert sorted(log["status"].to_list()) == ["BLOCKED", "PASSED"]
    assert set(log["base_run_id"]) == {"base-run"}
    assert (reuse.gates, reuse.stopped) == (2, 1)


def test_a_push_publishes_the_decisions_taken_with_the_run_as_baseline(tmp_path: Path) -> None:
    """A team gating on one machine and pushing its baseline later: the looks taken there
    count on every machine that pulls it."""
    base, _ = seed000_runs()
    write_store(tmp_path / "a.duckdb", [base])
    shared = open_shared_store(_uri(tmp_path))
    with open_store(tmp_path / "a.duckdb", write=True) as store:
        store.log_gate(_decision("UNVERIFIED", sealed=True))
        shared.push_run(store, "base-run")
    with open_store(tmp_path / "b.duckdb", write=True) as other:
        shared.pull(other, "base-run")
        row = other.gate_log().select("status", "sealed", "n_paired").row(0)
    assert row == ("UNVERIFIED", True, 600)

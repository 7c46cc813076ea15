"""`evalkit push` from a pull-request job publishes runs, never promotions, flake lists or
overrides; the next job pulls main's promotion (the newest trusted one)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from synthetic_runs import C, make_run, write_store

from evalkit.errors import StoreError
from evalkit.store import open_store
from evalkit.store.shared import open_shared_store

pytest.importorskip("pyiceberg")

PR_JOB = {"GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": "pull_request", "GITHUB_RUN_ID": "501",
          "GITHUB_JOB": "gate", "GITHUB_REF": "refs/pull/7/merge", "GITHUB_HEAD_REF": "fix",
          "GITHUB_BASE_REF": "main"}  # fmt: skip
MAIN_JOB = {"GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": "schedule", "GITHUB_RUN_ID": "400",
            "GITHUB_JOB": "nightly", "GITHUB_REF": "refs/heads/main"}  # fmt: skip


def _env(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    for name in {*PR_JOB, *MAIN_JOB}:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)


def _run(run_id: str, label: str):
    return make_run(run_id, [C(f"c{i}", "p", ["t"]) for i in range(4)], label=label)


def test_a_pull_request_job_publishes_its_run_but_no_decision_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = f"sqlite:///{tmp_path / 'catalog.db'}?warehouse={tmp_path / 'warehouse'}"
    shared = open_shared_store(uri)
    _env(monkeypatch, MAIN_JOB)  # main's nightly: its promotion is published
    write_store(tmp_path / "main.duckdb", [_run("main-run", "nightly")])
    with open_store(tmp_path / "main.duckdb", write=True) as store:
        store.promote_baseline("demo", "main-run", "ana", "night 41")
        pushed = shared.push_run(store, "nightly")
    assert pushed.added["baselines"] == 1

    _env(monkeypatch, PR_JOB)  # the pull request's job: a run, its own promotion and flakes
    write_store(tmp_path / "pr.duckdb", [_run("pr-run", "candidate")])
    with open_store(tmp_path / "pr.duckdb", write=True) as store:
        store.promote_baseline("demo", "pr-run", "pr-author", "trust me")
        store.save_override("main-run", "pr-run", "pr-author", "flaky", ["1:must_pass"])
        store.save_flakes("cfg", pl.DataFrame({"case_id": ["c0"], "tags": [["t"]], "runs": [5],
                                               "flips": [2], "flake_rate": [0.4]}))  # fmt: skip
        pushed = shared.push_run(store, "candidate")
    assert pushed.added["runs"] == 1 and pushed.added["outputs"] == 4  # the run is published
    assert pushed.added["baselines"] == pushed.added["overrides"] == pushed.added["flakes"] == 0
    with pytest.raises(StoreError, match="pull-request job publishes runs, never promotions"):
        shared.promote("demo", "pr-run", "pr-author", "trust me")

    _env(monkeypatch, PR_JOB | {"GITHUB_RUN_ID": "502", "GITHUB_REF": "refs/pull/8/merge",
                                "GITHUB_HEAD_REF": "other"})  # fmt: skip
    with open_store(tmp_path / "next.duckdb", write=True) as store:  # the next job pulls main's
        pulled = shared.pull(store, "demo")
    assert pulled.run_id == "main-run" and pulled.baseline_of == "demo"
    assert shared.baselines("demo")["run_id"].to_list() == ["main-run"]

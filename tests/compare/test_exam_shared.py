"""The pinned exam travels with the team's shared store (issue 42, rule 1 across jobs): main's
trusted promotion publishes its exam with `evalkit push`, `evalkit pull` brings it into a pull
request job's fresh store, and there a regressed must_pass case moved to ``sealed/`` is missing
evidence, never a PASS. A pull-request job's push publishes no exam; an exam whose files were
changed in the shared tables after its push is refused."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from exam_support import Project, gate_flow, move_cases, run_candidate, write_project

from evalkit.cli import main
from evalkit.errors import StoreError
from evalkit.scorers.registry import SCORERS
from evalkit.store import open_store
from evalkit.store.shared import open_shared_store
from evalkit.store.shared.tables import TABLES, load_table, open_catalog

pytest.importorskip("pyiceberg")

PR_JOB = {"GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": "pull_request", "GITHUB_RUN_ID": "501",
          "GITHUB_JOB": "gate", "GITHUB_REF": "refs/pull/7/merge", "GITHUB_HEAD_REF": "fix",
          "GITHUB_BASE_REF": "main"}  # fmt: skip
MAIN_JOB = {"GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": "push", "GITHUB_RUN_ID": "400",
            "GITHUB_JOB": "baseline", "GITHUB_REF": "refs/heads/main"}  # fmt: skip


def _env(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    for name in {*PR_JOB, *MAIN_JOB, "EVALKIT_CI_EVENT", "EVALKIT_CI_JOB"}:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def main_promoted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """main's job: the suite run, promoted through the CLI (pinning its exam) and pushed."""
    before = dict(SCORERS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("EK_EXAM_OUTAGE", raising=False)
    _env(monkeypatch, MAIN_JOB)
    project = write_project(tmp_path / "main", "contains")
    run_candidate(project, "base", "v1")
    promote = ["baseline", "promote", "base", "--db", project.db, "--who", "ana", "--reason", "v"]
    assert main(promote) == 0
    uri = f"sqlite:///{tmp_path / 'catalog.db'}?warehouse={tmp_path / 'warehouse'}"
    shared = open_shared_store(uri)
    with open_store(project.db, write=True) as store:
        pushed = shared.push_run(store, "base")
    yield project, shared, pushed
    SCORERS.clear()
    SCORERS.update(before)


def _pr_checkout(project: Project, where: Path) -> Project:
    """The pull request's checkout of the same suite, with a fresh store of its own."""
    shutil.copytree(project.root, where, ignore=shutil.ignore_patterns("*.duckdb*"))
    return Project(where, str(where / "pr.duckdb"), project.package)


@pytest.mark.timeout(300)
def test_a_pulled_promotion_brings_its_exam_and_a_hidden_must_pass_is_not_passed(
    tmp_path: Path, main_promoted, monkeypatch: pytest.MonkeyPatch
) -> None:
    project, shared, pushed = main_promoted
    assert pushed.added["exams"] == 1 and pushed.added["exam_files"] >= 3
    _env(monkeypatch, PR_JOB)
    pr = _pr_checkout(project, tmp_path / "pr")
    with open_store(pr.db, write=True) as store:
        pulled = shared.pull(store, "exam-contains")
    assert pulled.baseline_of == "exam-contains" and pulled.added["exams"] == 1
    with open_store(project.db) as mine, open_store(pr.db) as theirs:
        assert theirs.exam(pulled.run_id).file_hashes() == mine.exam(pulled.run_id).file_hashes()
    # The pull request hides its regressed must_pass case in sealed/ and runs with --sealed.
    move_cases(pr.root, {"mp-0"}, "sealed")
    run_candidate(pr, "cand", "v2mp", sealed=True)
    _, decision = gate_flow(pr, "cand")
    assert decision.status in ("BLOCKED", "UNVERIFIED"), decision.summary()
    assert decision.exam_line and "by ana" in decision.exam_line


@pytest.mark.timeout(300)
def test_a_pull_request_job_pushes_no_exam(
    tmp_path: Path, main_promoted, monkeypatch: pytest.MonkeyPatch
) -> None:
    project, shared, _ = main_promoted
    _env(monkeypatch, PR_JOB)
    pr = _pr_checkout(project, tmp_path / "pr")
    run_candidate(pr, "cand", "v1b")
    promote = ["baseline", "promote", "cand", "--db", pr.db, "--who", "mallory", "--reason", "x"]
    assert main(promote) == 0  # a local promotion (and exam) the job's own gate ignores
    with open_store(pr.db, write=True) as store:
        pushed = shared.push_run(store, "cand")
    assert pushed.added["runs"] == 1
    assert pushed.added["baselines"] == pushed.added["exams"] == pushed.added["exam_files"] == 0


@pytest.mark.timeout(300)
def test_an_exam_file_changed_after_its_push_is_refused(
    tmp_path: Path, main_promoted, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, shared, _ = main_promoted
    files = load_table(open_catalog(shared.uri), TABLES["exam_files"], create=False)
    rows = files.scan().to_arrow()
    loosened = [
        {**row, "path": "cases/extra.yaml", "sha256": "0" * 64, "content": b"- id: x\n"}
        for row in rows.slice(0, 1).to_pylist()
    ]  # one more file appended to the pinned exam by someone who can write the tables
    files.append(pa.Table.from_pylist(loosened, rows.schema))
    with open_store(tmp_path / "fresh.duckdb", write=True) as store:
        with pytest.raises(StoreError, match="exam_files") as raised:
            shared.pull(store, "exam-contains")
        assert store.query("SELECT count(*) AS n FROM runs")["n"][0] == 0  # nothing written
    assert "refusing to pull" in str(raised.value)

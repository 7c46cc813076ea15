"""What a run's manifest records of the machine (the git commit and dirtiness of the suite's
folder, the client library versions): ``evalkit run`` reads it in a thread while the store
opens, and records the same as a run started from Python, which reads it when the manifest is
built. Which thread ran ``git`` is watched, not timed."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import evalkit
from evalkit.corpus.cases import load_corpus
from evalkit.corpus.suite import load_suite
from evalkit.store import open_store
from tests.projects import Project

_real_run = subprocess.run


def _git(root: Path, *args: str) -> str:
    done = _real_run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=root, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout.strip()


def _commit_all(root: Path) -> None:
    """``root`` made a git repository with everything in it committed (a clean work tree)."""
    for args in (("init", "-q"), ("add", "-A"), ("commit", "-q", "-m", "cases")):
        _git(root, *args)


@pytest.fixture()
def git_threads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The name of the thread of every ``git`` command run from here on."""
    names: list[str] = []

    def watched(command: Any, *args: Any, **kwargs: Any) -> Any:
        if command[0] == "git":
            names.append(threading.current_thread().name)
        return _real_run(command, *args, **kwargs)

    monkeypatch.setattr(subprocess, "run", watched)
    return names


def _latest_run(project: Project) -> evalkit.RunManifest:
    with open_store(project.db) as store:
        run_id = store.runs().sort("created_at")["run_id"][-1]
        return store.manifest(run_id)


def test_the_command_line_reads_the_git_state_while_the_store_opens(
    project_factory: Callable[..., Project], git_threads: list[str]
) -> None:
    project = project_factory(server=True)
    _commit_all(project.root)
    head = _git(project.root, "rev-parse", "HEAD")

    assert project.cli("run", *project.args, "--no-progress") == 0
    clean = _latest_run(project)
    assert (clean.run.git_sha, clean.run.git_dirty) == (head, False)
    assert clean.client["duckdb"] and clean.client["python"]
    assert git_threads == ["evalkit-host-facts"] * 2  # rev-parse and status, not the main thread

    with project.config.open("a", encoding="utf-8") as config:
        config.write("# edited, not committed\n")
    assert project.cli("run", *project.args, "--no-progress") == 0
    assert _latest_run(project).run.git_dirty is True


def test_a_run_from_python_reads_the_same_git_state_itself(
    project_factory: Callable[..., Project], git_threads: list[str]
) -> None:
    project = project_factory(server=True)
    _commit_all(project.root)
    suite = load_suite(project.config, overrides=[f"system.base_url={project.base_url}"])
    corpus = load_corpus(suite.root)
    with open_store(project.db, write=True) as store:
        evalkit.run_suite(suite, corpus, store, evalkit.RunOptions(progress=False))
    manifest = _latest_run(project)
    assert manifest.run.git_sha == _git(project.root, "rev-parse", "HEAD")
    assert manifest.run.git_dirty is False
    assert git_threads == [threading.main_thread().name] * 2

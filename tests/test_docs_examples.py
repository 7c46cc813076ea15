"""The docs' examples run as written, so they cannot rot.

Each page's shell blocks marked ``<!-- docs-test: SESSION -->`` run in order in one bash
session, in a scratch folder that is a git checkout of a copy of ``corpus/`` (with the trace
fixture the corpus guide samples), with this venv's ``evalkit`` first on PATH, against a demo
simulator the session starts itself on a free port. Then every page's Python blocks run, each
page as one script, in the tour's folder (whose store holds the tour's baseline and candidate).
The GitHub Actions examples are ``tests/test_docs_ci.py`` and ``tests/test_nightly_workflow.py``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from docs_support import (
    REPO,
    blocks,
    marked,
    page,
    pages,
    python_script,
    run_bash,
    sessions,
    user_env,
)
from projects import make_project

#: Every marked session of the docs, and the test below that runs it (a new one needs a test).
SESSIONS = {
    ("getting-started/tour.md", "tour"),
    ("getting-started/your-project.md", "project"),
    ("guides/corpus.md", "corpus"),
    ("guides/team-store.md", "team"),
}


def _checkout(tmp: Path) -> Path:
    """A user's checkout: the demo corpus and the trace fixture, committed (the corpus guide
    reviews its own edits with git diff)."""
    make_project(tmp / "corpus", demo=True)
    shutil.copytree(REPO / "tests" / "fixtures" / "traces", tmp / "tests" / "fixtures" / "traces")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], cwd=tmp, check=True)
    subprocess.run([*git, "add", "-A"], cwd=tmp, check=True)
    subprocess.run([*git, "commit", "-qm", "corpus"], cwd=tmp, check=True)
    return tmp


def _session(name: str, session: str, tmp: Path) -> str:
    """Run ``session`` of page ``name`` in a fresh checkout under ``tmp``; its output."""
    script = marked(page(name), session)
    assert script, f"{name}: no blocks marked docs-test: {session}"
    result = run_bash("\n".join(script), _checkout(tmp), user_env(tmp))
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-5000:]
    assert "Traceback" not in out, out[-5000:]
    return out


@pytest.fixture(scope="module")
def tour(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The tour, run once for this module: its folder and its output."""
    tmp = tmp_path_factory.mktemp("tour")
    return tmp, _session("getting-started/tour.md", "tour", tmp)


def test_every_marked_session_has_its_test() -> None:
    assert sessions() == SESSIONS


def test_the_tour_activates_the_venv_make_builds() -> None:
    text = page("getting-started/tour.md")
    first = blocks(text, "bash")[0][1]
    assert first.startswith(". .venv/bin/activate\n")
    assert "VENV := .venv" in (REPO / "Makefile").read_text()
    assert len(marked(text, "tour")) == 3


def test_the_tour_runs_as_written(tour: tuple[Path, str]) -> None:
    tmp, out = tour
    assert "evalkit demo simulator" not in out  # the server's own output is not ours
    assert re.search(r"baseline run \S+: \d\d+ cases", out), out[-3000:]
    assert re.search(r"candidate run \S+: \d\d+ cases", out)
    assert out.count("EVALKIT_DEMO_KEY is not set; sending the placeholder key") == 2  # per run
    assert "gate exit 1" in out  # v2 is the False Improvement: it blocks
    assert "my-assistant: 5 cases" in out  # init's four cases plus the tour's
    assert re.search(r"baseline run \S+: 5 cases", out)
    assert "json_fields" in out and "forbidden_regex" in out  # evalkit scorers
    assert (tmp / "my-evals" / "data" / "evalkit.duckdb").is_file()
    assert "duplicate id" not in out


def test_your_own_project_runs_a_python_function(tmp_path: Path) -> None:
    out = _session("getting-started/your-project.md", "project", tmp_path)
    assert re.search(r"stub run \S+: 4 cases", out), out[-3000:]
    assert "stub" in out.split("stub run", 1)[1]  # `evalkit runs list` lists it


def test_growing_the_corpus_runs_as_written(tmp_path: Path) -> None:
    """Import, traces → drafts → review, convert, live fixtures record/check/refresh, sealed
    rotation and transfer, coverage and retire: the whole loop, as the guide writes it."""
    assert len(marked(page("guides/corpus.md"), "corpus")) >= 8
    out = _session("guides/corpus.md", "corpus", tmp_path)
    assert "imported 2 draft cases from tickets.csv" in out
    assert out.count("drafts refused") == 2  # the imported drafts, then the sampled ones
    assert "is a draft (review: draft) and never gates" in out
    assert "stale fixtures: exit 1" in out and "refused: exit 2" in out
    assert re.search(r"gains (do not )?(transfer|not shown to transfer)", out), out[-3000:]
    retired = tmp_path / "corpus" / "retired"
    assert any("id: bug-wishlist-500-003" in f.read_text() for f in retired.glob("*.yaml"))


def test_the_team_store_runs_as_written(tmp_path: Path) -> None:
    """Promote, push (twice), a candidate-only store pulls the baseline and gates: one run."""
    out = _session("guides/team-store.md", "team", tmp_path)
    assert "gate exit 1" in out  # v2 blocks against the pulled baseline, as the local gate does
    assert (tmp_path / "data" / "team" / "catalog.db").is_file()


#: A page whose Python blocks another test runs, in a set-up of its own, says so:
#: ``<!-- docs-python: tests/test_x.py -->``; that test must name the page.
ELSEWHERE = re.compile(r"<!-- docs-python: (tests/[\w/]+\.py) -->")
PYTHON_PAGES = sorted(
    name for name, text in pages().items() if blocks(text, "python") and not ELSEWHERE.search(text)
)


def test_pages_whose_python_runs_elsewhere_name_a_test_that_runs_it() -> None:
    assert ELSEWHERE.findall("<!-- docs-python: tests/test_project_api.py -->") == [
        "tests/test_project_api.py"
    ]
    for name, text in pages().items():
        for test in ELSEWHERE.findall(text):
            source = (REPO / test).read_text()
            assert Path(name).name in source, f"{name}: {test} does not name the page"


def test_the_guides_have_python_examples() -> None:
    assert {"getting-started/tour.md", "guides/scorers.md", "statistics.md"} <= set(PYTHON_PAGES)


@pytest.mark.parametrize("name", PYTHON_PAGES)
def test_the_python_blocks_run(name: str, tour: tuple[Path, str]) -> None:
    """A page's Python blocks, as one script, in a fresh interpreter in the tour's folder."""
    tmp, _ = tour
    script = python_script(page(name))
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp, env=user_env(tmp),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, f"{name}:\n{result.stderr[-4000:]}"
    assert result.stdout.strip(), f"{name}: its examples print nothing to show"

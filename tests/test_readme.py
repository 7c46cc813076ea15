"""The README's tour runs as written, so it cannot rot.

The tour's blocks marked ``<!-- readme-test: run -->`` run in one bash session in a scratch
folder holding a copy of ``corpus/``, with this venv's ``evalkit`` first on PATH, against a demo
simulator the tour itself starts on a free port; "Growing the corpus" (``readme-test: corpus``)
runs the same way in its own session, with the trace fixture it samples, and the team store
(``readme-test: team``) in a third. The GitHub Actions example is ``tests/test_readme_ci.py``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from readme_support import (
    CORPUS_MARK,
    README,
    REPO,
    TEAM_MARK,
    blocks,
    marked,
    run_bash,
    user_env,
)


def test_the_tour_activates_the_venv_make_builds() -> None:
    first = blocks(README[README.index("## A five-minute tour") :], "bash")[0][1]
    assert first.startswith(". .venv/bin/activate\n")
    assert "VENV := .venv" in (REPO / "Makefile").read_text()
    assert len(marked(README)) == 3


def test_the_tour_runs_as_written(tmp_path: Path) -> None:
    shutil.copytree(REPO / "corpus", tmp_path / "corpus")
    result = run_bash("\n".join(marked(README)), tmp_path, user_env(tmp_path))
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    assert "evalkit demo simulator" not in result.stdout  # the server's own output is not ours
    assert re.search(r"baseline run \S+: \d\d+ cases", out), out[-3000:]
    assert re.search(r"candidate run \S+: \d\d+ cases", out)
    assert out.count("EVALKIT_DEMO_KEY is not set; sending the placeholder key") == 2  # per run
    assert "gate exit 1" in out  # v2 is the False Improvement: it blocks
    assert "my-assistant: 5 cases" in out  # init's four cases plus the tour's
    assert re.search(r"baseline run \S+: 5 cases", out)
    assert "json_fields" in out and "forbidden_regex" in out  # evalkit scorers
    assert (tmp_path / "my-evals" / "data" / "evalkit.duckdb").is_file()
    assert "duplicate id" not in out and "Traceback" not in out


def test_growing_the_corpus_runs_as_written(tmp_path: Path) -> None:
    """Import, traces → drafts → review, convert, live fixtures record/check/refresh, sealed
    rotation and transfer, coverage and retire: the whole loop, as the README writes it."""
    shutil.copytree(REPO / "corpus", tmp_path / "corpus")
    shutil.copytree(REPO / "tests" / "fixtures" / "traces", tmp_path / "tests/fixtures/traces")
    blocks = marked(README, CORPUS_MARK)
    assert len(blocks) >= 8
    # a checkout: the loop reviews its own edits with git diff
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([*git, "add", "-A"], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-qm", "corpus"], cwd=tmp_path, check=True)
    result = run_bash("\n".join(blocks), tmp_path, user_env(tmp_path))
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-5000:]
    assert "imported 2 draft cases from tickets.csv" in out
    assert out.count("drafts refused") == 2  # the imported drafts, then the sampled ones
    assert "is a draft (review: draft) and never gates" in out
    assert "stale fixtures: exit 1" in out and "refused: exit 2" in out
    assert re.search(r"gains (do not )?(transfer|not shown to transfer)", out), out[-3000:]
    retired = tmp_path / "corpus" / "retired"
    assert any("id: bug-wishlist-500-003" in f.read_text() for f in retired.glob("*.yaml"))


def test_the_team_store_runs_as_written(tmp_path: Path) -> None:
    """Promote, push (twice), a candidate-only store pulls the baseline and gates: one run."""
    shutil.copytree(REPO / "corpus", tmp_path / "corpus")
    (block,) = marked(README, TEAM_MARK)
    result = run_bash(block, tmp_path, user_env(tmp_path))
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-5000:]
    assert "gate exit 1" in out  # v2 blocks against the pulled baseline, as the local gate does
    assert (tmp_path / "data" / "team" / "catalog.db").is_file()

"""What the README tests share: the README's fenced blocks, and a bash session that runs them
as a user would (``tests/test_readme.py``: the tour, the corpus loop, the team store;
``tests/test_readme_ci.py``: the GitHub Actions example). Two files so that ``make test``'s two
workers can each take half of these minutes-long sessions."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
WORKFLOW = REPO / "examples" / "github-actions" / "evalkit.yml"
MARK = "<!-- readme-test: run -->"
CORPUS_MARK = "<!-- readme-test: corpus -->"
TEAM_MARK = "<!-- readme-test: team -->"


def blocks(text: str, lang: str) -> list[tuple[int, str]]:
    """(start offset, dedented body) of every fenced block in ``lang``, list-indented or not."""
    fence = re.compile(rf"^( *)```{lang}\n(.*?)^\1```$", re.S | re.M)
    return [(m.start(), textwrap.dedent(m[2])) for m in fence.finditer(text)]


def marked(text: str, mark: str = MARK) -> list[str]:
    """The bash blocks of ``text`` right after ``mark``."""
    return [body for start, body in blocks(text, "bash") if text[:start].rstrip().endswith(mark)]


def user_env(tmp: Path) -> dict[str, str]:
    """This environment as a user's shell: this venv first on PATH, ``tmp`` as HOME and
    TMPDIR (a detached demo server's log is gone with the test), no EVALKIT_ or PYTEST_
    variables."""
    ci = ("GITHUB_", "GITLAB_CI", "CI_PIPELINE_SOURCE", "CI_MERGE_REQUEST_", "CI_JOB_ID")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVALKIT_", "PYTEST_", *ci))}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["COLUMNS"] = "120"
    env["HOME"] = str(tmp)  # nothing from the user's home leaks in
    env["TMPDIR"] = str(tmp)
    return env


def free_port() -> int:
    """A 127.0.0.1 port free now: for a script whose fixed port another test may hold."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_bash(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``script`` in one ``bash -euo pipefail`` session; a simulator it started is stopped."""
    # stop the simulator whatever happens (the tour stops it itself on success)
    prologue = "set -euo pipefail\ntrap 'kill ${EVALKIT_DEMO_PID:-} 2>/dev/null || true' EXIT\n"
    return subprocess.run(
        ["bash", "-c", prologue + script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=420,
    )

"""What the docs tests share: the pages and their fenced blocks, and a bash session that runs
them as a user would.

A shell block runs when the line before it is ``<!-- docs-test: SESSION -->``: the blocks of
one page and session run in order in one ``bash -euo pipefail`` session
(``tests/test_docs_examples.py``). Every Python block of a page runs, the page's blocks as one
script. The CI workflows the docs quote are ``examples/github-actions/*.yml`` (a snippet
include), run by ``tests/test_docs_ci.py`` and ``tests/test_nightly_workflow.py``.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
README = REPO / "README.md"
WORKFLOW = REPO / "examples" / "github-actions" / "evalkit.yml"
#: The line before a shell block that runs, naming its session.
MARK = re.compile(r"<!-- docs-test: ([\w-]+) -->")


def pages() -> dict[str, str]:
    """Every Markdown page under docs/, by its path relative to docs/, with its text."""
    return {
        path.relative_to(DOCS).as_posix(): path.read_text(encoding="utf-8")
        for path in sorted(DOCS.rglob("*.md"))
    }


def page(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def blocks(text: str, lang: str) -> list[tuple[int, str]]:
    """(start offset, dedented body) of every fenced block in ``lang``, list-indented or not."""
    fence = re.compile(rf"^( *)```{lang}\n(.*?)^\1```$", re.S | re.M)
    return [(m.start(), textwrap.dedent(m[2])) for m in fence.finditer(text)]


def marked(text: str, session: str) -> list[str]:
    """The bash blocks of ``text`` marked to run in ``session``, in order."""
    found = []
    for start, body in blocks(text, "bash"):
        mark = MARK.fullmatch(text[:start].rstrip().rsplit("\n", 1)[-1].strip())
        if mark and mark[1] == session:
            found.append(body)
    return found


def sessions() -> set[tuple[str, str]]:
    """(page, session) of every marked block in the docs."""
    return {(name, m[1]) for name, text in pages().items() for m in MARK.finditer(text)}


def python_script(text: str) -> str:
    """A page's Python blocks as one script, in order."""
    return "\n\n".join(body for _, body in blocks(text, "python"))


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

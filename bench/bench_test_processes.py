"""How much of the test suite starts a process: the test lines that start one (a subprocess,
a papermill or nbclient kernel, a simulator in a process of its own, Ray), beside the lines
that drive the command line in-process (``main([...])``) and all test lines.

Counts lines of ``tests/**/*.py`` matching :data:`STARTS_A_PROCESS` (a line that names
``sys.executable`` to hand it to a subprocess counts once, whatever else it names). Reads a git
revision's files when given one, so two revisions compare side by side without a checkout::

    python bench/bench_test_processes.py            # the working tree
    python bench/bench_test_processes.py main HEAD  # one column per revision
"""

from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: What starts a process, by kind; a line counts once, under the first kind it matches.
STARTS_A_PROCESS: dict[str, re.Pattern[str]] = {
    "subprocess": re.compile(
        r"\bsubprocess\.(run|Popen|check_output|check_call|call)\b|\bPopen\(|\bsys\.executable\b"
        r"|\bos\.(fork|spawn\w*|exec\w*)\(|\bmultiprocessing\b|ProcessPoolExecutor|\bpexpect\b"
    ),
    "notebook kernel": re.compile(
        r"\bpapermill\b|\bexecute_notebook\(|\bNotebookClient\(|\bexecute_gate\(|\brun_notebook\("
    ),
    "ray": re.compile(r"\bray\.init\(|--engine\", \"ray\"|\"--engine\", \"ray|engine=\"ray\""),
    "cli runner": re.compile(r"\bCliRunner\b"),
}
#: The command line driven in this process: no process started.
IN_PROCESS_CLI = re.compile(r"\bmain\(\[|\bmain\(\*|\.cli\(")


def test_files(revision: str | None) -> dict[str, str]:
    """``{path: text}`` of every ``tests/**/*.py`` in the working tree or at ``revision``."""
    if revision is None:
        return {
            str(p.relative_to(REPO)): p.read_text(encoding="utf-8")
            for p in sorted((REPO / "tests").rglob("*.py"))
        }
    names = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", revision, "tests"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    return {name: _show(revision, name) for name in names if name.endswith(".py")}


def _show(revision: str, name: str) -> str:
    """The text of ``name`` at ``revision``."""
    done = subprocess.run(
        ["git", "show", f"{revision}:{name}"], cwd=REPO, capture_output=True, text=True, check=True
    )
    return done.stdout


def count(files: dict[str, str]) -> dict[str, int]:
    """Lines per kind of process started, in-process CLI lines, and all non-blank test lines
    (comments and docstrings included: they are lines of the suite too)."""
    figures = dict.fromkeys([*STARTS_A_PROCESS, "starts a process", "in-process CLI"], 0)
    figures["test lines"] = 0
    for text in files.values():
        for line in text.splitlines():
            if not line.strip():
                continue
            figures["test lines"] += 1
            kind = next((k for k, p in STARTS_A_PROCESS.items() if p.search(line)), None)
            if kind is not None:
                figures[kind] += 1
                figures["starts a process"] += 1
            elif IN_PROCESS_CLI.search(line):
                figures["in-process CLI"] += 1
    figures["test files"] = len(files)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("revisions", nargs="*", help="git revisions (default: the working tree)")
    args = parser.parse_args()
    columns = {rev: count(test_files(rev)) for rev in args.revisions} or {
        "working tree": count(test_files(None))
    }
    width = max(len(k) for k in next(iter(columns.values())))
    print(f"{'':{width}}  " + "  ".join(f"{name:>14}" for name in columns))
    for key in next(iter(columns.values())):
        print(f"{key:{width}}  " + "  ".join(f"{c[key]:>14,}" for c in columns.values()))


if __name__ == "__main__":
    main()

"""``bench/bench_test_processes.py`` counts what it says: the test lines that start a process,
by kind, beside the in-process CLI lines and every non-blank test line."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location(
    "evalkit_bench_test_processes", REPO / "bench" / "bench_test_processes.py"
)
assert _spec is not None and _spec.loader is not None
bench = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = bench
_spec.loader.exec_module(bench)

#: A test file to count, its process-starting words spelt out only when the test runs (this
#: file's own lines start no process but the git call's).
SAMPLE = (
    "import SUB, sys\n"
    "\n"
    "def test_one(tmp_path):\n"
    '    SUB.run([EXE, "-m", "evalkit.cli", "runs", "list"])\n'
    '    done = SUB.POPEN(["sleep", "1"])\n'
    '    pm.NOTEBOOK("gate.ipynb", "out.ipynb")\n'
    '    assert main(["runs", "list"]) == 0\n'
    '    assert project.cli("cases", "lint") == 0\n'
    "\n"
    '    RAY(address="local")\n'
)
SPELT = {"SUB": "subprocess", "EXE": "sys." + "executable", "POPEN": "Popen",
         "NOTEBOOK": "execute_notebook", "RAY": "ray.init"}  # fmt: skip


def _spelt(text: str) -> str:
    for word, spelling in SPELT.items():
        text = text.replace(word, spelling)
    return text


def test_each_line_counts_once_under_its_first_kind() -> None:
    figures = bench.count({"tests/test_x.py": _spelt(SAMPLE), "tests/test_empty.py": "\n\n"})
    assert figures["subprocess"] == 2  # the run naming the interpreter counts once; Popen
    assert figures["notebook kernel"] == 1 and figures["ray"] == 1
    assert figures["starts a process"] == 4  # the import line starts nothing
    assert figures["in-process CLI"] == 2
    assert figures["test lines"] == 8 and figures["test files"] == 2


def test_a_revision_reads_the_files_git_holds() -> None:
    head = bench.test_files("HEAD")
    tracked = subprocess.run(
        ["git", "ls-files", "tests"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    assert set(head) == {name for name in tracked if name.endswith(".py")}
    assert head["tests/conftest.py"].startswith('"""Shared pytest fixtures.')

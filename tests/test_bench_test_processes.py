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

SAMPLE = """\
import subprocess, sys

def test_one(tmp_path):
    subprocess.run([sys.executable, "-m", "evalkit.cli", "runs", "list"])
    done = subprocess.Popen(["sleep", "1"])
    pm.execute_notebook("gate.ipynb", "out.ipynb")
    assert main(["runs", "list"]) == 0
    assert project.cli("cases", "lint") == 0

    ray.init(address="local")
"""


def test_each_line_counts_once_under_its_first_kind() -> None:
    figures = bench.count({"tests/test_x.py": SAMPLE, "tests/test_empty.py": "\n\n"})
    assert figures["subprocess"] == 2  # `subprocess.run([sys.executable ...` once; Popen
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

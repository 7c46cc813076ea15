"""A notebook's store never locks the project: ``evalkit.open_store`` is read-only and holds the
DuckDB file only during each call, so a kernel that keeps it open while idle lets ``evalkit run``
write and ``compare`` read, and sees the new run on its next call. A writer that does hold the
store is named in the refusal by PID and command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import evalkit
from evalkit.cli import main
from evalkit.errors import StoreError
from evalkit.store import open_store

# A stand-in for a notebook kernel: it opens the store the README's way and answers "runs" with
# the number of runs it sees, until its stdin closes.
KERNEL = """
import sys, evalkit
store = evalkit.open_store(sys.argv[1])
print(store.runs().height, flush=True)
for line in sys.stdin:
    print(store.runs().height, flush=True)
"""

# A process holding the store open for writing, the way the README's old line did.
WRITER = """
import sys, evalkit
store = evalkit.open_store(sys.argv[1], write=True)
print("open", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def project(project_factory, capsys) -> list[str]:
    """An `evalkit init` project (the cwd) with a baseline run stored in its default store;
    the --set for the demo."""
    made = project_factory(server=True, chdir=True)
    assert made.cli("run", "--label", "baseline", "--no-progress", *made.sets) == 0
    capsys.readouterr()
    return made.sets


def _start(script: str, db: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, str(db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def _stop(process: subprocess.Popen[str]) -> None:
    assert process.stdin is not None
    process.stdin.close()
    try:
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_an_idle_notebook_store_lets_run_and_compare_through(project: list[str], capsys) -> None:
    db = Path("data/evalkit.duckdb")
    kernel = _start(KERNEL, db)
    try:
        assert kernel.stdout is not None and kernel.stdin is not None
        assert kernel.stdout.readline().strip() == "1"  # the kernel has read, and is idle
        assert main(["run", "--label", "candidate", "--no-progress", *project]) == 0
        assert main(["compare", "baseline", "candidate"]) == 0
        assert "PASSED" in capsys.readouterr().out
        kernel.stdin.write("runs\n")
        kernel.stdin.flush()
        assert kernel.stdout.readline().strip() == "2"  # and sees the run written since
    finally:
        _stop(kernel)


def test_a_writer_holding_the_store_is_named_by_pid_and_command(project: list[str], capsys):
    db = Path("data/evalkit.duckdb")
    writer = _start(WRITER, db)
    try:
        assert writer.stdout is not None
        assert writer.stdout.readline().strip() == "open"
        assert main(["run", "--label", "candidate", "--no-progress", *project]) == 2
        err = capsys.readouterr().err
        assert f"is being written by another process (PID {writer.pid}: python" in err, err
        assert "-c" in err and "--wait SECONDS" in err
    finally:
        _stop(writer)


def test_a_read_only_store_opens_the_file_once_per_call_and_holds_it_only_then(
    tmp_path: Path,
) -> None:
    db = tmp_path / "s.duckdb"
    open_store(db, write=True).close()
    reader = evalkit.open_store(db)
    assert reader.read_only and reader._conn is None  # idle: the file is not held
    reader.runs()
    assert callable(reader.outputs)  # looking up a method is not a call
    with pytest.raises(StoreError, match="no run with id or label 'nope'"):
        reader.outputs("nope")  # resolve_run inside outputs: one open for the outer call
    assert reader._opened == 2 and reader._conn is None
    # between calls a writer gets the file (DuckDB refuses a writer while a reader holds it)
    with open_store(db, write=True) as writer:
        writer.records("SELECT 1")
    assert reader.runs().height == 0
    assert reader._opened == 3
    with evalkit.open_store(db, write=True) as explicit:
        assert not explicit.read_only and explicit._conn is not None


def test_a_with_block_on_a_read_only_store_opens_the_file_once(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    open_store(db, write=True).close()
    with evalkit.open_store(db) as reader:
        reader.runs()
        reader.runs()
        assert reader._conn is not None  # held for the block
    assert reader._opened == 1 and reader._conn is None

"""Hostile store files (evalkit.store.db, evalkit.store.lock): a DuckDB file of another schema
is refused by name, one line, exit 2, and left byte for byte as it was (its directory too); a
store on a read-only file system is one line naming the path, never an EROFS traceback."""

from __future__ import annotations

import errno
import hashlib
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest

from evalkit.cli import main
from evalkit.errors import StoreError
from evalkit.store import open_store


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _runs_of_other_columns(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("CREATE TABLE runs (a INTEGER, b VARCHAR)")
    con.execute("INSERT INTO runs VALUES (1, 'someone else''s')")


def _other_tables(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("CREATE TABLE orders (id INTEGER, total DOUBLE)")
    con.execute("INSERT INTO orders VALUES (1, 9.5)")


def _tables_in_another_schema(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("CREATE SCHEMA sales")
    con.execute("CREATE TABLE sales.runs (id INTEGER)")


def _evalkit_runs_but_other_outputs(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(
        "CREATE TABLE runs (run_id VARCHAR, label VARCHAR, created_at TIMESTAMPTZ, "
        "finished_at TIMESTAMPTZ, config_hash VARCHAR, status VARCHAR, manifest VARCHAR, "
        "summary VARCHAR)"
    )
    con.execute("CREATE TABLE outputs (run_id VARCHAR, score BIGINT)")


@pytest.mark.parametrize(
    "make_tables",
    [
        _runs_of_other_columns,
        _other_tables,
        _tables_in_another_schema,
        _evalkit_runs_but_other_outputs,
    ],
)
def test_a_duckdb_file_of_another_schema_is_refused_and_left_as_it_was(
    tmp_path: Path,
    make_tables: Callable[[duckdb.DuckDBPyConnection], None],
    capsys: pytest.CaptureFixture[str],
) -> None:
    db = tmp_path / "theirs.duckdb"
    con = duckdb.connect(str(db))
    make_tables(con)
    con.close()
    before, listing = _sha256(db), sorted(p.name for p in tmp_path.iterdir())
    commands = [
        ["runs", "list", "--db", str(db)],  # reads
        ["runs", "merge", "any-run", "--parts", str(tmp_path / "parts"), "--db", str(db)],  # writes
    ]
    for command in commands:
        capsys.readouterr()
        assert main(command) == 2, command
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"{db}: not an evalkit store" in err, err
        assert _sha256(db) == before, command  # byte for byte
        assert sorted(p.name for p in tmp_path.iterdir()) == listing  # no lock file left
    for read_only in (False, True):
        with pytest.raises(StoreError, match="not an evalkit store"):
            open_store(db, read_only=read_only)
    assert _sha256(db) == before


def test_an_evalkit_store_and_an_empty_duckdb_file_still_open(tmp_path: Path) -> None:
    """The check refuses only what is not a store: a new store, a store with a table of the
    user's own beside evalkit's, and a DuckDB file without tables (evalkit's to fill) open."""
    store_path = tmp_path / "e.duckdb"
    open_store(store_path, write=True).close()
    con = duckdb.connect(str(store_path))
    con.execute("CREATE TABLE my_notes (note VARCHAR)")
    con.close()
    with open_store(store_path, write=True) as store:
        assert store.runs().is_empty()
    empty = tmp_path / "empty.duckdb"
    duckdb.connect(str(empty)).close()
    with pytest.raises(StoreError, match="without tables"):
        open_store(empty, read_only=True)
    open_store(empty, write=True).close()
    with open_store(empty, read_only=True) as store:
        assert store.runs().is_empty()


# -- a read-only file system (root ignores chmod: a read-only bind mount in its own namespace) --

_IN_NAMESPACE = """
import contextlib, io, json, os, sys
from evalkit.cli import main

directory, commands = sys.argv[1], json.loads(sys.argv[2])
try:
    os.close(os.open(os.path.join(directory, "probe"), os.O_WRONLY | os.O_CREAT))
    probe = 0
except OSError as exc:
    probe = exc.errno
results = []
for command in commands:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(command)
        except BaseException as exc:  # what the old code did: a traceback
            code = f"{type(exc).__name__}: {exc}"
    results.append([code, err.getvalue()])
print(json.dumps({"probe": probe, "results": results}))
"""


def _in_read_only_mount(directory: Path, commands: list[list[str]]) -> dict:
    """Run ``commands`` through ``evalkit.cli.main`` in a private mount namespace where
    ``directory`` is bind-mounted read-only over itself; the mount dies with the process."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) for a private mount namespace")
    script = (
        'mount --bind "$1" "$1" && mount -o remount,ro,bind "$1" && d="$1" && shift && exec "$@"'
    )
    process = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
         str(directory), sys.executable, "-c", _IN_NAMESPACE, str(directory),
         json.dumps(commands)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if process.returncode != 0 and "mount" in process.stderr and not process.stdout:
        pytest.skip(f"no private read-only mount here: {process.stderr.strip()[:200]}")
    assert process.returncode == 0, process.stderr
    return json.loads(process.stdout.splitlines()[-1])


def test_a_store_on_a_read_only_file_system_is_one_line_naming_the_path(tmp_path: Path) -> None:
    directory = tmp_path / "ro"
    directory.mkdir()
    store = directory / "e.duckdb"
    open_store(store, write=True).close()
    before = _sha256(store)
    parts = str(tmp_path / "parts")
    targets = [store, directory / "new.duckdb", directory / "sub" / "new.duckdb"]
    writes = {path: ["runs", "merge", "r", "--parts", parts, "--db", str(path)] for path in targets}
    outcome = _in_read_only_mount(
        directory, [*writes.values(), ["runs", "list", "--db", str(store)]]
    )
    assert outcome["probe"] == errno.EROFS  # the mount really is read-only, even for root
    *refused, (read_code, read_err) = outcome["results"]
    for path, (code, err) in zip(writes, refused, strict=True):
        assert code == 2, (path, code)
        assert err.count("\n") == 1 and err.startswith(f"evalkit: error: {path}: "), err
        assert "Read-only file system (EROFS)" in err, err
    assert (read_code, read_err) == (0, "")  # reading a store on a read-only mount works
    assert _sha256(store) == before
    (directory / "writable-again").write_text("the mount was the namespace's only")

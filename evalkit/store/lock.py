"""One writer, many readers: the writer's ``flock``, and DuckDB connections that wait for a busy
file and refuse one that is not an evalkit store before anything writes to it."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import sys
import threading
import time
from pathlib import Path
from typing import ClassVar

import duckdb

from evalkit.errors import StoreError
from evalkit.redact import redact_secrets
from evalkit.store.schema import known_tables, writer_schema_current


def connect_duckdb(db_path: Path, read_only: bool, wait_s: float) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection, retrying every 0.1 s for ``wait_s`` while another process has it."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return duckdb.connect(str(db_path), read_only=read_only)
        except (duckdb.IOException, duckdb.ConnectionException) as exc:
            message = str(exc)
            busy = "lock" in message.lower() or "different configuration" in message
            if not busy:
                raise StoreError(
                    f"{db_path}: cannot open the store: {message.splitlines()[0]}"
                ) from None
            if time.monotonic() >= deadline:
                pid = re.search(r"PID (\d+)", message)
                holder = f" ({describe_process(int(pid.group(1)))})" if pid else ""
                raise StoreError(
                    f"{db_path} is being written by another process{holder}; wait for it to "
                    "finish, pass --wait SECONDS, or use another --db"
                    if read_only
                    else f"{db_path} is held open by another process{holder}, probably a "
                    "notebook reading it; close that store (read with `with open_store(...)`)"
                ) from None
            time.sleep(0.1)
        except duckdb.Error as exc:
            raise StoreError(
                f"{db_path}: not a usable DuckDB file: {str(exc).splitlines()[0]}"
            ) from None


def evalkit_store(con: duckdb.DuckDBPyConnection, db_path: Path, *, read_only: bool) -> bool:
    """Check that ``con``'s file is an evalkit store (or, to write, a DuckDB file without
    tables); else it is closed, having written nothing, and a StoreError names the file.

    Returns:
        Whether its schema is current (:func:`~evalkit.store.schema.writer_schema_current`):
        a store opened to write then skips its DDL, a transaction and a commit.
    """
    found: dict[str, dict[str, str]] = {}
    for schema, table, column, data_type in con.execute(
        "SELECT table_schema, table_name, column_name, data_type FROM information_schema.columns "
        "WHERE table_catalog = current_database() ORDER BY table_schema, table_name, "
        "ordinal_position"
    ).fetchall():
        found.setdefault(table if schema == "main" else f"{schema}.{table}", {})[column] = data_type
    problem = _schema_problem(found)
    if problem is None and read_only and not found:
        problem = "a DuckDB file without tables"
        advice = "run `evalkit run` first"
    else:
        advice = "evalkit leaves it as it is: pass another --db"
    if problem is None:
        return writer_schema_current(found)
    con.close()
    raise StoreError(f"{db_path}: not an evalkit store ({problem}); {advice}")


def _schema_problem(found: dict[str, dict[str, str]]) -> str | None:
    """Why tables ``found`` ({table: {column: type}}) are not an evalkit store's (None: they
    are, or there are none yet)."""
    if not found:
        return None
    if "runs" not in found:
        shown = ", ".join(sorted(found)[:5]) + (
            f" and {len(found) - 5} more" if len(found) > 5 else ""
        )
        return f"it has the tables {shown} and no runs table"
    for table, (created, added) in known_tables().items():
        columns = found.get(table)
        if columns is None:
            continue  # a table newer than the store: created when it is opened to write
        allowed = {**created, **added}
        odd = [f"{c} {t}" for c, t in columns.items() if allowed.get(c) != t]
        if odd:
            return f"its {table} table has columns evalkit's has not: {', '.join(odd[:5])}"
        lacking = [c for c in created if c not in columns]
        if lacking:
            return f"its {table} table lacks evalkit's columns {', '.join(lacking[:5])}"
    return None


class WriterLock:
    """An exclusive ``flock`` on ``<db>.lock``: one writing process per store file.

    The kernel drops it when the process dies (even by SIGKILL), so it never goes stale. It is
    shared within one process (DuckDB also lets one process open a file read-write twice).
    Without ``fcntl`` (Windows) only DuckDB's own lock applies.
    """

    # lock path -> [fd, holders in this process, 1 if this process created the file]
    _held: ClassVar[dict[str, list[int]]] = {}
    _mutex: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, key: str) -> None:
        self._key = key
        self._released = False

    @classmethod
    def acquire(cls, db_path: Path, wait_s: float) -> WriterLock:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows
            return cls("")
        key = str(db_path.resolve()) + ".lock"
        deadline = time.monotonic() + wait_s
        with cls._mutex:
            if key in cls._held:
                cls._held[key][1] += 1
                return cls(key)
        fd, created = _open_lock_file(db_path, key)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                if time.monotonic() >= deadline:
                    holder = os.pread(fd, 4096, 0).decode(errors="replace").split("\n", 1)
                    os.close(fd)  # it is the other writer's file: never removed here
                    pid, command = holder[0].strip(), holder[1].strip() if len(holder) > 1 else ""
                    shown = f" ({describe_process(int(pid), command)})" if pid.isdigit() else ""
                    raise StoreError(
                        f"{db_path} is being written by another process{shown}; wait for it to "
                        "finish, pass --wait SECONDS, or use another --db"
                    ) from None
                time.sleep(0.1)
        os.ftruncate(fd, 0)  # who holds it, for the next writer's message
        try:
            os.pwrite(fd, f"{os.getpid()}\n{_command_line(sys.argv)}\n".encode(), 0)
        except OSError as exc:  # a full disk: the lock is held all the same, but say so now
            os.close(fd)
            raise StoreError(
                f"{key}: cannot write the store's lock file: {os_reason(exc)}"
            ) from None
        with cls._mutex:
            cls._held[key] = [fd, 1, int(created)]
        return cls(key)

    def release(self, *, discard: bool = False) -> None:
        """Drop this hold; the last one closes the file (dropping the flock). ``discard``: also
        remove the lock file if this process created it (a store it refused to open: the
        directory is left as it was)."""
        if self._released or not self._key:
            return
        self._released = True
        with self._mutex:
            entry = self._held[self._key]
            entry[1] -= 1
            if entry[1]:
                return
            del self._held[self._key]
        if discard and entry[2]:
            with contextlib.suppress(OSError):  # a stray lock file is harmless
                os.unlink(self._key)  # still holding the flock: no writer is using it
        os.close(entry[0])  # closing the descriptor drops the flock


def _open_lock_file(db_path: Path, key: str) -> tuple[int, bool]:
    """The lock file's descriptor, and whether this call created it.

    Raises:
        StoreError: the file cannot be created or opened (a read-only file system, ...).
    """
    while True:
        try:
            try:
                return os.open(key, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644), True
            except FileExistsError:
                return os.open(key, os.O_RDWR), False
        except FileNotFoundError:
            continue  # removed between the two opens: create it
        except OSError as exc:
            raise StoreError(
                f"{db_path}: cannot write the store: {os_reason(exc)} opening its lock file "
                f"{key}; use a --db in a directory you can write (reading works: "
                "`evalkit runs list`, notebooks)"
            ) from None


def os_reason(exc: OSError) -> str:
    """``Read-only file system (EROFS)``: the system's words and the errno's name.

    Examples:
        >>> os_reason(OSError(errno.EROFS, "Read-only file system"))
        'Read-only file system (EROFS)'
    """
    name = errno.errorcode.get(exc.errno or 0, "")
    return f"{exc.strerror or exc}" + (f" ({name})" if name else "")


def describe_process(pid: int, command: str = "") -> str:
    """``PID 4242: evalkit run --label candidate`` — the process holding a store, by the command
    it recorded or, failing that, its ``/proc`` command line (secrets and URL credentials
    removed), so a person can tell their own idle notebook from a run.

    Examples:
        >>> describe_process(4242, "evalkit run --label candidate")
        'PID 4242: evalkit run --label candidate'
    """
    if not command:
        with contextlib.suppress(OSError):
            with open(f"/proc/{pid}/cmdline", "rb") as file:
                argv = file.read().decode(errors="replace").split("\0")
            command = _command_line([a for a in argv if a])
    return f"PID {pid}: {command}" if command else f"PID {pid}"


def _command_line(argv: list[str]) -> str:
    """What a process is, in a few words: a Jupyter kernel is named as one (its argv is a
    launcher and a connection file); else the program's name and arguments, cut at 120.

    Examples:
        >>> _command_line(["/x/.venv/bin/evalkit", "run", "--label", "candidate"])
        'evalkit run --label candidate'
        >>> _command_line(["/usr/bin/python3", "-m", "ipykernel_launcher", "-f", "k.json"])
        'a Jupyter kernel (a notebook holding the store open for writing)'
        >>> _command_line(["/x/.venv/bin/python", "-m", "evalkit.kernel", "-f", "k.json"])
        'a Jupyter kernel (a notebook holding the store open for writing)'
    """
    if any("ipykernel" in part or part == "evalkit.kernel" for part in argv):  # evalkit's own
        return "a Jupyter kernel (a notebook holding the store open for writing)"
    if not argv:
        return ""
    # ``python -c CODE`` leaves ``-c`` as argv[0]: name the interpreter in front of it
    program = [os.path.basename(sys.executable or "python")] if argv[0] == "-c" else []
    words = [*program, os.path.basename(argv[0]), *argv[1:]]
    text = redact_secrets(" ".join(words))
    return text if len(text) <= 120 else text[:117] + "..."

"""One writer, many readers: the writer's ``flock`` and DuckDB connections that wait for a busy
file."""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path
from typing import ClassVar

import duckdb

from evalkit.errors import StoreError


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
                holder = f" (PID {pid.group(1)})" if pid else ""
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


class WriterLock:
    """An exclusive ``flock`` on ``<db>.lock``: one writing process per store file.

    The kernel drops it when the process dies (even by SIGKILL), so it never goes stale. It is
    shared within one process (DuckDB also lets one process open a file read-write twice).
    Without ``fcntl`` (Windows) only DuckDB's own lock applies.
    """

    _held: ClassVar[dict[str, list[int]]] = {}  # lock path -> [fd, holders in this process]
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
        fd = os.open(key, os.O_RDWR | os.O_CREAT, 0o644)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                if time.monotonic() >= deadline:
                    holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
                    os.close(fd)
                    shown = f" (PID {holder})" if holder.isdigit() else ""
                    raise StoreError(
                        f"{db_path} is being written by another process{shown}; wait for it to "
                        "finish, pass --wait SECONDS, or use another --db"
                    ) from None
                time.sleep(0.1)
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        with cls._mutex:
            cls._held[key] = [fd, 1]
        return cls(key)

    def release(self) -> None:
        if self._released or not self._key:
            return
        self._released = True
        with self._mutex:
            entry = self._held[self._key]
            entry[1] -= 1
            if entry[1]:
                return
            del self._held[self._key]
        os.close(entry[0])  # closing the descriptor drops the flock

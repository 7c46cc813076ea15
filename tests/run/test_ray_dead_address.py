"""Ray fails fast (issue 46, item 9): ``evalkit run --engine ray --address A`` with no cluster at
A stops by itself with one line naming A (Ray itself retried for more than 12 minutes, printing
a warning every few seconds), and records no run. The tests assert which limit stopped it (the
refused connection, or the connect limit's own message), not a wall-clock time: the elapsed
time on a loaded machine says nothing about the bound."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalkit.run.engines.ray_engine import CONNECT_TIMEOUT_S

#: Only a safety net for a hung test: far above the connect limit on any machine.
SAFETY_NET_S = 600


@pytest.fixture
def project(project_factory) -> Path:
    return project_factory().root


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def silent_listener() -> Iterator[int]:
    """A port that accepts connections and never answers (a hung cluster, another service)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


def _run_on(project: Path, tmp_path: Path, address: str) -> tuple[int, str]:
    db = tmp_path / "ray.duckdb"
    command = [sys.executable, "-m", "evalkit.cli", "run", "--engine", "ray", "--address",
               address, "--db", str(db), "--no-progress",
               "--parts", str(tmp_path / "parts")]  # fmt: skip
    done = subprocess.run(
        command, cwd=project, capture_output=True, text=True, timeout=SAFETY_NET_S
    )
    return done.returncode, done.stderr


def _no_run(tmp_path: Path) -> None:
    db = tmp_path / "ray.duckdb"
    if db.exists():
        from evalkit.store import open_store

        with open_store(db, read_only=True) as store:
            assert store.runs().height == 0


def test_a_dead_cluster_address_fails_in_one_line(project: Path, tmp_path: Path) -> None:
    address = f"127.0.0.1:{_free_port()}"  # a cluster that was there and is gone
    code, err = _run_on(project, tmp_path, address)
    assert code == 2  # refused at the first connection: Ray's own retries never start
    assert err.strip().splitlines() == [
        f"evalkit: error: Ray cluster at {address} is unreachable (connection refused); start "
        "it (`ray start --head`) or pass the address `ray status` prints as --address"
    ]
    _no_run(tmp_path)


def test_an_address_that_accepts_and_never_answers_fails_at_the_connect_limit(
    project: Path, tmp_path: Path, silent_listener: int
) -> None:
    address = f"127.0.0.1:{silent_listener}"
    code, err = _run_on(project, tmp_path, address)
    assert code == 2
    (line,) = err.strip().splitlines()  # none of Ray's retry warnings
    # the connect limit stopped it (not Ray's retries, which would print and go on for minutes)
    assert line.startswith(
        f"evalkit: error: Ray cluster at {address} did not accept this driver within "
        f"{CONNECT_TIMEOUT_S:g} s"
    )
    assert CONNECT_TIMEOUT_S <= 60
    _no_run(tmp_path)

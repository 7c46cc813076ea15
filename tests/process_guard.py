"""A pytest plugin: the suite fails if any process a test started outlives the session.

Every process the suite starts inherits ``EVALKIT_TEST_SESSION`` (a token set when the session
starts), so a leftover is found even after it daemonized (``setsid``, re-parented to init).
A process started with an environment of its own (the sandbox's ``env -i``) carries no token;
those are checked where they are started. At the end of the session leftovers get a grace period
to exit (servers finishing their shutdown), then each is listed with its command line, killed,
and the session's exit status becomes 1.

Under pytest-xdist (``make test``) the workers share the token of the session that started them
and only that session checks, after its workers have exited: a worker's own exit status would
not reach the run's.

Loaded from ``tests/conftest.py``; ``tests/test_process_guard.py`` checks it on a throwaway
test that leaks a child, in one process and under two xdist workers.
"""

from __future__ import annotations

import os
import secrets
import signal
import time
from pathlib import Path

import pytest

VARIABLE = "EVALKIT_TEST_SESSION"
#: How long leftovers get to exit by themselves (servers finishing their shutdown). A clean
#: session never waits; the throwaway session of tests/test_process_guard.py, whose leak never
#: exits, sets a short one in the environment so the suite does not sit out the full grace.
GRACE_VARIABLE = "EVALKIT_TEST_GUARD_GRACE_S"
GRACE_S = 10.0


def _is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")  # set by pytest-xdist in its worker processes only


def pytest_sessionstart(session: pytest.Session) -> None:
    # Under pytest-xdist the workers keep the token of the session that started them, so what
    # their tests start is found by that one check, made once every worker has exited.
    if not (_is_xdist_worker(session.config) and os.environ.get(VARIABLE)):
        os.environ[VARIABLE] = secrets.token_hex(8)


@pytest.hookimpl(trylast=True)  # after pytest-xdist has shut its workers down
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    token = os.environ.get(VARIABLE)
    if not token or _is_xdist_worker(session.config):
        return
    deadline = time.monotonic() + float(os.environ.get(GRACE_VARIABLE, GRACE_S))
    while (left := leftovers(token)) and time.monotonic() < deadline:
        time.sleep(0.2)
    if not left:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = [f"{pid}: {command}" for pid, command in left.items()]
    message = f"{len(left)} process(es) started by the tests outlived them:\n" + "\n".join(lines)
    if reporter is not None:
        reporter.write_line(message, red=True)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue
    session.exitstatus = 1


def leftovers(token: str) -> dict[int, str]:
    """Live processes other than this one whose environment carries ``token``."""
    found, mine = {}, os.getpid()
    needle = f"{VARIABLE}={token}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == mine:
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            if state == "Z":  # exited; only its parent's wait is missing
                continue
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, IndexError):
            continue
        found[int(entry.name)] = command.strip()[:200]
    return found


def pids_with(marker: str) -> list[int]:
    """Live processes (any environment) whose command line contains ``marker``: what a test
    that starts marked processes checks is gone."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found

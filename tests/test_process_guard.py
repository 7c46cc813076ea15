"""The session-end process guard (tests/process_guard.py) fails a suite that leaks a process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from process_guard import GRACE_VARIABLE, pids_with

LEAKY = textwrap.dedent(
    """\
    import subprocess

    def test_leaks_a_daemonized_child():
        # off the session's pipes, as a detached server is: an xdist worker's pipe held open
        # would only make the worker's shutdown wait out its timeout before the guard runs
        quiet = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL,
                 "stderr": subprocess.DEVNULL}
        subprocess.Popen(["sleep", "MARKER"], start_new_session=True, **quiet)

    def test_passes():
        assert True
    """
)


def _run(tmp_path: Path, body: str, *options: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_throwaway.py").write_text(body)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    env["PYTHONPATH"] = str(Path(__file__).parent)
    env.pop("EVALKIT_TEST_SESSION", None)  # the inner session sets its own
    # the leak never exits by itself: a short grace finds and kills it all the same
    env[GRACE_VARIABLE] = "0.5"
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "process_guard",
        "-p",
        "no:cacheprovider",
        *options,
    ]
    return subprocess.run(
        [*command, str(tmp_path / "test_throwaway.py")],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120,
    )  # fmt: skip


#: One process, and pytest-xdist workers (as `make test` runs the suite, there three): the check is
#: the controller's, once its workers have exited, and they are not leftovers themselves.
SESSIONS = pytest.mark.parametrize("options", [(), ("-n", "2")], ids=["one-process", "xdist"])


@SESSIONS
def test_a_leaked_child_fails_the_session_and_is_killed(
    tmp_path: Path, options: tuple[str, ...]
) -> None:
    marker = f"7171.{len(options) + 1}"  # each variant its own, should both run at once
    try:
        done = _run(tmp_path, LEAKY.replace("MARKER", marker), *options)
        assert "2 passed" in done.stdout, done.stdout
        assert done.returncode == 1, done.stdout + done.stderr
        assert "1 process(es) started by the tests outlived them" in done.stdout
        assert f"sleep {marker}" in done.stdout
        assert pids_with(marker) == []  # the guard killed it
    finally:
        for pid in pids_with(marker):
            os.kill(pid, signal.SIGKILL)


@SESSIONS
def test_a_clean_session_passes(tmp_path: Path, options: tuple[str, ...]) -> None:
    done = _run(tmp_path, "def test_fine():\n    assert True\n", *options)
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout + done.stderr

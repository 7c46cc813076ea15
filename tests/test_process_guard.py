"""The session-end process guard (tests/process_guard.py) fails a suite that leaks a process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from process_guard import pids_with

LEAKY = textwrap.dedent(
    """\
    import subprocess

    def test_leaks_a_daemonized_child():
        subprocess.Popen(["sleep", "7171.5"], start_new_session=True)

    def test_passes():
        assert True
    """
)


def _run(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_throwaway.py").write_text(body)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    env.pop("EVALKIT_TEST_SESSION", None)  # the inner session sets its own
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "process_guard",
        "-p",
        "no:cacheprovider",
    ]
    return subprocess.run(
        [*command, str(tmp_path / "test_throwaway.py")],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120,
    )  # fmt: skip


def test_a_leaked_child_fails_the_session_and_is_killed(tmp_path: Path) -> None:
    try:
        done = _run(tmp_path, LEAKY)
        assert "2 passed" in done.stdout, done.stdout
        assert done.returncode == 1, done.stdout + done.stderr
        assert "1 process(es) started by the tests outlived them" in done.stdout
        assert "sleep 7171.5" in done.stdout
        assert pids_with("7171.5") == []  # the guard killed it
    finally:
        for pid in pids_with("7171.5"):
            os.kill(pid, signal.SIGKILL)


def test_a_clean_session_passes(tmp_path: Path) -> None:
    done = _run(tmp_path, "def test_fine():\n    assert True\n")
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout

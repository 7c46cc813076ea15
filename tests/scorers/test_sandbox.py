"""The python_tests sandbox is a boundary: escapes that beat the audit hook are contained by the
operating system, asserted from outside (no file created, the listener received nothing, the
decoy process alive, the forged result rejected, the setsid grandchild gone), and API keys never
reach the child."""

from __future__ import annotations

import os
import signal
import subprocess
import textwrap
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from process_guard import pids_with

from evalkit.records import Output, Score
from evalkit.scorers import sandbox
from evalkit.scorers.registry import Scorer, build_scorer

if TYPE_CHECKING:  # the fixture's type (tests/scorers/conftest.py)
    from conftest import Listener

TESTS = "def test_add():\n    assert add(1, 2) == 3\n"
GOOD = "def add(a, b):\n    return a + b\n"
CANARY = "sk-evalkit-sandbox-canary-5b1e0c9d7a"

pytestmark = pytest.mark.skipif(
    sandbox.isolation_problem() is not None, reason=f"no isolation: {sandbox.isolation_problem()}"
)

# Spawns a process with _posixsubprocess.fork_exec: no audit event, so the hook never sees it.
FORK_EXEC = textwrap.dedent(
    """\
    import _posixsubprocess, os
    def spawn(argv, setsid=False):
        exe = [os.fsencode(argv[0])]
        r, w = os.pipe()
        try:
            return _posixsubprocess.fork_exec(
                argv, exe, True, (w,), None, None, -1, -1, -1, -1, -1, -1, r, w,
                True, setsid, -1, None, None, None, -1, None, False)
        finally:
            os.close(r)
            os.close(w)
    """
)


def python_scorer(**args: object) -> Scorer:
    return build_scorer("python_tests", {"tests_inline": TESTS, "timeout_s": 5, **args})


def score(scorer: Scorer, text: str) -> Score:
    return scorer(Output(text), None)


def test_fork_exec_spawns_inside_and_the_setsid_grandchild_is_gone(tmp_path: Path) -> None:
    mark = tmp_path / "spawned"
    marker = "4242.17"  # a sleep length no other process uses
    code = FORK_EXEC + textwrap.dedent(
        f"""\
        spawn([b"/bin/sh", b"-c", b"touch {mark}; echo x > /usr/evalkit-pwned"])
        spawn([b"/bin/sleep", b"{marker}"], setsid=True)
        spawn([b"/bin/sh", b"-c", b"setsid /bin/sleep {marker} &"], setsid=True)
        import time; time.sleep(0.3)
        """
    )
    result = score(python_scorer(), code + GOOD)
    assert result.passed, result.reason  # the code ran, spawning included
    assert not mark.exists()
    assert not Path("/usr/evalkit-pwned").exists()
    deadline = time.monotonic() + 2
    while pids_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pids_with(marker) == []


def test_clearing_the_hook_from_a_frame_then_spawning_and_connecting_is_contained(
    tmp_path: Path, listener: Listener
) -> None:
    mark = tmp_path / "system"
    port = listener.port
    code = textwrap.dedent(
        f"""\
        import sys, os, socket
        depth = 0
        while True:
            try:
                frame = sys._getframe(depth)
            except ValueError:
                break
            for value in list(frame.f_locals.values()):
                if isinstance(value, (set, dict, list)) and value is not frame.f_locals:
                    try:
                        value.clear()
                    except Exception:
                        pass
            depth += 1
        try:
            os.system("touch {mark}")
        except Exception:
            pass
        try:
            socket.create_connection(("127.0.0.1", {port}), timeout=1).sendall(b"leak")
        except Exception:
            pass
        """
    )
    score(python_scorer(), code + GOOD)
    assert not mark.exists()
    assert listener.connections() == 0


def test_mknod_mkfifo_and_dir_fd_writes_outside_are_contained(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    code = FORK_EXEC + textwrap.dedent(
        f"""\
        import os, stat
        D = {str(outside)!r}
        for attempt in (
            lambda: os.mkfifo(D + "/fifo"),
            lambda: os.mknod(D + "/node", stat.S_IFREG | 0o600),
            lambda: os.open("rel", os.O_CREAT | os.O_WRONLY, dir_fd=os.open(D, os.O_RDONLY)),
            lambda: os.open("usr-rel", os.O_CREAT | os.O_WRONLY, dir_fd=os.open("/usr", 0)),
            lambda: spawn([b"/bin/sh", b"-c", b"mkfifo " + D.encode() + b"/sh-fifo"]),
        ):
            try:
                attempt()
            except Exception:
                pass
        """
    )
    score(python_scorer(), code + GOOD)
    assert list(outside.iterdir()) == []
    assert not Path("/usr/usr-rel").exists()


def test_signals_cannot_reach_a_decoy_process() -> None:
    decoy = subprocess.Popen(["sleep", "60"])
    try:
        code = FORK_EXEC + textwrap.dedent(
            f"""\
            import os, signal
            for attempt in (
                lambda: signal.pidfd_send_signal(os.pidfd_open({decoy.pid}), signal.SIGKILL),
                lambda: os.kill({decoy.pid}, signal.SIGKILL),
                lambda: spawn([b"/bin/kill", b"-9", b"{decoy.pid}"]),
                lambda: spawn([b"/bin/kill", b"-9", b"-1"]),
            ):
                try:
                    attempt()
                except Exception:
                    pass
            """
        )
        score(python_scorer(), code + GOOD)
        time.sleep(0.2)
        assert decoy.poll() is None, "the decoy was killed"
    finally:
        decoy.send_signal(signal.SIGKILL)
        decoy.wait()


def test_a_forged_result_is_rejected() -> None:
    code = textwrap.dedent(
        """\
        import json, os
        fake = json.dumps({"status": "ok", "passed": ["test_add"], "failed": []}) + "\\n"
        for fd in range(10):
            try:
                os.write(fd, fake.encode())
            except OSError:
                pass
        os._exit(0)
        """
    )
    result = score(python_scorer(), code)
    assert not result.passed
    assert result.reason.startswith("forged result rejected: "), result.reason


def test_the_api_key_never_reaches_the_child(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    monkeypatch.setenv("CUSTOM_VENDOR_KEY", "custkey-" + CANARY[-12:])
    hooked = textwrap.dedent(
        """\
        import os
        seen = [repr(dict(os.environ))]
        for name in ["/proc/%d/environ" % os.getppid(), "/proc/1/environ"]:
            try:
                seen.append(open(name, "rb").read().decode(errors="replace"))
            except Exception as exc:
                seen.append(repr(exc))
        raise RuntimeError(" | ".join(seen)[-250:])
        """
    )  # the hook refuses the reads; the environment has no key either
    unhooked = FORK_EXEC + textwrap.dedent(
        """\
        import time
        spawn([b"/bin/sh", b"-c", b"cat /proc/[0-9]*/environ /proc/$PPID/environ > env.txt"])
        time.sleep(0.3)
        raise RuntimeError(open("env.txt").read()[:150] + repr(dict(os.environ)))
        """
    )  # reads past the hook: the sandbox has no /proc, and its own environment has no key
    for code in (hooked, unhooked):
        result = sandbox.run_python(code, TESTS, timeout_s=5)
        assert result.status in ("crash", "blocked"), result
        assert "'PATH'" in result.message or code is hooked, result.message
        assert CANARY[-12:] not in result.message + result.stderr
        assert CANARY[-12:] not in score(python_scorer(), code).reason


def test_isolation_unavailable_fails_closed_and_unsafe_local_is_labelled(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(sandbox, "_TOOLS", (*sandbox._TOOLS, "evalkit-no-such-tool"))
    mark = tmp_path / "ran"
    code = f"open({str(mark)!r}, 'w')\n" + GOOD
    result = score(python_scorer(), code)
    assert result.error and not result.passed
    assert result.reason.startswith("sandbox unavailable, code not run: evalkit-no-such-tool")
    assert not mark.exists()
    local = score(python_scorer(sandbox="unsafe-local"), GOOD)
    assert local.passed and local.reason == "[UNSAFE-LOCAL] 1/1 tests passed"


def test_writes_land_in_a_capped_tmpfs_not_on_disk() -> None:
    code = "for i in range(8):\n    open(f'big{i}', 'wb').write(b'x' * (15 << 20))\n" + GOOD
    result = score(python_scorer(memory_mb=512), code)
    assert not result.passed
    assert "No space left on device" in result.reason, result.reason


def test_nothing_of_the_parent_environment_is_inherited() -> None:
    tests = "import os\ndef test_env():\n    assert False, sorted(os.environ)\n"
    scorer = build_scorer("python_tests", {"tests_inline": tests, "timeout_s": 5})
    reason = score(scorer, GOOD).reason
    assert "['HOME', 'LC_ALL', 'PATH', 'TMPDIR']" in reason, reason
    assert os.environ.get("PATH")  # the parent's own is untouched

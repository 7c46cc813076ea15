"""The sandbox against a second interpreter started past the audit hook: the system-call filter
(keyrings, io_uring, ptrace), one memory and process budget for all its processes, and a result
channel the code cannot forge by reading its own memory. Asserted from outside the sandbox: the
canary's text never comes back, the processes' summed memory is measured from the host's /proc,
and the forged result never passes."""

from __future__ import annotations

import ctypes
import os
import textwrap
import threading
import time
from pathlib import Path

import pytest
from process_guard import pids_with

from evalkit.corpus import manifest
from evalkit.corpus.cases import load_corpus
from evalkit.corpus.manifest import build_manifest
from evalkit.corpus.suite import load_suite
from evalkit.records import Output
from evalkit.scorers import sandbox, sandbox_budget, syscall_filter
from evalkit.scorers.registry import build_scorer

pytestmark = pytest.mark.skipif(
    sandbox.isolation_problem() is not None, reason=f"no isolation: {sandbox.isolation_problem()}"
)

TESTS = "def test_add():\n    assert add(1, 2) == 3\n"
GOOD = "def add(a, b):\n    return a + b\n"

# A second interpreter started with _posixsubprocess.fork_exec: no audit event, no hook in it.
SECOND_INTERPRETER = textwrap.dedent(
    """\
    import _posixsubprocess, os, sys, time
    def spawn(argv):
        r, w = os.pipe()
        try:
            return _posixsubprocess.fork_exec(
                argv, [argv[0]], True, (w,), None, None, -1, -1, -1, -1, -1, -1, r, w,
                True, False, -1, None, None, None, -1, None, False)
        finally:
            os.close(r)
            os.close(w)
    def second(source):
        return spawn([os.fsencode(sys.executable), b"-c", source.encode()])
    """
)


def _syscall_number(name: str) -> int:
    import pyseccomp

    return int(pyseccomp.resolve_syscall(pyseccomp.system_arch(), name))


def _run(code: str, **limits: object) -> sandbox.SandboxResult:
    return sandbox.run_python(code, TESTS, timeout_s=limits.pop("timeout_s", 10), **limits)


def test_the_keyring_canary_and_io_uring_are_unreachable_from_a_second_interpreter() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    canary = b"evalkit-keyring-canary-7f3a9c"
    key = libc.syscall(
        _syscall_number("add_key"), b"user", b"evalkit-canary", canary, len(canary), -3
    )  # into this process's session keyring, which the sandbox would inherit
    assert key > 0, os.strerror(ctypes.get_errno())
    probe = textwrap.dedent(
        f"""\
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        found = libc.syscall({_syscall_number("keyctl")}, 10, -3, b"user", b"evalkit-canary", 0)
        out = ["search=%d errno=%d" % (found, ctypes.get_errno())]
        if found > 0:
            buf = ctypes.create_string_buffer(256)
            n = libc.syscall({_syscall_number("keyctl")}, 11, found, buf, 256)
            out.append("read=" + buf.raw[:max(n, 0)].decode(errors="replace"))
        params = ctypes.create_string_buffer(120)
        ring = libc.syscall({_syscall_number("io_uring_setup")}, 8, params)
        out.append("io_uring=%d errno=%d" % (ring, ctypes.get_errno()))
        open("probe.txt", "w").write(" ".join(out))
        """
    )
    code = SECOND_INTERPRETER + textwrap.dedent(
        f"""\
        second({probe!r})
        for _ in range(200):
            if os.path.exists("probe.txt") and open("probe.txt").read():
                break
            time.sleep(0.02)
        raise RuntimeError(open("probe.txt").read())
        """
    )
    try:
        result = _run(code)
    finally:
        libc.syscall(_syscall_number("keyctl"), 21, key)  # KEYCTL_INVALIDATE
    assert result.status == "crash", result
    assert canary.decode() not in result.message + result.stderr
    assert f"io_uring=-1 errno={1}" in result.message, result.message  # EPERM from the filter
    assert "search=-1 errno=1" in result.message, result.message


def test_every_denied_system_call_is_refused_in_the_sandbox() -> None:
    numbers = {name: _syscall_number(name) for name in syscall_filter.DENIED}
    numbers = {name: n for name, n in numbers.items() if n >= 0}  # this architecture's
    # ENOSYS (38) for clone3 on purpose (glibc falls back to clone); EPERM (1) for the others.
    expected = {name: 38 if name == "clone3" else 1 for name in numbers}
    probe = textwrap.dedent(
        f"""\
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        wrong = []
        for name, number in {numbers!r}.items():
            ctypes.set_errno(0)
            ret = libc.syscall(number, 0, 0, 0, 0, 0, 0)
            if (ret, ctypes.get_errno()) != (-1, {expected!r}[name]):
                wrong.append("%s=%d/%d" % (name, ret, ctypes.get_errno()))
        open("probe.txt", "w").write("wrong: " + (" ".join(wrong) or "none"))
        """
    )
    code = SECOND_INTERPRETER + textwrap.dedent(
        f"""\
        second({probe!r})
        for _ in range(200):
            if os.path.exists("probe.txt") and open("probe.txt").read():
                break
            time.sleep(0.02)
        raise RuntimeError(open("probe.txt").read())
        """
    )
    result = _run(code)
    assert result.message.startswith("RuntimeError: wrong: none "), result.message


def _host_rss_of(marker: str) -> int:
    """Summed private resident memory (RssAnon: shared library pages counted once would need the
    cgroup; counted per process they would be counted eight times), in bytes, of the host
    processes whose command line has ``marker``."""
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker.encode() not in (entry / "cmdline").read_bytes():
                continue
            for line in (entry / "status").read_text().splitlines():
                if line.startswith("RssAnon:"):
                    total += int(line.split()[1]) << 10
        except (OSError, ValueError):
            continue
    return total


def test_eight_180_mb_processes_cannot_coexist_under_a_256_mb_budget() -> None:
    marker = "evalkit-memory-hog-31"
    hog = (
        "import os, time\nheld = bytearray(b'x') * (180 << 20)\n"
        f"open('{marker}-%d' % os.getpid(), 'w').close()\ntime.sleep(30)  # {marker}\n"
    )
    code = SECOND_INTERPRETER + textwrap.dedent(
        f"""\
        for _ in range(8):
            second({hog!r})
        for _ in range(150):
            if sum(name.startswith({marker!r}) for name in os.listdir(".")) == 8:
                break
            time.sleep(0.02)
        raise RuntimeError("held %d" % sum(n.startswith({marker!r}) for n in os.listdir(".")))
        """
    )
    peak, done = [0], threading.Event()

    def watch() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _host_rss_of(marker))
            time.sleep(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        scorer = build_scorer(
            "python_tests", {"tests_inline": TESTS, "timeout_s": 20, "memory_mb": 256}
        )
        result = scorer(Output(code), None)
    finally:
        done.set()
        watcher.join()
    assert not result.passed
    assert result.reason == "memory limit 256 MB exceeded by the whole sandbox", result.reason
    assert peak[0] < 300 << 20, f"the sandbox's processes held {peak[0] >> 20} MB together"
    assert _host_rss_of(marker) == 0  # and nothing of it is left


def test_a_fork_bomb_stops_at_the_cap_counted_from_outside() -> None:
    marker = "5151.37"
    code = SECOND_INTERPRETER + textwrap.dedent(
        f"""\
        started = 0
        for _ in range(2000):
            try:
                spawn([b"/bin/sleep", b"{marker}"])
                started += 1
            except OSError:
                break
        time.sleep(1)
        raise RuntimeError("started %d" % started)
        """
    )
    peak, done = [0], threading.Event()

    def watch() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], sum(1 for _ in pids_with(marker)))
            time.sleep(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        result = _run(code, timeout_s=20)
    finally:
        done.set()
        watcher.join()
    assert result.status == "processes", result
    assert result.message == "process limit 64 (processes and threads) reached"
    assert 0 < peak[0] < 64, peak[0]
    assert list(pids_with(marker)) == []


# Finds every 32-hex-digit string in the interpreter's own writable memory, through a relative
# path to /proc/self/mem, and writes a passing result line with each as the nonce.
FORGE_FROM_MEMORY = textwrap.dedent(
    """\
    import json, os, re
    os.chdir("/proc")
    regions = []
    for line in open("self/maps"):
        span, perms = line.split()[:2]
        if perms.startswith("rw"):
            start, end = (int(x, 16) for x in span.split("-"))
            regions.append((start, end))
    candidates = set()
    with open("self/mem", "rb", buffering=0) as mem:
        for start, end in regions:
            try:
                mem.seek(start)
                chunk = mem.read(end - start)
            except OSError:
                continue
            candidates.update(re.findall(rb"(?<![0-9a-f])[0-9a-f]{32}(?![0-9a-f])", chunk))
    lines = b"".join(
        json.dumps({"status": "ok", "passed": ["test_add"], "failed": [],
                    "nonce": c.decode()}).encode() + b"\\n"
        for c in list(candidates)[:500]
    )
    for fd in range(0, 12):
        try:
            os.write(fd, lines)
        except OSError:
            pass
    os._exit(0)
    """
)


@pytest.mark.parametrize("isolation", [sandbox.ISOLATED, sandbox.UNSAFE_LOCAL])
def test_a_result_forged_from_the_interpreters_own_memory_does_not_pass(isolation: str) -> None:
    result = sandbox.run_python(FORGE_FROM_MEMORY, TESTS, timeout_s=10, isolation=isolation)
    assert result.status != "ok", result
    if isolation == sandbox.UNSAFE_LOCAL:  # /proc is there: the hook resolves the spelling
        assert result.status == "blocked", result
        assert result.message == "introspection blocked: self/mem", result.message
    else:  # no /proc inside the sandbox at all
        assert result.status == "crash", result
        assert "FileNotFoundError" in result.message, result.message


def test_a_filter_that_cannot_be_loaded_fails_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    # An invalid program (one instruction that is not BPF): the kernel refuses it, the harness
    # reports that, and the code never runs.
    monkeypatch.setattr(syscall_filter, "bpf_program", lambda: b"\xff" * 8)
    mark = "evalkit-never-ran"
    result = sandbox.run_python(f"open({mark!r}, 'w')\n" + GOOD, TESTS, timeout_s=5)
    assert result.status == "unavailable", result
    assert result.message.startswith("cannot load the seccomp filter: "), result.message


def test_the_manifest_says_which_mechanisms_held(project_factory) -> None:
    code_case = (
        "- id: code-add-001\n  tags: [code]\n"
        "  provenance: {reviewer: you, date: 2026-01-15, source: test}\n"
        "  input: {vars: {message: write add}}\n"
        "  expect:\n    - {scorer: python_tests, args: {tests_inline: 'def test_a(): pass'}}\n"
    )
    project = project_factory("project", cases={"code.yaml": code_case})
    suite = load_suite(project.config)
    recorded = build_manifest(suite, load_corpus(suite.root), run_id="r", label="l", selection={})
    kind = sandbox_budget.mechanism()
    assert recorded.sandbox["isolation"] == sandbox.ISOLATED
    assert recorded.sandbox["syscall_filter"].startswith("seccomp allow-list")
    assert kind is not None and recorded.sandbox["budget"]["processes"].startswith(
        kind if kind != sandbox_budget.UID else "rlimit"
    )
    (project.cases / "code.yaml").unlink()
    plain = build_manifest(suite, load_corpus(suite.root), run_id="r", label="l", selection={})
    assert plain.sandbox is None and "sandbox" not in plain.to_dict()  # only suites running code
    assert recorded.config_hash != "" and "sandbox" not in manifest.COMPARABLE_FIELDS

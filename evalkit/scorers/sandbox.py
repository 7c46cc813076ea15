"""The sandbox ``python_tests`` runs model-written code in: Linux namespaces, then a harness.

Containment is the operating system's job, not the interpreter's. Each run starts, through
``unshare`` and ``setpriv`` from util-linux:

* **new user, PID, network, mount, IPC and UTS namespaces**: the code is root only inside its own
  user namespace and holds no capabilities at all once it runs (``setpriv --inh-caps=-all
  --bounding-set=-all --no-new-privs``); it sees only its own processes (its own PID namespace,
  with no ``/proc`` mounted), so it cannot read another process's environment or signal one;
  its network namespace has no interface but a downed loopback, so nothing it sends leaves it;
  it may not create further user namespaces (``user.max_user_namespaces = 0`` inside);
* **a private, read-only view of the filesystem**: a new root (``pivot_root``, the old root
  unmounted) holding read-only binds of ``/usr`` (plus ``/lib*`` and ``/bin`` when they are real
  directories) and of the Python installation, ``/dev/null``, ``zero``, ``random``, ``urandom``,
  and one writable, size-capped tmpfs mounted at the run's temp dir, which is also its working
  directory, ``HOME`` and ``TMPDIR``. Nothing it writes reaches the disk;
* **no parent environment**: the launcher starts from an empty environment, the interpreter gets
  ``PATH``, ``HOME``, ``TMPDIR`` and ``LC_ALL`` only; API keys are never in the child;
* **limits**: address space (``memory_mb``), CPU seconds, file size, open files and no core
  dumps per process (``prlimit``), plus a wall-clock limit after which the whole namespace is
  killed. When the first process of a PID namespace ends, the kernel kills every other one, so
  nothing (not even a ``setsid`` grandchild) outlives the scorer. Nor the run: the launcher
  (``unshare``) gets ``SIGKILL`` when the evalkit thread that started it dies, however it dies
  (``setpriv --pdeathsig``), and takes the namespace with it (``--kill-child``); what a killed
  run leaves (its cgroups, its temp dirs) the next run's first sandbox removes;
* **one budget for the whole sandbox** (:mod:`evalkit.scorers.sandbox_budget`): its own cgroup
  (v2, else v1) caps the *sum* of its memory (RAM, swap, the tmpfs) at ``memory_mb`` and its
  processes and threads at 64, which binds root too; without a writable cgroup a non-root user's
  mapped uid makes ``RLIMIT_NPROC`` bind (memory then per process), and root without one fails
  closed. A case that hits either limit fails with that reason. The manifest records which held;
* **a system-call filter** (:mod:`evalkit.scorers.syscall_filter`): a seccomp allow-list loaded
  by the harness before any model code, inherited by every process it starts however it starts
  them. Keyrings, io_uring, ptrace and cross-process memory, perf, BPF, userfaultfd, namespaces
  and mounts, module loading and kexec fail with ``EPERM``. The harness first leaves the
  runner's session keyring for a new empty one;
* **an authenticated result the code cannot reach**: the parent hands the harness a per-run
  nonce through a pipe that is closed before the code runs; a result line without it is rejected
  as forged, and the parent checks the reported test names against the tests it parsed itself.
  The sandbox has no ``/proc`` (it is unmounted before the code runs) and the filter refuses
  ``ptrace`` and ``process_vm_readv``, so no process inside can read the harness's memory.

Inside, the harness keeps its :pep:`578` audit hook. It is *not* a boundary (it shares the
interpreter with the code it watches); it turns the common refusals (network, writes outside the
temp dir, spawning, ``ctypes``, frame and ``gc`` introspection, ``/proc/.../mem`` however the
path is spelled) into clear reasons, and it guards the result: the code may not add audit hooks,
trace, or reach the harness's frames, and never runs on the thread that holds the nonce.

What is *not* contained: CPU time up to the limits, the kernel's attack surface through the
system calls the filter allows, reads of the world-readable files under ``/usr`` and the Python
installation, and the honesty of the verdict itself: the tests run in the same interpreter as
the code, so code that subverts that interpreter (an object equal to everything) can still make
its own tests pass. It cannot reach anything outside the sandbox to do so.

If the namespaces, the filter (no libseccomp) or a process budget cannot be set up,
``python_tests`` fails closed with the reason. ``sandbox: unsafe-local`` runs the code without
isolation (the audit hook and rlimits only): for trusted code, and labelled so in every reason.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import resource
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalkit.scorers import sandbox_budget, syscall_filter

FILE_LIMIT = 16 << 20  # bytes any file (and the captured stdout/stderr) may reach
_TMPFS_MB = 64  # the writable temp dir, in memory
_MAX_PROCESSES = 32  # RLIMIT_NPROC: enforced for every user but the real root
_PID_MAX = 320  # the namespace's own pid_max (Linux >= 6.14; 301 is the least it takes)
ISOLATED, UNSAFE_LOCAL = "namespaces", "unsafe-local"
_UNSHARE = (  # the flags: user, pid (forked, killed with unshare), net, mount, ipc, uts
    *("unshare", "--user", "--map-root-user", "--pid", "--fork", "--kill-child"),
    *("--net", "--mount", "--ipc", "--uts", "--propagation", "private"),
)
_TOOLS = ("unshare", "setpriv", "prlimit", "sh", "mount", "umount", "pivot_root")
_LAUNCH_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}
_MAX_TASKS = 64  # the sandbox cgroup's pids.max: every process and thread of the sandbox
_FILTER_ALLOWED = syscall_filter.ALLOWED
# Runs first, outside the namespaces: writes its own pid into each cgroup.procs file given, then
# execs the rest of the command (unshare ...), which every later process inherits.
_JOIN = 'set -e; while [ "$1" != -- ]; do echo $$ > "$1"; shift; done; shift; exec "$@"'
# The launcher dies with the evalkit thread that started it (a kill -9 of the run included),
# and unshare --kill-child takes the namespace with it.
_PARENT_DEATH = ("setpriv", "--pdeathsig", "KILL")
_SANDBOX_PREFIX, _IO_PREFIX = "evalkit-sandbox-", "evalkit-io-"

# Runs as root of the new user namespace, before any untrusted code: builds the new root, drops
# every capability, applies the limits and execs the interpreter. Arguments: the new root, the
# temp dir, the tmpfs size, the limits, then the read-only binds (absolute host paths), "--",
# and the command.
_SETUP = r"""
set -eu
R=$1 W=$2 SIZE=$3 AS=$4 CPU=$5 FSIZE=$6 NPROC=$7 PIDS=$8
shift 8
mount -t tmpfs -o size=1m,mode=755,nosuid,nodev tmpfs "$R"
mkdir -p "$R/proc" "$R/dev" "$R/old" "$R$W"
while [ "$1" != "--" ]; do
  if [ -L "$1" ]; then
    ln -s "$(readlink "$1")" "$R$1"
  else
    mkdir -p "$R$1"
    mount --rbind "$1" "$R$1"
    mount -o remount,bind,ro,nosuid,nodev "$R$1"
  fi
  shift
done
shift
for d in null zero random urandom; do
  touch "$R/dev/$d"
  mount --bind "/dev/$d" "$R/dev/$d"
done
mount -t tmpfs -o size="$SIZE",mode=700,nosuid,nodev tmpfs "$R$W"
mount -t proc -o nosuid,nodev,noexec proc "$R/proc"
echo 0 > "$R/proc/sys/user/max_user_namespaces"
{ echo "$PIDS" > "$R/proc/sys/kernel/pid_max"; } 2>/dev/null || true
mount -o remount,ro,bind "$R"
cd "$R"
pivot_root . old
umount -l /old
umount /proc
cd "$W"
exec setpriv --no-new-privs --inh-caps=-all --bounding-set=-all \
  prlimit --as="$AS" --cpu="$CPU" --fsize="$FSIZE" --nofile=64 --core=0 --nproc="$NPROC" -- \
  /usr/bin/env -i PATH=/usr/bin:/bin HOME="$W" TMPDIR="$W" LC_ALL=C.UTF-8 "$@"
"""


@dataclass(frozen=True)
class SandboxResult:
    """What happened to one sandboxed run: ``status`` is ``ok`` when the tests ran to the end.

    Other statuses: ``syntax``, ``crash`` (the code raised on import), ``entry`` (``entry`` not
    defined), ``timeout``, ``memory``, ``blocked`` (a refused operation), ``died`` (the
    interpreter ended without a result), ``forged`` (a result the harness did not write),
    ``unavailable`` (isolation could not be set up; nothing ran).
    """

    status: str
    passed: tuple[str, ...] = ()
    failed: tuple[tuple[str, str], ...] = ()
    message: str = ""
    stderr: str = field(default="", repr=False)


def isolation_problem() -> str | None:
    """Why namespaced isolation cannot run here, or None when it can (probed once): the
    namespaces, the seccomp filter and a process budget must all be available."""
    return _probe(_UNSHARE, _TOOLS) or syscall_filter.unavailable() or sandbox_budget.problem()


def isolation_description() -> dict[str, Any]:
    """What contains ``python_tests`` code on this machine, for the run manifest.

    Examples:
        >>> sorted(isolation_description())
        ['budget', 'isolation', 'syscall_filter']
    """
    problem = isolation_problem()
    return {
        "isolation": f"unavailable: {problem}" if problem else ISOLATED,
        "syscall_filter": None if problem else f"seccomp allow-list, {len(_FILTER_ALLOWED)} names",
        "budget": sandbox_budget.describe(),
    }


@functools.cache
def _probe(unshare: tuple[str, ...], tools: tuple[str, ...]) -> str | None:
    missing = [tool for tool in tools if shutil.which(tool, path=_LAUNCH_ENV["PATH"]) is None]
    if missing:
        return f"{', '.join(missing)} not found (install util-linux)"
    if not sys.platform.startswith("linux"):
        return f"Linux namespaces are not available on {sys.platform}"
    command = [*unshare, "sh", "-c", "mount -t proc proc /proc && echo ok"]
    try:
        done = subprocess.run(command, capture_output=True, env=_LAUNCH_ENV, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare did not run: {exc}"
    if done.returncode != 0 or done.stdout.strip() != b"ok":
        lines = done.stderr.decode("utf-8", "replace").strip().splitlines() or ["no output"]
        return f"unshare failed (user namespaces disabled?): {lines[-1][:200]}"
    return None


def run_python(
    code: str,
    tests: str,
    *,
    timeout_s: float = 10,
    memory_mb: int = 256,
    entry: str | None = None,
    test_names: tuple[str, ...] | None = None,
    isolation: str = ISOLATED,
) -> SandboxResult:
    """Run ``code`` then the ``test_*`` functions of ``tests`` in the sandbox described above.

    ``test_names``, when given, are the tests the parent expects a result for: a result naming
    any other set is rejected as forged. ``isolation`` is ``namespaces`` (fails closed with
    status ``unavailable`` when they cannot be created) or ``unsafe-local``.
    """
    if isolation == ISOLATED:
        problem = isolation_problem()
        if problem is not None:
            return SandboxResult("unavailable", message=problem)
    _sweep_dead_runs()
    owner = sandbox_budget.owner()
    sandbox = tempfile.mkdtemp(prefix=f"{_SANDBOX_PREFIX}{owner}-")
    private = tempfile.mkdtemp(prefix=f"{_IO_PREFIX}{owner}-")  # captured output, the new root
    nonce = secrets.token_hex(16)
    budget = None
    try:
        harness = [os.path.realpath(sys.executable), "-I", "-S", "-B", "-X", "utf8", "-c"]
        limits = (memory_mb << 20, math.ceil(timeout_s) + 1)
        if isolation == ISOLATED:
            try:
                budget = sandbox_budget.create(limits[0], _MAX_TASKS)
            except OSError as exc:
                return SandboxResult("unavailable", message=f"no sandbox cgroup: {exc}")
            root = Path(private, "root")
            root.mkdir()
            # The first process joins the budget's cgroup(s), then becomes unshare: nothing
            # of the sandbox runs outside them.
            command = ["sh", "-c", _JOIN, "sh", *(budget.procs_files if budget else ()), "--"]
            command += [*_PARENT_DEATH, *_UNSHARE, "sh", "-c", _SETUP, "sh", str(root), sandbox]
            command += [f"{_TMPFS_MB}m", str(limits[0]), str(limits[1]), str(FILE_LIMIT)]
            command += [str(_MAX_PROCESSES), str(_PID_MAX), *_read_only_binds(), "--"]
            command += [*harness, _HARNESS, syscall_filter.bpf_program().hex(), _keyctl()]
            env, preexec = dict(_LAUNCH_ENV), None
        else:
            command = [*harness, _HARNESS]
            env = {"PATH": "/usr/bin:/bin", "HOME": sandbox, "TMPDIR": sandbox, "LC_ALL": "C.UTF-8"}
            # preexec_fn runs between fork and exec; ours takes no locks (setrlimit, prctl).
            preexec = functools.partial(_limit_child, *limits, _prctl())
        names = list(test_names) if test_names is not None else None
        payload = {"code": code, "tests": tests, "entry": entry, "names": names, "nonce": nonce}
        with (
            open(Path(private, "out"), "w+b") as stdout,
            open(Path(private, "err"), "w+b") as stderr,
        ):
            process = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=stdout,
                stderr=stderr,
                cwd=sandbox,
                env=env,
                start_new_session=True,
                preexec_fn=preexec,
            )
            timed_out = not _feed_and_wait(process, json.dumps(payload).encode(), timeout_s)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)  # unshare, and with it the namespace
            process.wait()
            err = _tail(stderr)
            exceeded = budget.exceeded() if budget is not None else None
            if exceeded == "memory":  # a kill for the whole sandbox's memory, whatever followed
                return SandboxResult("memory", message="the whole sandbox", stderr=err)
            if exceeded == "processes":
                message = f"process limit {_MAX_TASKS} (processes and threads) reached"
                return SandboxResult("processes", message=message, stderr=err)
            if timed_out:
                return SandboxResult("timeout", stderr=err)
            report, forged = _authentic_report(_tail(stdout), nonce)
        if report is None and forged:
            return SandboxResult("forged", message="a result the harness did not write", stderr=err)
        return _result(report, process.returncode, err, test_names)
    finally:
        if budget is not None:
            budget.close()
        shutil.rmtree(sandbox, ignore_errors=True)
        shutil.rmtree(private, ignore_errors=True)


@functools.cache
def _sweep_dead_runs() -> None:
    """Once per process, before its first sandbox: remove what sandboxes of evalkit processes
    that are gone left behind (a run killed outright runs no cleanup): their cgroups, killing
    anything still in them, and their temp dirs."""
    sandbox_budget.sweep()
    with contextlib.suppress(OSError):
        for entry in Path(tempfile.gettempdir()).iterdir():
            for prefix in (_SANDBOX_PREFIX, _IO_PREFIX):
                tag = sandbox_budget.owner_of(entry.name, prefix)
                if tag is not None and not sandbox_budget.owner_alive(tag):
                    shutil.rmtree(entry, ignore_errors=True)


@functools.cache
def _keyctl() -> str:
    """The ``keyctl`` system call's number here (the harness calls it once, before the filter)."""
    import pyseccomp

    return str(pyseccomp.resolve_syscall(pyseccomp.system_arch(), "keyctl"))


def _read_only_binds() -> list[str]:
    """Host paths the sandbox sees read-only: /usr, the top-level library and binary folders
    (symlinks into /usr on merged-/usr systems), and the Python installation."""
    paths = ["/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        if os.path.lexists(f"/{name}"):
            paths.append(f"/{name}")
    for prefix in {os.path.realpath(sys.base_prefix), os.path.realpath(sys.base_exec_prefix)}:
        if not any(prefix == p or prefix.startswith(p + "/") for p in paths):
            paths.append(prefix)
    return paths


def _feed_and_wait(process: subprocess.Popen[bytes], payload: bytes, timeout_s: float) -> bool:
    """Write the payload to the child's stdin (a pipe, closed after), then wait up to
    ``timeout_s`` for it to exit without reaping it. False on timeout."""
    assert process.stdin is not None
    os.set_blocking(process.stdin.fileno(), False)
    view, deadline = memoryview(payload), time.monotonic() + timeout_s
    try:
        while view:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            _, writable, _ = select.select([], [process.stdin], [], min(left, 0.5))
            if writable:
                try:
                    view = view[os.write(process.stdin.fileno(), view) :]
                except BrokenPipeError:
                    break
            elif process.poll() is not None:
                break
    finally:
        with contextlib.suppress(OSError):
            process.stdin.close()
    return _wait_unreaped(process, max(0.0, deadline - time.monotonic()))


def _wait_unreaped(process: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for the child to exit, *without reaping it*: while it is a zombie
    its process-group id cannot be reused, so killing the group afterwards is safe."""
    try:
        pidfd = os.pidfd_open(process.pid)
    except (AttributeError, OSError):  # not Linux >= 5.3: poll, reaping (tiny pid-reuse window)
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False
        return True
    try:
        poller = select.poll()  # not select.select: a busy runner may hold fds above 1024
        poller.register(pidfd, select.POLLIN)
        return bool(poller.poll(timeout_s * 1000))
    finally:
        os.close(pidfd)


@functools.cache
def _prctl() -> Any:
    """libc's ``prctl``, looked up here: the forked child must not import or load anything."""
    import ctypes

    return ctypes.CDLL(None, use_errno=True).prctl


def _limit_child(memory: int, cpu_seconds: int, prctl: Any) -> None:
    """``unsafe-local`` only; runs in the forked child before exec: only setrlimit calls, and
    the parent-death signal (the interpreter dies with the evalkit thread that started it)."""
    pr_set_pdeathsig = 1
    prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0)
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, FILE_LIMIT))
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))


def _result(
    report: dict[str, Any] | None,
    returncode: int,
    err: str,
    test_names: tuple[str, ...] | None,
) -> SandboxResult:
    if report is not None and report.get("status") == "ok":
        passed = tuple(str(n) for n in report.get("passed", []))
        failed = tuple((str(n), str(m)) for n, m in report.get("failed", []))
        reported = sorted([*passed, *(n for n, _ in failed)])
        if test_names is not None and reported != sorted(test_names):
            message = f"result names tests {reported[:5]}, expected {sorted(test_names)[:5]}"
            return SandboxResult("forged", message=message, stderr=err)
        return SandboxResult("ok", passed, failed, stderr=err)
    if report is not None:
        message = str(report.get("message", ""))
        return SandboxResult(str(report["status"]), message=message, stderr=err)
    if "MemoryError" in err:
        return SandboxResult("memory", stderr=err)
    if returncode < 0:
        name = signal.Signals(-returncode).name
        meaning = {
            "SIGXCPU": "CPU time limit exceeded",
            "SIGXFSZ": f"file size limit {FILE_LIMIT >> 20} MB exceeded",
            "SIGSEGV": "interpreter crashed (stack overflow?)",
        }.get(name, "interpreter killed")
        return SandboxResult("died", message=f"{meaning} ({name})", stderr=err)
    last = err.strip().splitlines()[-1:] or ["no output"]
    message = f"interpreter exited with code {returncode} before the tests finished: {last[0]}"
    return SandboxResult("died", message=message, stderr=err)


def _tail(file: Any, limit: int = 64 << 10) -> str:
    file.seek(0, os.SEEK_END)
    file.seek(max(0, file.tell() - limit))
    return file.read().decode("utf-8", "replace")


def _authentic_report(text: str, nonce: str) -> tuple[dict[str, Any] | None, bool]:
    """The last result line carrying ``nonce``, and whether any line looked like a result."""
    forged = False
    for line in reversed(text.strip().splitlines()):
        with contextlib.suppress(ValueError):
            value = json.loads(line)
            if isinstance(value, dict) and "status" in value:
                if value.get("nonce") == nonce and isinstance(value["status"], str):
                    return value, forged
                forged = True
    return None, forged


# The harness runs inside the sandboxed interpreter. Its main thread reads everything it needs
# from its stdin pipe and closes it, installs the audit hook, and never runs untrusted code: the
# code, the tests' import and each test run in short-lived worker threads, which hand back plain
# strings; what the main thread calls afterwards is bound before the code runs, and every object
# of the code's is kept alive so that no finalizer runs on it. The nonce lives only in the main
# thread's frame; the hook refuses, on every thread, new audit hooks, tracing, gc introspection
# and any frame whose chain reaches the harness or passes through a generator (see the harness's
# docstring), and /proc/self/mem however it is spelled.
_HARNESS = (Path(__file__).with_name("sandbox_harness.py")).read_text(encoding="utf-8")

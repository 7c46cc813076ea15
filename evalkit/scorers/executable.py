"""Executable scorers: run the generated code or SQL and check what it does.

``python_tests`` runs generated Python against the case's tests in a sandboxed subprocess;
``sql_result`` runs generated SQL against a fixture DuckDB database opened read-only and compares
result sets. Every failure mode fails the case with a one-line reason and lets the run go on.

What the Python sandbox does, in layers:

* a separate interpreter, ``python -I -S -B``: isolated mode (no ``PYTHON*`` variables, no user
  site, no script directory on ``sys.path``), no ``site`` (so only the standard library imports),
  no bytecode writes; a minimal environment (``PATH``, ``HOME`` and ``TMPDIR`` = the sandbox);
* a fresh ``tempfile.mkdtemp()`` as the working directory, removed afterwards;
* resource limits set before exec: address space (``RLIMIT_AS`` = ``memory_mb``), CPU seconds,
  file size, open files, no core dumps, and no new processes or threads (``RLIMIT_NPROC`` = 0;
  Linux ignores it for root);
* a wall-clock limit: the child runs in its own session and the whole process group is killed;
* an audit hook (:pep:`578`), installed before the untrusted code runs, that refuses network
  operations (``socket.connect``, ``bind``, ``getaddrinfo``, ``sendto`` …), spawning processes
  (``subprocess.Popen``, ``os.system``, ``os.exec*``, ``os.fork`` …), loading native code
  (``ctypes``), and writes outside the sandbox directory (``open`` with a write mode or flags,
  ``os.remove``/``rename``/``mkdir``/``chmod``/…, ``shutil.rmtree``/``copy*``/``move``, and
  handles on outside directories) after resolving symlinks. A refusal is recorded even if the
  code catches the exception, and fails the case.

This is defence in depth for *evaluating model output*, not a security boundary against a
determined attacker. Audit hooks run inside the same interpreter as the code they watch, and can be
bypassed: the classic way is ``ctypes`` (call libc directly, or clear the interpreter's hook list).
Importing ``ctypes`` is refused here, but the same reach is available through interpreter
internals, object/frame tricks or a crafted extension module; some operations raise no audit event
at all; reads are not restricted; the result channel can be forged; and for root
``RLIMIT_NPROC`` does nothing. For hostile code use OS isolation: an unprivileged user in Linux
namespaces (an empty network namespace, a read-only mount namespace with one writable tmpfs)
under a seccomp filter — e.g. nsjail, bubblewrap or gVisor — or a throwaway container or VM.

``sql_result`` relies on DuckDB itself, behind a first filter that accepts only a single
``SELECT`` statement: the database opens ``read_only=True`` with ``enable_external_access=false``
(no ATTACH of files, COPY, ``read_csv``, INSTALL/LOAD) and ``lock_configuration`` is set before
the query runs, so it cannot turn either back on. A runaway query is interrupted after
``timeout_s`` and a result is capped at 10,000 rows.
"""

from __future__ import annotations

import ast
import contextlib
import datetime as dt
import hashlib
import json
import math
import os
import re
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import uuid
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb

from evalkit.records import Output, Score
from evalkit.scorers.deterministic import _clip, _want
from evalkit.scorers.registry import (
    EXECUTABLE,
    ScoreFn,
    ScorerArgError,
    check,
    scorer,
    scorer_error,
)

_FENCE = re.compile(r"```[ \t]*([\w+.-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_MAX_ROWS = 10_000  # a query returning more rows fails rather than filling memory
_PAIRING_CAP = 250_000  # missing x extra rows compared within float tolerance, at most
_FILE_LIMIT = 16 << 20  # bytes any file (and the captured stdout/stderr) may reach
_REASON = 300


# --- python_tests ------------------------------------------------------------------------------


@dataclass(frozen=True)
class SandboxResult:
    """What happened to one sandboxed run: ``status`` is ``ok`` when the tests ran to the end.

    Other statuses: ``syntax``, ``crash`` (the code raised on import), ``entry`` (``entry`` not
    defined), ``timeout``, ``memory``, ``blocked`` (a refused operation), ``died`` (the
    interpreter ended without a result).
    """

    status: str
    passed: tuple[str, ...] = ()
    failed: tuple[tuple[str, str], ...] = ()
    message: str = ""
    stderr: str = field(default="", repr=False)


@scorer("python_tests", tier=EXECUTABLE, files=("tests",), primary="tests")
def python_tests(
    tests: Path | None = None,
    tests_inline: str | None = None,
    timeout_s: float = 10,
    memory_mb: int = 256,
    entry: str | None = None,
) -> ScoreFn:
    """Run the output's Python code, then every top-level ``test_*`` function of the tests.

    The code is the output's first ```python fenced block (or first unlabelled block), else the
    whole text. Tests come from ``tests``, a file relative to the corpus root, or from
    ``tests_inline``, their source in the YAML; give exactly one. Tests see the code's names
    directly and can also ``import solution``; a test passes when it returns without raising.
    ``entry`` names a function the code must define. Only the standard library is importable.
    Score is the fraction of tests passed; the case passes when all pass.
    """
    if (tests is None) == (tests_inline is None):
        raise ScorerArgError("python_tests: give exactly one of tests (a file) or tests_inline")
    _want("python_tests", "tests", tests, (str, Path, type(None)), "a file path")
    _want("python_tests", "tests_inline", tests_inline, (str, type(None)), "Python source")
    _want("python_tests", "timeout_s", timeout_s, (int, float), "a number of seconds")
    _want("python_tests", "memory_mb", memory_mb, int, "an integer number of MB")
    _want("python_tests", "entry", entry, (str, type(None)), "a function name")
    if not 0 < timeout_s <= 600:
        raise ScorerArgError(f"python_tests: timeout_s must be in (0, 600], got {timeout_s}")
    if not 64 <= memory_mb <= 65536:
        raise ScorerArgError(f"python_tests: memory_mb must be in [64, 65536], got {memory_mb}")
    if entry is not None and not entry.isidentifier():
        raise ScorerArgError(f"python_tests: entry {entry!r} is not a Python name")
    source = tests_inline if tests is None else _read_tests(Path(tests))
    _check_tests(source)

    def score(output: Output, case: object) -> Score:
        code = extract_code(output.text or "", ("python", "py", "python3"))
        if not code.strip():
            return check(False, "no code in output")
        try:
            result = run_python(code, source, timeout_s=timeout_s, memory_mb=memory_mb, entry=entry)
        except OSError as exc:
            return scorer_error(f"sandbox did not start: {exc}")
        return _judge(result, timeout_s, memory_mb)

    return score


def run_python(
    code: str, tests: str, *, timeout_s: float = 10, memory_mb: int = 256, entry: str | None = None
) -> SandboxResult:
    """Run ``code`` then the ``test_*`` functions of ``tests`` in the sandbox described above."""
    sandbox = tempfile.mkdtemp(prefix="evalkit-sandbox-")
    private = tempfile.mkdtemp(prefix="evalkit-io-")  # payload and captured output, not writable
    try:
        payload = Path(private, "in.json")
        payload.write_text(json.dumps({"code": code, "tests": tests, "entry": entry}))
        env = {"PATH": "/usr/bin:/bin", "HOME": sandbox, "TMPDIR": sandbox, "LC_ALL": "C.UTF-8"}
        command = [sys.executable, "-I", "-S", "-B", "-X", "utf8", "-c", _HARNESS]
        limits = (memory_mb << 20, math.ceil(timeout_s) + 1)
        with (
            payload.open("rb") as stdin,
            open(Path(private, "out"), "w+b") as stdout,
            open(Path(private, "err"), "w+b") as stderr,
        ):
            # preexec_fn runs between fork and exec. CPython warns it can deadlock when other
            # threads hold locks; ours takes none (no imports, only setrlimit). If that ever
            # bites, set the same limits first thing in the harness instead.
            process = subprocess.Popen(
                command,
                stdin=stdin,
                stdout=stdout,
                stderr=stderr,
                cwd=sandbox,
                env=env,
                start_new_session=True,
                preexec_fn=lambda: _limit_child(*limits),
            )
            timed_out = not _wait_unreaped(process, timeout_s)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)  # the child and anything it left behind
            process.wait()
            err = _tail(stderr)
            if timed_out:
                return SandboxResult("timeout", stderr=err)
            report = _last_json(_tail(stdout))
        return _result(report, process.returncode, err)
    finally:
        shutil.rmtree(sandbox, ignore_errors=True)
        shutil.rmtree(private, ignore_errors=True)


def extract_code(text: str, languages: tuple[str, ...]) -> str:
    """The first fenced block labelled with one of ``languages``, else the first unlabelled
    block, else the whole text (an unterminated fence runs to the end of the text).

    Examples:
        >>> extract_code("Here:\\n```python\\nprint(1)\\n```\\nDone.", ("python",))
        'print(1)\\n'
    """
    blocks = _FENCE.findall(text)
    for label, body in blocks:
        if label.lower() in languages:
            return body
    for label, body in blocks:
        if not label:
            return body
    return text


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


def _limit_child(memory: int, cpu_seconds: int) -> None:
    """Runs in the forked child before exec: only async-signal-safe-ish setrlimit calls."""
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (_FILE_LIMIT, _FILE_LIMIT))
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))


def _judge(result: SandboxResult, timeout_s: float, memory_mb: int) -> Score:
    status = result.status
    if status == "timeout":
        return check(False, f"timeout after {timeout_s:g}s (infinite loop?)")
    if status == "memory":
        return check(False, f"memory limit {memory_mb} MB exceeded")
    if status == "ok":
        total = len(result.passed) + len(result.failed)
        if total == 0:
            return check(False, "no test ran")
        if not result.failed:
            return check(True, f"{total}/{total} tests passed", 1.0)
        shown = "; ".join(f"{name}: {why}" for name, why in result.failed[:2])
        more = f" (+{len(result.failed) - 2} more)" if len(result.failed) > 2 else ""
        reason = f"{len(result.failed)}/{total} tests failed: {shown}{more}"
        return check(False, _clip(reason, _REASON), len(result.passed) / total)
    prefix = {"syntax": "syntax error in code: ", "crash": "code raised "}.get(status, "")
    return check(False, _clip(prefix + result.message, _REASON), status=status)


def _result(report: dict[str, Any] | None, returncode: int, err: str) -> SandboxResult:
    if report is not None and report.get("status") == "ok":
        failed = tuple((str(n), str(m)) for n, m in report.get("failed", []))
        return SandboxResult("ok", tuple(report.get("passed", [])), failed, stderr=err)
    if report is not None:
        message = str(report.get("message", ""))
        return SandboxResult(str(report["status"]), message=message, stderr=err)
    if "MemoryError" in err:
        return SandboxResult("memory", stderr=err)
    if returncode < 0:
        name = signal.Signals(-returncode).name
        meaning = {
            "SIGXCPU": "CPU time limit exceeded",
            "SIGXFSZ": f"file size limit {_FILE_LIMIT >> 20} MB exceeded",
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


def _last_json(text: str) -> dict[str, Any] | None:
    for line in reversed(text.strip().splitlines()):
        with contextlib.suppress(ValueError):
            value = json.loads(line)
            if isinstance(value, dict) and "status" in value:
                return value
    return None


def _read_tests(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ScorerArgError(f"python_tests: cannot read tests {path}: {exc}") from None


def _check_tests(source: str) -> None:
    try:
        tree = ast.parse(source, "tests")
    except SyntaxError as exc:
        raise ScorerArgError(f"python_tests: tests line {exc.lineno}: {exc.msg}") from None
    names = [
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
    ]
    if not names:
        raise ScorerArgError("python_tests: the tests define no top-level test_* function")


# The harness runs inside the sandboxed interpreter. It reads everything it needs first, installs
# the audit hook, then runs the untrusted code and the tests, and writes one JSON line to the
# original stdout (the code's own stdout is redirected to stderr).
_HARNESS = r"""
import gc, json, linecache, os, sys, traceback, types

def main():
    payload = json.loads(sys.stdin.read())
    result_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    root = os.path.realpath(os.getcwd())
    blocked = []
    reserve = [bytearray(1 << 20)]

    def report(status, **fields):
        reserve.clear()
        gc.collect()
        fields["status"] = status
        os.write(result_fd, (json.dumps(fields) + "\n").encode())
        os._exit(0)

    def outside(path, dir_fd=None):
        if isinstance(path, int):
            return False
        path = os.fsdecode(os.fspath(path))
        base = os.getcwd()
        if isinstance(dir_fd, int) and dir_fd >= 0:
            base = os.readlink("/proc/self/fd/%d" % dir_fd)
        real = os.path.realpath(os.path.join(base, path))
        return real != root and not real.startswith(root + os.sep) and real != "/dev/null"

    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    # event -> ((index of a path written, index of its dir_fd or None), ...)
    writes = {"os.remove": ((0, 1),), "os.rmdir": ((0, 1),), "os.mkdir": ((0, 2),),
              "os.chmod": ((0, 2),), "os.chown": ((0, 3),), "os.utime": ((0, 3),),
              "os.truncate": ((0, None),), "os.setxattr": ((0, None),),
              "os.removexattr": ((0, None),), "os.chflags": ((0, None),),
              "os.lchflags": ((0, None),), "os.rename": ((0, 2), (1, 3)),
              "os.link": ((1, 3),), "os.symlink": ((1, 2),), "shutil.rmtree": ((0, 1),),
              "shutil.chown": ((0, None),), "shutil.copyfile": ((1, None),),
              "shutil.copymode": ((1, None),), "shutil.copystat": ((1, None),),
              "shutil.copytree": ((1, None),), "shutil.move": ((0, None), (1, None)),
              "shutil.make_archive": ((0, None),), "sqlite3.connect": ((0, None),)}
    addressed = {"socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg"}
    net = addressed | {"socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyname_ex",
                       "socket.gethostbyaddr", "socket.getnameinfo"}
    spawn = {"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
             "os.fork", "os.forkpty", "pty.spawn", "os.kill", "os.killpg", "os.startfile"}

    def refuse(message):
        blocked.append(message)
        raise PermissionError("evalkit sandbox: " + message)

    def hook(event, args):
        if event == "open":
            path, mode, flags = args
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & write_flags)
            if writing and outside(path):
                refuse("write outside sandbox blocked: %s" % os.fsdecode(os.fspath(path)))
            # The event does not carry os.open's dir_fd, so a directory handle from outside could
            # aim a relative write anywhere: handles on outside directories are refused.
            if not writing and outside(path) and os.path.isdir(path):
                refuse("write outside sandbox blocked: directory handle %s" % os.fsdecode(path))
        elif event in writes:
            for at, fd_at in writes[event]:
                path = args[at] if at < len(args) else None
                if path is None or (event == "sqlite3.connect" and path in (":memory:", "")):
                    continue
                dir_fd = args[fd_at] if fd_at is not None and fd_at < len(args) else None
                if outside(path, dir_fd):
                    shown = path if isinstance(path, int) else os.fsdecode(os.fspath(path))
                    refuse("write outside sandbox blocked: %s (%s)" % (shown, event))
        elif event in net:
            target = args[1] if event in addressed else args[0]
            if isinstance(target, tuple):
                target = ":".join(str(part) for part in target[:2])
            refuse("network access blocked: %s %s" % (event, target))
        elif event in spawn:
            refuse("process spawning blocked: %s" % event)
        elif event.startswith("ctypes."):
            refuse("native code blocked: %s" % event)

    try:
        code = compile(payload["code"], "solution.py", "exec")
    except (SyntaxError, ValueError) as exc:
        line, why = getattr(exc, "lineno", "?"), getattr(exc, "msg", str(exc))
        report("syntax", message="line %s: %s" % (line, why))
    tests = compile(payload["tests"], "tests.py", "exec")
    for filename in ("solution.py", "tests.py"):  # so tracebacks can quote the failing line
        source = payload["code" if filename == "solution.py" else "tests"]
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    module = types.ModuleType("solution")
    module.__file__ = os.path.join(root, "solution.py")
    sys.modules["solution"] = module
    sys.addaudithook(hook)

    def where(exc, filename):
        for frame in reversed(traceback.extract_tb(exc.__traceback__)):
            if frame.filename == filename:
                return " at line %s: %s" % (frame.lineno, (frame.line or "").strip())
        return ""

    def describe(exc, filename):
        try:
            detail = str(exc)
        except BaseException:
            detail = ""
        text = "%s: %s" % (type(exc).__name__, detail) if detail else type(exc).__name__
        return text[:200] + where(exc, filename)[:200]

    def stop_if_blocked():
        if blocked:
            report("blocked", message=blocked[0])

    try:
        exec(code, module.__dict__)
    except MemoryError:
        module.__dict__.clear()
        report("memory")
    except BaseException as exc:
        stop_if_blocked()
        report("crash", message=describe(exc, "solution.py"))
    stop_if_blocked()
    entry = payload["entry"]
    if entry and not callable(module.__dict__.get(entry)):
        report("entry", message="code does not define %s()" % entry)
    namespace = {k: v for k, v in module.__dict__.items() if not k.startswith("__")}
    namespace["__name__"] = "tests"
    try:
        exec(tests, namespace)
    except MemoryError:
        namespace.clear()
        report("memory")
    except BaseException as exc:
        stop_if_blocked()
        report("crash", message="the tests raised on import: " + describe(exc, "tests.py"))
    passed, failed = [], []
    for name, fn in list(namespace.items()):
        if not (name.startswith("test_") and callable(fn)):
            continue
        try:
            fn()
            passed.append(name)
        except MemoryError:
            namespace.clear()
            module.__dict__.clear()
            report("memory")
        except BaseException as exc:
            failed.append((name, describe(exc, "tests.py")))
        stop_if_blocked()
    report("ok", passed=passed, failed=failed)

main()
"""


# --- sql_result --------------------------------------------------------------------------------

_SAFE_CONFIG = {
    "enable_external_access": False,  # no file ATTACH, COPY, read_csv/parquet/json, INSTALL
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "memory_limit": "1GB",
    "python_enable_replacements": False,  # no scanning of Python variables by table name
}


class QueryError(Exception):
    """The SQL could not run (refused, invalid, failed or too slow); the message is one line."""


@scorer("sql_result", tier=EXECUTABLE, files=("db",))
def sql_result(
    db: Path,
    expected: list[list[Any]] | None = None,
    expected_sql: str | None = None,
    ordered: bool = False,
    float_tolerance: float = 1e-9,
    timeout_s: float = 10,
) -> ScoreFn:
    """Run the output's SQL on the fixture DuckDB database ``db`` and compare the result rows with
    ``expected`` (a list of rows, each a list of values) or with the rows of ``expected_sql``.

    ``db`` is a ``.duckdb`` file, or a ``.sql`` script that builds the database once into a cache
    file keyed by its sha256. The SQL is the output's first ```sql fenced block (or first
    unlabelled block), else the whole text; it must be a single ``SELECT`` statement, and runs
    read-only with file access disabled, interrupted after ``timeout_s``. Rows compare as a
    multiset unless ``ordered``; column names are ignored. Numbers match within
    ``float_tolerance`` (absolute or relative; ``1 == 1.0``, NaN equals NaN), Decimals compare as
    floats, and dates and times as ISO strings, so YAML ``"2026-07-01"`` matches a DATE.
    """
    _want("sql_result", "db", db, (str, Path), "a file path")
    _want("sql_result", "expected", expected, (list, type(None)), "a list of rows")
    _want("sql_result", "expected_sql", expected_sql, (str, type(None)), "a SQL query")
    _want("sql_result", "ordered", ordered, bool, "true or false")
    _want("sql_result", "float_tolerance", float_tolerance, (int, float), "a number >= 0")
    _want("sql_result", "timeout_s", timeout_s, (int, float), "a number of seconds")
    if (expected is None) == (expected_sql is None):
        raise ScorerArgError("sql_result: give exactly one of expected or expected_sql")
    if not float_tolerance >= 0:
        raise ScorerArgError(f"sql_result: float_tolerance must be >= 0, got {float_tolerance}")
    if not 0 < timeout_s <= 600:
        raise ScorerArgError(f"sql_result: timeout_s must be in (0, 600], got {timeout_s}")
    path = _fixture_db(Path(db))
    if expected is not None:
        for i, row in enumerate(expected):
            _want("sql_result", f"expected[{i}]", row, list, "a list of column values")
        want = [_row(row) for row in expected]
    else:
        try:
            want = run_sql(path, str(expected_sql), timeout_s)
        except QueryError as exc:
            raise ScorerArgError(f"sql_result: expected_sql failed: {exc}") from None

    def score(output: Output, case: object) -> Score:
        sql = extract_code(output.text or "", ("sql", "duckdb", "postgresql"))
        try:
            got = run_sql(path, sql, timeout_s)
        except QueryError as exc:
            return check(False, _clip(f"query error: {exc}", _REASON))
        except duckdb.Error as exc:  # the fixture itself would not open: not the model's fault
            return scorer_error(f"fixture database {path.name}: {_first_line(exc)}")
        compare = _compare_ordered if ordered else _compare_multiset
        problem = compare(want, got, float_tolerance)
        if problem is None:
            kind = "in order" if ordered else "order-insensitive"
            return check(True, f"{_count(len(got), 'row')} match ({kind})", rows=len(got))
        return check(False, _clip(problem, _REASON), rows=len(got))

    return score


def run_sql(db: Path, sql: str, timeout_s: float = 10) -> list[tuple[Any, ...]]:
    """Rows of one read-only ``SELECT`` on ``db``; raises :class:`QueryError` with a one-line
    reason.

    Values are normalized for comparison (see ``sql_result``).
    """
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryError(_first_line(exc)) from None
    if len(statements) != 1:
        raise QueryError(f"expected one SQL statement, got {len(statements)}")
    kind = statements[0].type
    if kind != duckdb.StatementType.SELECT:
        raise QueryError(f"only a SELECT query may run, got {kind.name}")
    connection = _connect(db)
    timer = threading.Timer(timeout_s, connection.interrupt)
    timer.start()
    try:
        rows = connection.execute(sql).fetchmany(_MAX_ROWS + 1)
    except duckdb.InterruptException:
        raise QueryError(f"timeout after {timeout_s:g}s") from None
    except duckdb.Error as exc:
        raise QueryError(_first_line(exc)) from None
    finally:
        timer.cancel()
        connection.close()
    if len(rows) > _MAX_ROWS:
        raise QueryError(f"query returned more than {_MAX_ROWS} rows")
    return [_row(row) for row in rows]


def _connect(db: Path) -> duckdb.DuckDBPyConnection:
    """A read-only connection to ``db`` with external access off and the configuration locked."""
    connection = duckdb.connect(str(db), read_only=True, config=dict(_SAFE_CONFIG))
    # The progress bar is a per-connection option, so it is set here rather than in the config;
    # the lock is per database and may already be on from a concurrent connection.
    with contextlib.suppress(duckdb.Error):
        connection.execute("SET enable_progress_bar = false")
    with contextlib.suppress(duckdb.Error):
        connection.execute("SET lock_configuration = true")  # no query can SET anything back
    locked = connection.execute("SELECT current_setting('lock_configuration')").fetchone()
    if not locked or locked[0] is not True:
        connection.close()
        raise duckdb.InvalidInputException("could not lock the configuration of the fixture db")
    return connection


def _fixture_db(path: Path) -> Path:
    if path.suffix.lower() != ".sql":
        try:
            _connect(path).close()
        except duckdb.Error as exc:
            raise ScorerArgError(f"sql_result: cannot open {path}: {_first_line(exc)}") from None
        return path
    try:
        script = path.read_bytes()
    except OSError as exc:
        raise ScorerArgError(f"sql_result: cannot read {path}: {exc.strerror}") from None
    digest = hashlib.sha256(duckdb.__version__.encode() + b"\0" + script).hexdigest()
    target = Path(tempfile.gettempdir(), "evalkit-fixtures", f"{digest}.duckdb")
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{digest}.{uuid.uuid4().hex}.tmp")
    try:
        connection = duckdb.connect(str(partial), config={"enable_external_access": False})
        try:
            connection.execute(script.decode("utf-8"))
        finally:
            connection.close()
        os.replace(partial, target)  # atomic: concurrent builders write the same content
    except (duckdb.Error, UnicodeDecodeError) as exc:
        message = f"sql_result: fixture script {path.name}: {_first_line(exc)}"
        raise ScorerArgError(message) from None
    finally:
        for leftover in (partial, partial.with_name(partial.name + ".wal")):
            leftover.unlink(missing_ok=True)
    return target


def _row(row: Any) -> tuple[Any, ...]:
    return tuple(_value(v) for v in row)


def _value(value: Any) -> Any:
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, dt.date | dt.time):  # datetime is a date
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, list | tuple):
        return tuple(_value(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((str(k), _value(v)) for k, v in value.items()))
    return value


def _same(want: Any, got: Any, tolerance: float) -> bool:
    if isinstance(want, bool) or isinstance(got, bool):
        return type(want) is type(got) and want == got
    if isinstance(want, int | float) and isinstance(got, int | float):
        if math.isnan(want) or math.isnan(got):
            return math.isnan(want) and math.isnan(got)
        return math.isclose(want, got, rel_tol=tolerance, abs_tol=tolerance)
    if isinstance(want, tuple) and isinstance(got, tuple):
        return len(want) == len(got) and all(
            _same(w, g, tolerance) for w, g in zip(want, got, strict=True)
        )
    return type(want) is type(got) and want == got


def _key(value: Any) -> Any:
    """Hashable identity for exact multiset matching (True is not 1, NaN equals NaN)."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, float) and math.isnan(value):
        return ("nan",)
    if isinstance(value, tuple):
        return tuple(_key(v) for v in value)
    return value


def _compare_multiset(
    want: list[tuple[Any, ...]], got: list[tuple[Any, ...]], tolerance: float
) -> str | None:
    columns = _column_problem(want, got)
    if columns:
        return columns
    unmatched = Counter(_key(r) for r in got)
    missing: list[tuple[Any, ...]] = []
    for row in want:
        if unmatched[_key(row)] > 0:
            unmatched[_key(row)] -= 1
        else:
            missing.append(row)
    extra: list[tuple[Any, ...]] = []
    for row in got:  # the got rows no wanted row consumed
        if unmatched[_key(row)] > 0:
            unmatched[_key(row)] -= 1
            extra.append(row)
    if missing and extra and len(missing) * len(extra) <= _PAIRING_CAP:
        unpaired = []
        for row in missing:  # rows equal only within the float tolerance
            match = next((i for i, e in enumerate(extra) if _same(row, e, tolerance)), None)
            if match is None:
                unpaired.append(row)
            else:
                extra.pop(match)
        missing = unpaired
    if not missing and not extra:
        return None
    parts = [f"expected {_count(len(want), 'row')}, got {len(got)}"]
    if missing:
        parts.append(f"missing {len(missing)}: {_rows(missing)}")
    if extra:
        parts.append(f"extra {len(extra)}: {_rows(extra)}")
    return "; ".join(parts)


def _compare_ordered(
    want: list[tuple[Any, ...]], got: list[tuple[Any, ...]], tolerance: float
) -> str | None:
    columns = _column_problem(want, got)
    if columns:
        return columns
    for i, (w, g) in enumerate(zip(want, got, strict=False), 1):
        if not _same(w, g, tolerance):
            return f"row {i}: expected {_rows([w])}, got {_rows([g])}"
    if len(want) != len(got):
        more, rows = ("missing", want) if len(want) > len(got) else ("extra", got)
        tail = rows[min(len(want), len(got)) :]
        return f"expected {_count(len(want), 'row')}, got {len(got)}; {more}: {_rows(tail)}"
    return None


def _column_problem(want: list[tuple[Any, ...]], got: list[tuple[Any, ...]]) -> str | None:
    if want and got and len(want[0]) != len(got[0]):
        return f"expected {len(want[0])} columns, got {len(got[0])}: first row {_rows(got[:1])}"
    return None


def _rows(rows: list[tuple[Any, ...]], limit: int = 3) -> str:
    shown = ", ".join(
        _clip(json.dumps(list(r), default=str, ensure_ascii=False), 80) for r in rows[:limit]
    )
    return shown + (f" (+{len(rows) - limit} more)" if len(rows) > limit else "")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__

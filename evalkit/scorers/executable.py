"""Executable scorers: run the generated code or SQL and check what it does.

``python_tests`` runs generated Python against the case's tests in a sandboxed subprocess;
``sql_result`` runs generated SQL against a fixture DuckDB database opened read-only and compares
result sets. Every failure mode fails the case with a one-line reason and lets the run go on.

The Python sandbox (Linux namespaces, a read-only private filesystem, no parent environment,
limits, an authenticated result) is described in :mod:`evalkit.scorers.sandbox`; it fails closed
when isolation is unavailable. Reasons are scrubbed of registered secrets before they leave.

``sql_result`` relies on DuckDB itself, behind a first filter that accepts only a single
``SELECT`` statement: the database opens ``read_only=True`` with ``enable_external_access=false``
(no ATTACH of files, COPY, ``read_csv``, INSTALL/LOAD) and ``lock_configuration`` is set before
the query runs, so it cannot turn either back on. A runaway query is interrupted after
``timeout_s`` and a result is capped at 10,000 rows.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import datetime as dt
import hashlib
import json
import math
import os
import re
import tempfile
import threading
import uuid
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb

from evalkit.records import Output, Score
from evalkit.redact import redact_secrets
from evalkit.scorers.deterministic import _clip, _want
from evalkit.scorers.registry import (
    EXECUTABLE,
    ScoreFn,
    ScorerArgError,
    check,
    scorer,
    scorer_error,
)
from evalkit.scorers.sandbox import ISOLATED, UNSAFE_LOCAL, SandboxResult, run_python

_FENCE = re.compile(r"```[ \t]*([\w+.-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_MAX_ROWS = 10_000  # a query returning more rows fails rather than filling memory
_PAIRING_CAP = 250_000  # missing x extra rows compared within float tolerance, at most
_MAX_RESULT_BYTES = 64 << 20  # text and blob bytes a query result may hold, at most
_REASON = 300


# --- python_tests ------------------------------------------------------------------------------


@scorer("python_tests", tier=EXECUTABLE, files=("tests",), primary="tests")
def python_tests(
    tests: Path | None = None,
    tests_inline: str | None = None,
    timeout_s: float = 10,
    memory_mb: int = 256,
    entry: str | None = None,
    sandbox: str = ISOLATED,
) -> ScoreFn:
    """Run the output's Python code, then every top-level ``test_*`` function of the tests.

    The code is the output's first ```python fenced block (or first unlabelled block), else the
    whole text. Tests come from ``tests``, a file relative to the corpus root, or from
    ``tests_inline``, their source in the YAML; give exactly one. Tests see the code's names
    directly and can also ``import solution``; a test passes when it returns without raising.
    ``entry`` names a function the code must define. Only the standard library is importable.
    Score is the fraction of tests passed; the case passes when all pass.

    The code runs in Linux namespaces (:mod:`evalkit.scorers.sandbox`); where they are
    unavailable every case is a scorer error naming why. ``sandbox: unsafe-local`` runs it with
    no isolation, for trusted code only: every reason then starts with ``[UNSAFE-LOCAL]``.
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
    if sandbox not in (ISOLATED, UNSAFE_LOCAL):
        raise ScorerArgError(
            f"python_tests: sandbox must be {ISOLATED} or {UNSAFE_LOCAL}, got {sandbox!r}"
        )
    source = _read_tests(Path(tests)) if tests is not None else tests_inline or ""
    names = _check_tests(source)
    label = "[UNSAFE-LOCAL] " if sandbox == UNSAFE_LOCAL else ""

    def score(output: Output, case: object) -> Score:
        code = extract_code(output.text or "", ("python", "py", "python3"))
        if not code.strip():
            return check(False, "no code in output")
        try:
            result = run_python(
                code,
                source,
                timeout_s=timeout_s,
                memory_mb=memory_mb,
                entry=entry,
                test_names=names,
                isolation=sandbox,
            )
        except OSError as exc:
            return scorer_error(redact_secrets(f"{label}sandbox did not start: {exc}"))
        judged = _judge(result, timeout_s, memory_mb)
        reason = _clip(redact_secrets(label + judged.reason), _REASON)
        return dataclasses.replace(judged, reason=reason)

    return score


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


def _judge(result: SandboxResult, timeout_s: float, memory_mb: int) -> Score:
    status = result.status
    if status == "timeout":
        return check(False, f"timeout after {timeout_s:g}s (infinite loop?)")
    if status == "memory":
        whole = " by the whole sandbox" if result.message == "the whole sandbox" else ""
        return check(False, f"memory limit {memory_mb} MB exceeded{whole}")
    if status == "processes":
        return check(False, result.message, status=status)
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
    if status == "unavailable":
        message = f"sandbox unavailable, code not run: {result.message}"
        return scorer_error(message + " (sandbox: unsafe-local runs trusted code unisolated)")
    if status == "forged":
        return check(
            False, _clip(f"forged result rejected: {result.message}", _REASON), status=status
        )
    prefix = {"syntax": "syntax error in code: ", "crash": "code raised "}.get(status, "")
    return check(False, _clip(prefix + result.message, _REASON), status=status)


def _read_tests(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ScorerArgError(f"python_tests: cannot read tests {path}: {exc}") from None


def _check_tests(source: str) -> tuple[str, ...]:
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
    return tuple(dict.fromkeys(names))


# --- sql_result --------------------------------------------------------------------------------

_SAFE_CONFIG: dict[str, str | bool] = {
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
        rows = _fetch_bounded(connection.execute(sql))
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


def _fetch_bounded(cursor: duckdb.DuckDBPyConnection) -> list[tuple[Any, ...]]:
    """At most ``_MAX_ROWS + 1`` rows, fetched in batches; raises when their text and blob
    values pass ``_MAX_RESULT_BYTES`` (a few huge strings fill memory as surely as many rows)."""
    rows: list[tuple[Any, ...]] = []
    size = 0
    while len(rows) <= _MAX_ROWS:
        batch = cursor.fetchmany(min(32, _MAX_ROWS + 1 - len(rows)))
        if not batch:
            break
        for row in batch:
            size += sum(len(v) for v in row if isinstance(v, str | bytes))
        if size > _MAX_RESULT_BYTES:
            raise QueryError(f"query result holds more than {_MAX_RESULT_BYTES >> 20} MB of text")
        rows.extend(batch)
    return rows


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

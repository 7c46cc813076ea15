"""Executable scorers: the Python sandbox contains hostile code and the run goes on; SQL runs on a
read-only fixture database that no query can change."""

from __future__ import annotations

import hashlib
import socket
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import pytest

from evalkit.records import Output, Score
from evalkit.scorers import executable
from evalkit.scorers.registry import SCORERS, Scorer, ScorerArgError, build_scorer

if TYPE_CHECKING:  # the fixture's type (tests/scorers/conftest.py)
    from conftest import Listener

TESTS = textwrap.dedent(
    """\
    def test_small():
        assert add(1, 2) == 3

    def test_zero():
        assert add(0, 0) == 0

    def test_negative():
        from solution import add as imported
        assert imported(-2, 1) == -1
    """
)
GOOD = "Here you go:\n```python\ndef add(a, b):\n    return a + b\n```\nHope it helps."
BUGGY = "def add(a, b):\n    return a + b if a > 0 else 1\n"


@pytest.fixture
def resolve(tmp_path: Path) -> Callable[[str], Path]:
    return lambda name: tmp_path / name


def python_scorer(**args: Any) -> Scorer:
    return build_scorer("python_tests", {"tests_inline": TESTS, "timeout_s": 1, **args})


def score(scorer: Scorer, text: str) -> Score:
    return scorer(Output(text), None)


# --- python_tests: results ---------------------------------------------------------------------


def test_correct_code_passes() -> None:
    result = score(python_scorer(), GOOD)
    assert (result.passed, result.score, result.reason) == (True, 1.0, "3/3 tests passed")


def test_failing_tests_fail_with_the_test_name_and_line() -> None:
    result = score(python_scorer(), BUGGY)
    assert not result.passed
    assert result.score == pytest.approx(1 / 3)
    assert result.reason == (
        "2/3 tests failed: test_zero: AssertionError at line 5: assert add(0, 0) == 0; "
        "test_negative: AssertionError at line 9: assert imported(-2, 1) == -1"
    )


def test_tests_can_come_from_a_file_under_the_corpus_root(
    tmp_path: Path, resolve: Callable[[str], Path]
) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests/add_test.py").write_text(TESTS)
    scorer = build_scorer("python_tests", {"tests": "tests/add_test.py", "timeout_s": 2}, resolve)
    assert score(scorer, GOOD).passed
    assert scorer.file_hashes == {"tests/add_test.py": hashlib.sha256(TESTS.encode()).hexdigest()}
    assert SCORERS["python_tests"].tier == 1


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("def add(a, b)\n    return a + b\n", "syntax error in code: line 1: expected ':'"),
        ("1 / 0\n", "code raised ZeroDivisionError: division by zero at line 1: 1 / 0"),
        ("", "no code in output"),
        ("def plus(a, b):\n    return a + b\n", "code does not define add()"),
        ("import sys\nsys.exit(3)\n", "code raised SystemExit: 3 at line 2: sys.exit(3)"),
        (
            "import os\nos._exit(0)\n",
            "interpreter exited with code 0 before the tests finished: no output",
        ),
    ],
)
def test_broken_code_fails_with_a_reason(text: str, reason: str) -> None:
    result = score(python_scorer(entry="add"), text)
    assert (result.passed, result.reason, result.error) == (False, reason, False)


def test_printing_a_fake_result_does_not_pass() -> None:
    fake = '{"status": "ok", "passed": ["test_small"], "failed": []}'
    text = f"print({fake!r})\nimport os\nos.write(1, b{fake!r})\n" + BUGGY
    assert not score(python_scorer(), text).passed


def test_the_code_runs_in_a_fresh_temp_dir_that_is_removed_afterwards() -> None:
    code = textwrap.dedent(
        """\
        import os, tempfile
        open("scratch.txt", "w").write("writes inside the sandbox are fine")
        fd, name = tempfile.mkstemp()  # TMPDIR is the sandbox too
        os.close(fd)
        """
    )
    tests = "import os\ndef test_where():\n    assert False, os.getcwd()\n"
    scorer = build_scorer("python_tests", {"tests_inline": tests, "timeout_s": 2})
    reason = score(scorer, code).reason
    assert reason.startswith("1/1 tests failed: test_where: AssertionError: ")
    cwd = Path(reason.split("AssertionError: ")[1].split(" at line")[0])
    assert cwd.name.startswith("evalkit-sandbox-")
    assert not cwd.exists()


# --- python_tests: the sandbox contains hostile code, and the run goes on ------------------------


def test_infinite_loop_times_out_and_the_run_goes_on() -> None:
    scorer = python_scorer()
    result = score(scorer, "def add(a, b):\n    while True:\n        pass\n")
    assert (result.passed, result.reason) == (False, "timeout after 1s (infinite loop?)")
    assert score(scorer, GOOD).passed


def test_sleeping_forever_is_killed_by_wall_time() -> None:
    result = score(python_scorer(), "import time\ntime.sleep(60)\n")
    assert result.reason == "timeout after 1s (infinite loop?)"


@pytest.mark.parametrize(
    "hog",
    [
        "blob = bytearray(8 * 1024 ** 3)\n",
        "chunks = []\nwhile True:\n    chunks.append(bytearray(1 << 20))\n",
    ],
)
def test_memory_hog_hits_the_limit_and_the_run_goes_on(hog: str) -> None:
    # a wall budget far above what reaching 128 MB takes: at load 10 the sandbox's start-up
    # alone took more than the default 1 s here, and the hog then read as a timeout
    scorer = python_scorer(memory_mb=128, timeout_s=30)
    result = score(scorer, hog)
    assert (result.passed, result.reason) == (False, "memory limit 128 MB exceeded")
    assert score(scorer, GOOD).passed


def test_network_is_blocked_before_connecting_and_the_run_goes_on(listener: Listener) -> None:
    port = listener.port
    code = textwrap.dedent(
        f"""\
        import socket
        client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:  # hostile code that swallows the refusal is still caught
            client.connect(("127.0.0.1", {port}))
            client.sendall(b"exfiltrate")
        except OSError:
            pass
        def add(a, b):
            return a + b
        """
    )
    scorer = python_scorer()
    result = score(scorer, code)
    assert not result.passed
    assert result.reason == f"network access blocked: socket.connect 127.0.0.1:{port}"
    assert listener.connections() == 0  # the connect never happened
    socket.create_connection(("127.0.0.1", port), timeout=1).close()  # control: it would show
    time.sleep(0.05)
    assert listener.connections() == 1
    assert score(scorer, GOOD).passed


@pytest.mark.parametrize(
    "code",
    [
        "import urllib.request\nurllib.request.urlopen('http://example.invalid/')\n",
        "import socket\nsocket.getaddrinfo('example.invalid', 80)\n",
        "import socket\nsocket.create_connection(('127.0.0.1', 9))\n",
        "import socket\ns = socket.socket()\ns.bind(('127.0.0.1', 0))\n",
    ],
)
def test_name_lookups_and_listening_are_blocked_too(code: str) -> None:
    assert score(python_scorer(), code).reason.startswith("network access blocked: socket.")


def test_write_outside_the_sandbox_is_blocked_and_the_run_goes_on(tmp_path: Path) -> None:
    target = tmp_path / "escape.txt"
    code = f"try:\n    open({str(target)!r}, 'w').write('x')\nexcept OSError:\n    pass\n"
    scorer = python_scorer()
    result = score(scorer, code + "def add(a, b):\n    return a + b\n")
    assert (result.passed, result.reason) == (False, f"write outside sandbox blocked: {target}")
    assert not target.exists()
    assert score(scorer, GOOD).passed


@pytest.mark.parametrize(
    ("code", "event"),
    [
        ("import os\nos.remove(KEEP)\n", "os.remove"),
        ("import os\nos.rename(KEEP, KEEP + '.moved')\n", "os.rename"),
        ("import shutil\nshutil.rmtree(DIR)\n", "shutil.rmtree"),
        ("import os\nos.chdir(DIR)\nos.symlink('/etc/hostname', 'link')\n", "os.symlink"),
        ("import pathlib\npathlib.Path(KEEP).write_text('overwritten')\n", None),
        (  # a relative write through a directory handle from outside
            "import os\nfd = os.open(DIR, os.O_RDONLY)\n"
            "os.close(os.open('keep.txt', os.O_WRONLY | os.O_TRUNC, dir_fd=fd))\n",
            None,
        ),
        ("import os\nos.close(os.open(KEEP, os.O_WRONLY | os.O_TRUNC))\n", None),
    ],
)
def test_changing_files_outside_the_sandbox_is_blocked(
    tmp_path: Path, code: str, event: str | None
) -> None:
    keep = tmp_path / "keep" / "keep.txt"
    keep.parent.mkdir()
    keep.write_text("original")
    prelude = f"KEEP = {str(keep)!r}\nDIR = {str(keep.parent)!r}\n"
    result = score(python_scorer(), prelude + code)
    # The audit hook names the refusal; where it is not consulted (chdir first), the outside
    # directory is simply absent from the sandbox's private view of the filesystem.
    absent = (
        f"code raised FileNotFoundError: [Errno 2] No such file or directory: {str(keep.parent)!r}"
    )
    assert result.reason.startswith(("write outside sandbox blocked: ", absent))
    if event is not None and not result.reason.startswith(absent):
        assert result.reason.endswith(f"({event})")
    assert keep.read_text() == "original"
    assert sorted(p.name for p in keep.parent.iterdir()) == ["keep.txt"]


def test_a_symlink_inside_the_sandbox_does_not_lead_outside(tmp_path: Path) -> None:
    target = tmp_path / "through-link.txt"
    code = (
        f"import os\nos.symlink({str(tmp_path)!r}, 'out')\n"
        "open('out/through-link.txt', 'w').write('x')\n"
    )
    result = score(python_scorer(), code)
    assert result.reason == "write outside sandbox blocked: out/through-link.txt"
    assert not target.exists()


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        ("import subprocess\nsubprocess.run(['touch', MARK])\n", "subprocess.Popen"),
        ("import os\nos.system('touch ' + MARK)\n", "os.system"),
        ("import os\nos.execv('/usr/bin/touch', ['touch', MARK])\n", "os.exec"),
        ("import os\nif os.fork() == 0:\n    open(MARK, 'w')\n", "os.fork"),
    ],
)
def test_spawning_processes_is_blocked(tmp_path: Path, code: str, reason: str) -> None:
    mark = tmp_path / "spawned"
    result = score(python_scorer(), f"MARK = {str(mark)!r}\n" + code)
    assert result.reason == f"process spawning blocked: {reason}"
    assert not mark.exists()


def test_ctypes_is_blocked() -> None:
    result = score(python_scorer(), "import ctypes\nctypes.CDLL(None).system(b'true')\n")
    assert result.reason == "native code blocked: ctypes.dlopen"


def test_hostile_cases_one_after_another_then_a_normal_case_passes(
    tmp_path: Path, listener: Listener
) -> None:
    scorer = python_scorer(memory_mb=128)
    port = listener.port
    hostile = [
        "while True:\n    pass\n",
        "x = bytearray(8 * 1024 ** 3)\n",
        f"import socket\nsocket.create_connection(('127.0.0.1', {port}))\n",
        f"open({str(tmp_path / 'x')!r}, 'w')\n",
    ]
    reasons = [score(scorer, code).reason for code in hostile]
    assert [r.split(":")[0] for r in reasons] == [
        "timeout after 1s (infinite loop?)",
        "memory limit 128 MB exceeded",
        "network access blocked",
        "write outside sandbox blocked",
    ]
    assert score(scorer, GOOD).passed
    assert listener.connections() == 0
    assert not (tmp_path / "x").exists()


# --- python_tests: arguments -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({}, "give exactly one of tests (a file) or tests_inline"),
        ({"tests": "a.py", "tests_inline": TESTS}, "give exactly one of tests"),
        ({"tests_inline": "def helper():\n    pass\n"}, "the tests define no top-level test_*"),
        ({"tests_inline": "def test_x(:\n"}, "python_tests: tests line 1: "),
        ({"tests_inline": TESTS, "timeout_s": 0}, "timeout_s must be in (0, 600], got 0"),
        ({"tests_inline": TESTS, "memory_mb": 16}, "memory_mb must be in [64, 65536], got 16"),
        ({"tests_inline": TESTS, "entry": "not a name"}, "entry 'not a name' is not a Python"),
        ({"tests_inline": TESTS, "timeout": 3}, "bad args for scorer 'python_tests'"),
    ],
)
def test_python_tests_bad_args_fail_at_load(args: dict[str, Any], message: str) -> None:
    with pytest.raises(ScorerArgError, match=None) as info:
        build_scorer("python_tests", args)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("```python\nA\n```\n```python\nB\n```", "A\n"),
        ("```bash\nls\n```\n```\nB\n```", "B\n"),
        ("```py\nA", "A"),  # cut off before the closing fence
        ("plain code", "plain code"),
    ],
)
def test_extract_code(text: str, code: str) -> None:
    assert executable.extract_code(text, ("python", "py")) == code


# --- sql_result --------------------------------------------------------------------------------

SCRIPT = textwrap.dedent(
    """\
    CREATE TABLE orders (order_id INTEGER, customer VARCHAR, total DECIMAL(10, 2),
                         ratio DOUBLE, placed DATE, paid BOOLEAN);
    INSERT INTO orders VALUES
      (8812, 'ana', 19.99, 0.1, DATE '2026-07-01', true),
      (8813, 'bo',  5.00,  0.2, DATE '2026-07-02', false),
      (8814, 'ana', 7.50,  0.3, DATE '2026-07-03', true);
    """
)
BY_CUSTOMER = [["ana", 27.49], ["bo", 5]]


@pytest.fixture
def fixtures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A corpus root with the fixture script; the build cache goes to a private temp dir."""
    cache = tmp_path / "systemp"
    cache.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(cache))
    root = tmp_path / "corpus"
    root.mkdir()
    (root / "orders.sql").write_text(SCRIPT)
    return root


def sql_scorer(root: Path, **args: Any) -> Scorer:
    return build_scorer("sql_result", {"db": "orders.sql", **args}, lambda name: root / name)


def _built_db() -> Path:
    (path,) = Path(tempfile.gettempdir(), "evalkit-fixtures").glob("*.duckdb")
    return path


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_sql_result_passes_in_any_row_order(fixtures: Path) -> None:
    scorer = sql_scorer(fixtures, expected=BY_CUSTOMER)
    text = "```sql\nSELECT customer, sum(total) FROM orders GROUP BY customer ORDER BY 1 DESC\n```"
    result = score(scorer, text)
    assert (result.passed, result.reason) == (True, "2 rows match (order-insensitive)")
    assert SCORERS["sql_result"].tier == 1


def test_ordered_comparison_reports_the_first_differing_row(fixtures: Path) -> None:
    scorer = sql_scorer(fixtures, expected=BY_CUSTOMER, ordered=True)
    assert score(scorer, "SELECT customer, sum(total) FROM orders GROUP BY 1 ORDER BY 1").passed
    result = score(scorer, "SELECT customer, sum(total) FROM orders GROUP BY 1 ORDER BY 1 DESC")
    assert (result.passed, result.reason) == (
        False,
        'row 1: expected ["ana", 27.49], got ["bo", 5.0]',
    )
    short = score(scorer, "SELECT 'ana', 27.49")
    assert short.reason == 'expected 2 rows, got 1; missing: ["bo", 5]'


def test_wrong_rows_show_a_small_diff(fixtures: Path) -> None:
    scorer = sql_scorer(fixtures, expected=BY_CUSTOMER)
    result = score(scorer, "SELECT customer, sum(total) FROM orders WHERE paid GROUP BY 1")
    assert result.reason == 'expected 2 rows, got 1; missing 1: ["bo", 5]'
    result = score(scorer, "SELECT customer, total FROM orders")
    assert result.reason == (
        'expected 2 rows, got 3; missing 1: ["ana", 27.49]; extra 2: ["ana", 19.99], ["ana", 7.5]'
    )
    result = score(scorer, "SELECT customer FROM orders")
    assert result.reason == 'expected 2 columns, got 1: first row ["ana"]'


def test_rows_are_a_multiset_duplicates_count(fixtures: Path) -> None:
    scorer = sql_scorer(fixtures, expected=[["ana"], ["ana"], ["bo"]])
    assert score(scorer, "SELECT customer FROM orders").passed
    result = score(scorer, "SELECT DISTINCT customer FROM orders")
    assert result.reason == 'expected 3 rows, got 2; missing 1: ["ana"]'


def test_float_tolerance(fixtures: Path) -> None:
    text = "SELECT sum(ratio) FROM orders WHERE order_id < 8814"  # 0.1 + 0.2 in DOUBLE
    assert score(sql_scorer(fixtures, expected=[[0.3]]), text).passed
    exact = score(sql_scorer(fixtures, expected=[[0.3]], float_tolerance=0), text)
    assert not exact.passed
    assert exact.reason.startswith("expected 1 row, got 1; missing 1: [0.3]; extra 1: [0.3000000")
    loose = sql_scorer(fixtures, expected=BY_CUSTOMER, float_tolerance=0.01)
    assert score(loose, "SELECT customer, sum(total) + 0.005 FROM orders GROUP BY 1").passed
    assert not score(loose, "SELECT customer, sum(total) + 0.5 FROM orders GROUP BY 1").passed


def test_values_normalize_but_booleans_are_not_numbers(fixtures: Path) -> None:
    dates = sql_scorer(fixtures, expected=[["2026-07-01", 8812]])
    assert score(dates, "SELECT min(placed), min(order_id)::BIGINT FROM orders").passed
    flags = sql_scorer(fixtures, expected=[[1]])
    assert not score(flags, "SELECT bool_and(paid OR true) FROM orders").passed
    assert score(sql_scorer(fixtures, expected=[[True]]), "SELECT bool_or(paid) FROM orders").passed


def test_expected_sql_is_run_at_load_and_compared(fixtures: Path) -> None:
    scorer = sql_scorer(fixtures, expected_sql="SELECT order_id FROM orders WHERE customer = 'ana'")
    assert score(scorer, "SELECT order_id FROM orders WHERE total > 6 ORDER BY 1 DESC").passed
    assert not score(scorer, "SELECT order_id FROM orders").passed


@pytest.mark.parametrize(
    "sql",
    [
        "DELETE FROM orders",
        "DROP TABLE orders",
        "INSERT INTO orders VALUES (1, 'x', 1, 1, DATE '2026-01-01', true)",
        "UPDATE orders SET total = 0",
        "CREATE TABLE stolen AS SELECT * FROM orders",
        "ATTACH 'other.duckdb' AS other",
        "COPY orders TO 'dump.csv'",
        "SELECT 1; DELETE FROM orders",
        "INSTALL httpfs",
        "LOAD httpfs",
        "SET enable_external_access = true",
        "CHECKPOINT",
    ],
)
def test_sql_result_cannot_modify_the_fixture_database(fixtures: Path, sql: str) -> None:
    scorer = sql_scorer(fixtures, expected=[[3]])
    built = _built_db()
    before = _sha256(built)
    result = score(scorer, sql)
    assert (result.passed, result.error) == (False, False)
    assert result.reason.startswith("query error: ")
    assert _sha256(built) == before
    assert score(scorer, "SELECT count(*) FROM orders").passed
    assert not (fixtures / "dump.csv").exists()


@pytest.mark.parametrize(
    "sql",
    [
        "DELETE FROM orders",
        "DROP TABLE orders",
        "INSERT INTO orders VALUES (1, 'x', 1, 1, DATE '2026-01-01', true)",
        "CREATE TABLE stolen AS SELECT 1",
        "ATTACH 'other.duckdb' AS other",
        "COPY orders TO 'dump.csv'",
        "SELECT * FROM read_csv('/etc/passwd')",
        "SET enable_external_access = true",
    ],
)
def test_the_connection_itself_refuses_changes_and_file_access(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sql: str
) -> None:
    """The second layer, without the single-SELECT filter: a .duckdb fixture opened read-only."""
    db = tmp_path / "orders.duckdb"
    with duckdb.connect(str(db)) as connection:
        connection.execute(SCRIPT)
    before = _sha256(db)
    monkeypatch.chdir(tmp_path)
    connection = executable._connect(db)
    try:
        with pytest.raises(duckdb.Error):
            connection.execute(sql)
    finally:
        connection.close()
    assert _sha256(db) == before
    assert not (tmp_path / "dump.csv").exists()
    assert not (tmp_path / "other.duckdb").exists()
    scorer = build_scorer(
        "sql_result", {"db": "orders.duckdb", "expected": [[3]]}, tmp_path.joinpath
    )
    assert score(scorer, "SELECT count(*) FROM orders").passed


def test_a_reading_function_is_refused_by_the_connection(fixtures: Path) -> None:
    result = score(
        sql_scorer(fixtures, expected=[[1]]), "SELECT count(*) FROM read_csv('/etc/passwd')"
    )
    assert result.reason == (
        'query error: Permission Error: Cannot access file "/etc/passwd" - '
        "file system operations are disabled by configuration"
    )


def test_query_errors_and_timeouts_fail_with_one_line(fixtures: Path) -> None:
    scorer = sql_scorer(fixtures, expected=[[1]], timeout_s=0.3)
    assert score(scorer, "SELEC 1").reason == (
        'query error: Parser Error: syntax error at or near "SELEC"'
    )
    assert score(scorer, "SELECT nope FROM orders").reason.startswith(
        'query error: Binder Error: Referenced column "nope" not found'
    )
    assert "\n" not in score(scorer, "SELECT nope FROM orders").reason
    slow = score(scorer, "SELECT count(*) FROM range(1000000000000) a, range(100) b")
    assert slow.reason == "query error: timeout after 0.3s"  # it would never finish otherwise
    assert score(scorer, "").reason == "query error: expected one SQL statement, got 0"


def test_too_many_rows_fail_instead_of_filling_memory(fixtures: Path) -> None:
    scorer = sql_scorer(fixtures, expected=[[1]])
    assert score(scorer, "SELECT * FROM range(20000)").reason == (
        "query error: query returned more than 10000 rows"
    )


def test_the_script_is_built_once_into_a_cache_keyed_by_its_content(fixtures: Path) -> None:
    sql_scorer(fixtures, expected=[[1]])
    first = _built_db()
    mtime = first.stat().st_mtime_ns
    sql_scorer(fixtures, expected=[[1]])
    assert _built_db() == first
    assert first.stat().st_mtime_ns == mtime
    assert (
        first.stem
        == hashlib.sha256(duckdb.__version__.encode() + b"\0" + SCRIPT.encode()).hexdigest()
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({}, "sql_result: give exactly one of expected or expected_sql"),
        ({"expected": [[1]], "expected_sql": "SELECT 1"}, "give exactly one of expected"),
        ({"expected": [1, 2]}, "sql_result: expected[0] must be a list of column values"),
        ({"expected_sql": "SELECT nope"}, "sql_result: expected_sql failed: Binder Error"),
        ({"expected_sql": "DELETE FROM orders"}, "only a SELECT query may run, got DELETE"),
        ({"expected": [[1]], "float_tolerance": -1}, "float_tolerance must be >= 0, got -1"),
        ({"expected": [[1]], "ordered": "yes"}, "sql_result: ordered must be true or false"),
    ],
)
def test_sql_result_bad_args_fail_at_load(
    fixtures: Path, args: dict[str, Any], message: str
) -> None:
    with pytest.raises(ScorerArgError) as info:
        sql_scorer(fixtures, **args)
    assert message in str(info.value)


def test_a_broken_fixture_script_or_database_fails_at_load(fixtures: Path) -> None:
    (fixtures / "broken.sql").write_text("CREATE TABLE t (a INT);\nINSERT INTO nope VALUES (1);")
    (fixtures / "notadb.duckdb").write_text("this is not a database")
    resolve = fixtures.joinpath
    with pytest.raises(ScorerArgError, match=r"fixture script broken\.sql: Catalog Error"):
        build_scorer("sql_result", {"db": "broken.sql", "expected": [[1]]}, resolve)
    with pytest.raises(ScorerArgError, match=r"sql_result: cannot open .*notadb\.duckdb"):
        build_scorer("sql_result", {"db": "notadb.duckdb", "expected": [[1]]}, resolve)
    assert not list(Path(tempfile.gettempdir(), "evalkit-fixtures").glob("*.tmp*"))


def test_huge_string_results_are_refused_not_held(fixtures: Path) -> None:
    """Few rows, each a 30 MB string: the byte budget stops it, not the row cap."""
    scorer = sql_scorer(fixtures, expected=[[1]], timeout_s=20)
    result = score(scorer, "SELECT repeat('x', 30000000) FROM range(5)")
    assert result.reason == "query error: query result holds more than 64 MB of text"

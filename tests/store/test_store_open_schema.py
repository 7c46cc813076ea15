"""A store opened to write makes its tables (and the columns added since) when its file lacks
any, and runs no DDL at all when every table and column is there already: the statements are
counted on the connection, not timed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pytest

import evalkit.store.lock as lock
from evalkit.store import open_store
from tests.synthetic_runs import C, make_run, write_store

_connect = duckdb.connect  # the test's own connections, never counted


class _Counted:
    """A DuckDB connection that keeps the SQL of every ``execute``."""

    def __init__(self, con: duckdb.DuckDBPyConnection, sql: list[str]) -> None:
        self._con, self._sql = con, sql

    def execute(self, query: str, *args: Any) -> Any:
        self._sql.append(query)
        return self._con.execute(query, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)


@pytest.fixture()
def executed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The SQL each store opened from here on executes on its connections."""
    sql: list[str] = []
    monkeypatch.setattr(lock.duckdb, "connect", lambda *a, **k: _Counted(_connect(*a, **k), sql))
    return sql


def _ddl(sql: list[str]) -> list[str]:
    return [q for q in sql if "CREATE TABLE" in q or "ALTER TABLE" in q]


def test_a_current_store_is_opened_to_write_without_ddl(tmp_path: Path, executed: list[str]):
    db = tmp_path / "e.duckdb"
    write_store(db, [make_run("r1", [C("a", "p")])])
    executed.clear()
    with open_store(db, write=True) as store:
        store.set_warnings("r1", ["written without any DDL"])
    assert _ddl(executed) == []
    with open_store(db) as store:
        assert store.manifest("r1").warnings == ("written without any DDL",)


def test_a_new_or_older_store_gets_every_table_and_column(tmp_path: Path, executed: list[str]):
    db = tmp_path / "e.duckdb"
    with open_store(db, write=True):
        pass
    assert len(_ddl(executed)) == 1  # the whole DDL, one statement in one transaction
    con = _connect(str(db))  # as a store written before these columns and tables
    con.execute("ALTER TABLE scorings DROP COLUMN harness")
    con.execute("DROP TABLE history_usage")
    con.close()
    executed.clear()
    with open_store(db, write=True):
        pass
    assert len(_ddl(executed)) == 1
    with _connect(str(db), read_only=True) as con:
        columns = {r[0] for r in con.execute("DESCRIBE scorings").fetchall()}
        tables = {r[0] for r in con.execute("SHOW TABLES").fetchall()}
    assert "harness" in columns and "history_usage" in tables
    executed.clear()
    with open_store(db, write=True):  # now current: nothing made again
        pass
    assert _ddl(executed) == []

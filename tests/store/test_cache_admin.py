"""``evalkit cache stats`` and ``prune``: prune removes exactly the entries it names and never a
stored output; stats counts entries, bytes and per-suite cache hits from the outputs."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import duckdb
import polars as pl
import pytest
from synthetic_runs import C, make_run, write_store

from evalkit.cli import main
from evalkit.errors import EvalkitError
from evalkit.store import open_store


def _store(tmp_path: Path) -> Path:
    db = tmp_path / "s.duckdb"
    base = make_run("b1", [C(f"c{i}", "p") for i in range(4)], label="base")
    outputs = base.outputs.with_columns(
        request_hash=pl.Series([f"key-{i}" for i in range(4)]),
        cached=pl.Series([False, True, True, False]),
    )
    write_store(db, [base.__class__(**{**base.__dict__, "outputs": outputs})])
    with open_store(db, write=True) as store:
        store.cache_put({f"key-{i}": f'{{"text": "answer {i}"}}' for i in range(4)})
        store.cache_put({"other-config": '{"text": "x"}', "old-entry": '{"text": "y"}'})
    con = duckdb.connect(str(db))  # one entry from 40 days ago
    con.execute(
        "UPDATE response_cache SET created_at = ? WHERE cache_key = 'old-entry'",
        [dt.datetime.now(dt.UTC) - dt.timedelta(days=40)],
    )
    con.close()
    return db


def _keys(db: Path) -> set[str]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return {k for (k,) in con.execute("SELECT cache_key FROM response_cache").fetchall()}
    finally:
        con.close()


def test_prune_removes_exactly_what_it_names_and_never_an_output(tmp_path: Path, capsys) -> None:
    db = _store(tmp_path)
    with open_store(db, read_only=True) as store:
        outputs_before = store.outputs("b1")
        config_hash = store.runs()["config_hash"][0]
    assert main(["cache", "prune", "--older-than", "30d", "--db", str(db)]) == 0
    assert "pruned 1 cache entries (5 left)" in capsys.readouterr().out
    assert _keys(db) == {"key-0", "key-1", "key-2", "key-3", "other-config"}
    assert main(["cache", "prune", "--config", config_hash[:12], "--db", str(db)]) == 0
    assert _keys(db) == {"other-config"}  # the run's entries; another config's stay
    with open_store(db, read_only=True) as store:
        assert store.outputs("b1").equals(outputs_before)  # outputs untouched
    assert main(["cache", "prune", "--db", str(db)]) == 2
    assert "--older-than 30d and/or --config HASH" in capsys.readouterr().err


def test_stats_counts_entries_bytes_and_hits_per_suite(tmp_path: Path, capsys) -> None:
    db = _store(tmp_path)
    assert main(["cache", "stats", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("6 cache entries, 0.0 MiB")
    assert "suite demo: 2 of 4 stored outputs served from the cache (50.0%)" in out
    with open_store(db, read_only=True) as store:
        stats = store.cache_stats()
    assert stats["entries"] == 6 and stats["bytes"] == sum(
        len(v) for v in [f'{{"text": "answer {i}"}}' for i in range(4)] + ['{"text": "x"}'] * 2
    )


def test_stats_counts_utf8_bytes_of_json_with_escapes(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    entry = '{"text": "{\\"reason\\": \\"caf\u00e9\\"}"}'  # a judge's JSON inside JSON
    with open_store(db, write=True) as store:
        store.cache_put({"k": entry})
        assert store.cache_stats()["bytes"] == len(entry.encode()) == len(entry) + 1


def test_an_age_must_read_as_one() -> None:
    from evalkit.cli.cache import parse_age

    with pytest.raises(EvalkitError, match="give an age like 30d"):
        parse_age("thirty days")

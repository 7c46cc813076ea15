"""The gate log (`evalkit.store.gate_log`): a store from before it opens and reads as having
logged nothing, the first decision creates the table, and a write that fails leaves neither a
row nor the table half-made."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from evalkit.errors import StoreError
from evalkit.store import open_store
from evalkit.store.gate_log import GateRecord


def _record(**changes: object) -> GateRecord:
    fields = {"command": "gate", "base_run_id": "base", "cand_run_id": "cand",
              "status": "BLOCKED", "exam_id": "e1", "n_paired": 40, "n_stopping": 1}  # fmt: skip
    return GateRecord(**(fields | changes))  # type: ignore[arg-type]


def test_a_store_without_the_table_reads_empty_and_gains_it_on_the_first_decision(
    tmp_path: Path,
) -> None:
    db = tmp_path / "e.duckdb"
    open_store(db, write=True).close()  # a store as an evalkit before the log made it
    with duckdb.connect(str(db)) as con:
        found = con.execute("SELECT table_name FROM information_schema.tables").fetchall()
    tables = {r[0] for r in found}
    assert "gates" not in tables and "runs" in tables
    with open_store(db) as store:  # read-only: nothing is created
        assert store.gate_log().is_empty() and not store.has_table("gates")
    with open_store(db, write=True) as store:
        store.log_gate(_record())
        store.log_gate(_record(status="PASSED", n_stopping=0))
    with open_store(db) as store:
        log = store.gate_log()
    assert log.select("status", "n_paired", "n_stopping").rows() == [
        ("BLOCKED", 40, 1), ("PASSED", 40, 0),
    ]  # fmt: skip
    assert log["gate_id"].n_unique() == 2 and log["decided_at"].is_sorted()


@pytest.mark.parametrize("logged_before", [0, 1])
def test_a_failed_write_leaves_no_half_written_row(tmp_path: Path, logged_before: int) -> None:
    """The insert fails after the table was created in the same transaction: the whole of it
    is rolled back (with nothing logged before, not even the table is left)."""
    db = tmp_path / "e.duckdb"
    with open_store(db, write=True) as store:
        for _ in range(logged_before):
            store.log_gate(_record())
        with pytest.raises(StoreError, match="cannot log the gate decision") as failed:
            store.log_gate(_record(n_paired="forty"))  # not a BIGINT: the INSERT fails
        assert "\n" not in str(failed.value)
        assert store.has_table("gates") == bool(logged_before)
        store.log_gate(_record(status="UNVERIFIED"))  # the store is still writable
    with open_store(db) as store:
        log = store.gate_log()
    assert log["status"].to_list() == ["BLOCKED"] * logged_before + ["UNVERIFIED"]
    assert log["n_paired"].to_list() == [40] * (logged_before + 1)


def test_a_record_names_a_known_command_and_status_and_holds_no_text() -> None:
    with pytest.raises(ValueError, match="command"):
        _record(command="notebook")
    with pytest.raises(ValueError, match="status"):
        _record(status="gate BLOCKED: 3 broken")
    text_columns = {"gate_id", "command", "base_run_id", "cand_run_id", "exam_id",
                    "corpus_hash", "status"}  # fmt: skip
    strings = {k for k, v in vars(_record()).items() if isinstance(v, str)}
    assert strings <= text_columns  # ids, a command and a status: no message, path or env

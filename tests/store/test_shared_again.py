"""A push of a run the team store already holds reads none of the run's rows, and a pull of a
run the local store already holds stages none: what their first push or pull sealed and
verified is compared, not re-read. A run whose content differs is still refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from synthetic_runs import seed000_runs, write_store
from test_shared_store import _shared_rows, _uri

from evalkit.store import open_store
from evalkit.store.shared import open_shared_store

if TYPE_CHECKING:
    import pyarrow as pa

    from evalkit.store.shared import SharedStore

#: Rows of base-run's large tables: 600 cases, 600 outputs, 1,200 scores, 600 scoring cases.
BASE_ROWS = {"cases": 600, "outputs": 600, "scores": 1200}


def test_a_second_push_of_a_run_reads_and_seals_none_of_its_rows(tmp_path: Path) -> None:
    base, _ = seed000_runs()
    write_store(tmp_path / "a.duckdb", [base])
    uri = _uri(tmp_path)
    shared = open_shared_store(uri)
    with open_store(tmp_path / "a.duckdb", read_only=True) as store:
        first = shared.push_run(store, "base-run")
        again = shared.push_run(store, "base-run")
    assert first.sealed_rows >= sum(BASE_ROWS.values())
    assert {n: first.added[n] for n in BASE_ROWS} == BASE_ROWS
    assert again.sealed_rows == 0 and again.rows == 0
    # the seal the first push recorded is still the one the team store holds
    (published,) = _shared_rows(uri, "runs")["published"].to_list()
    assert json.loads(published)["outputs"]["rows"] == 600


def test_a_push_seals_only_the_scoring_the_team_store_lacks(tmp_path: Path) -> None:
    """A scoring published on its own before its run (a push killed between the two) is not
    re-sealed: the run's cases and outputs are."""
    base, _ = seed000_runs()
    write_store(tmp_path / "a.duckdb", [base])
    uri = _uri(tmp_path)
    shared = open_shared_store(uri)
    with open_store(tmp_path / "a.duckdb", read_only=True) as store:
        shared.push_run(store, "base-run")
    runs = shared._table("runs")
    assert runs is not None
    runs.delete("run_id == 'base-run'")  # as if the push stopped before the runs row
    with open_store(tmp_path / "a.duckdb", read_only=True) as store:
        again = shared.push_run(store, "base-run")
    assert again.added["runs"] == 1 and again.sealed_rows == 1200  # its cases and outputs
    assert shared.run_ids(["base-run"]) == {"base-run"}
    (published,) = _shared_rows(uri, "runs")["published"].to_list()
    assert json.loads(published)["cases"]["rows"] == 600
    with open_store(tmp_path / "b.duckdb", write=True) as store:
        pulled = shared.pull(store, "base-run")  # verified against that seal
    assert pulled.added["outputs"] == 600


def test_a_second_push_does_not_bless_rows_rewritten_in_the_team_store(tmp_path: Path) -> None:
    """A push that finds the run there trusts none of its shared rows: a pull still checks
    them against the first push's seal and refuses the run, as it did before that push."""

    from evalkit.store.shared.verify import UnverifiedRun

    base, _ = seed000_runs()
    write_store(tmp_path / "a.duckdb", [base])
    shared = open_shared_store(_uri(tmp_path))
    with open_store(tmp_path / "a.duckdb", read_only=True) as store:
        shared.push_run(store, "base-run")
    _flip_a_shared_score(shared)
    with open_store(tmp_path / "a.duckdb", read_only=True) as store:
        assert shared.push_run(store, "base-run").sealed_rows == 0
    with open_store(tmp_path / "b.duckdb", write=True) as store:
        with pytest.raises(UnverifiedRun, match="scores holds rows whose content differs"):
            shared.pull(store, "base-run")
        assert store.query("SELECT count(*) AS n FROM outputs")["n"][0] == 0


def _flip_a_shared_score(shared: SharedStore) -> pa.Table:
    """Rewrite the team store's scores in place with one failing score passed; the rows before."""
    import pyarrow.compute as pc

    scores = shared._table("scores")
    assert scores is not None
    rows = scores.scan().to_arrow()
    flipped = pc.or_(rows["passed"], pc.equal(rows["case_id"], "general-400"))
    scores.overwrite(rows.set_column(rows.schema.get_field_index("passed"), "passed", flipped))
    return rows


def _pushed(tmp_path: Path) -> str:
    base, _ = seed000_runs()
    write_store(tmp_path / "a.duckdb", [base])
    uri = _uri(tmp_path)
    with open_store(tmp_path / "a.duckdb", read_only=True) as store:
        open_shared_store(uri).push_run(store, "base-run")
    return uri


def test_a_second_pull_of_a_run_stages_none_of_its_rows(tmp_path: Path) -> None:
    shared = open_shared_store(_pushed(tmp_path))
    with open_store(tmp_path / "b.duckdb", write=True) as store:
        first = shared.pull(store, "base-run")
        again = shared.pull(store, "base-run")
        held = store.query("SELECT count(*) AS n FROM scores")["n"][0]
    assert first.staged_rows >= sum(BASE_ROWS.values()) and first.added["scores"] == 1200
    assert again.staged_rows == 0 and again.rows == 0 and held == 1200


def test_a_pull_after_the_shared_rows_changed_checks_them_again_and_refuses(
    tmp_path: Path,
) -> None:
    """Scores rewritten in place keep the run's seal but not its data files: the second pull
    stages the run again and refuses it, as a first pull does."""
    import pyarrow.compute as pc

    from evalkit.store.shared.verify import UnverifiedRun

    shared = open_shared_store(_pushed(tmp_path))
    with open_store(tmp_path / "b.duckdb", write=True) as store:
        shared.pull(store, "base-run")
    rows = _flip_a_shared_score(shared)
    with open_store(tmp_path / "b.duckdb", write=True) as store:
        with pytest.raises(UnverifiedRun, match="scores holds rows whose content differs"):
            shared.pull(store, "base-run")
        passed = store.query("SELECT count(*) AS n FROM scores WHERE passed")["n"][0]
    assert passed == int(pc.sum(rows["passed"]).as_py())  # the local copy is untouched


def test_a_run_the_local_store_made_itself_is_staged_and_checked(tmp_path: Path) -> None:
    """No seal recorded for a run the local store did not pull: nothing to compare, so the
    pull stages and checks it as before (and adds nothing)."""
    shared = open_shared_store(_pushed(tmp_path))
    with open_store(tmp_path / "a.duckdb", write=True) as store:
        pulled = shared.pull(store, "base-run")
    assert pulled.staged_rows >= sum(BASE_ROWS.values()) and pulled.rows == 0

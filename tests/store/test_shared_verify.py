"""A pull verifies what it takes (issue 46, item 4): a teammate's rows appended to a published
run, and a promotion naming a run that was never published, are refused by ``evalkit pull``
in one line naming the run and the table, with nothing written locally."""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest

from evalkit.cli import main
from evalkit.store import open_store
from evalkit.store.shared import parse_store_uri
from evalkit.store.shared.tables import TABLES, load_table, open_catalog

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from synthetic_runs import seed000_runs, write_store


def _uri(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'catalog.db'}?warehouse={tmp_path / 'warehouse'}"


def _append(uri: str, name: str, rows: pl.DataFrame) -> None:
    """Append ``rows`` to shared table ``name`` as a teammate with write access can: straight
    through pyiceberg, past evalkit's push."""
    table = load_table(open_catalog(parse_store_uri(uri)), TABLES[name], create=False)
    assert table is not None
    spec = TABLES[name].arrow
    table.append(rows.to_arrow().select(spec.names).cast(spec))


def _shared(uri: str, name: str) -> pl.DataFrame:
    table = load_table(open_catalog(parse_store_uri(uri)), TABLES[name], create=False)
    assert table is not None
    return pl.from_arrow(table.scan().to_arrow())  # type: ignore[return-value]


@pytest.fixture
def published(tmp_path: Path) -> str:
    """base-run (70 base failures) pushed through the CLI, and promoted for suite demo."""
    base, _ = seed000_runs()
    write_store(tmp_path / "a.duckdb", [base])
    uri = _uri(tmp_path)
    assert main(["push", "base-run", "--db", str(tmp_path / "a.duckdb"), "--store", uri]) == 0
    return uri


def _pull(tmp_path: Path, uri: str, ref: str, capsys) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["pull", ref, "--db", str(tmp_path / "b.duckdb"), "--store", uri])
    return code, capsys.readouterr().err


def _nothing_local(tmp_path: Path) -> None:
    with open_store(tmp_path / "b.duckdb", read_only=True) as store:
        for name in ("runs", "cases", "outputs", "scores", "baselines"):
            assert store.query(f"SELECT count(*) AS n FROM {name}")["n"][0] == 0, name


def _forged_scores(uri: str) -> pl.DataFrame:
    """12 score rows that flip base-run's failures to passes (a second score for each)."""
    scores = _shared(uri, "scores")
    failing = scores.filter(~pl.col("passed") & (pl.col("scorer") == "contains")).head(12)
    assert failing.height == 12
    return failing.with_columns(passed=pl.lit(True), score=pl.lit(1.0), reason=pl.lit("ok"))


def _forged_outputs(uri: str) -> pl.DataFrame:
    """5 outputs for case ids base-run does not have."""
    outputs = _shared(uri, "outputs").head(5)
    return outputs.with_columns(case_id=pl.format("forged-{}", pl.int_range(5)))


def test_forged_scores_and_outputs_appended_to_a_published_run_are_refused(
    tmp_path: Path, published: str, capsys
) -> None:
    _append(published, "scores", _forged_scores(published))
    _append(published, "outputs", _forged_outputs(published))
    code, err = _pull(tmp_path, published, "base-run", capsys)
    assert code != 0
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "run base-run: shared table scores has 12 rows repeating" in err  # the first found
    _nothing_local(tmp_path)


@pytest.mark.parametrize("forgery", ["scores", "outputs"])
def test_each_forgery_alone_is_refused_naming_its_table(
    tmp_path: Path, published: str, capsys, forgery: str
) -> None:
    rows = _forged_scores(published) if forgery == "scores" else _forged_outputs(published)
    _append(published, forgery, rows)
    code, err = _pull(tmp_path, published, "base-run", capsys)
    assert code != 0 and len(err.strip().splitlines()) == 1
    assert f"run base-run: shared table {forgery}" in err
    if forgery == "outputs":
        assert "5 rows for case ids the run does not have (e.g. forged-0" in err
    _nothing_local(tmp_path)


def test_scores_rewritten_in_place_are_refused_by_the_seal(
    tmp_path: Path, published: str, capsys
) -> None:
    """A teammate who swaps a failing score for a passing one keeps every key unique and
    every count: only the content digest recorded at push tells."""
    scores = _shared(published, "scores")
    flipped = scores.with_columns(
        passed=pl.when(pl.col("case_id") == "general-400").then(True).otherwise(pl.col("passed"))
    )
    table = load_table(open_catalog(parse_store_uri(published)), TABLES["scores"], create=False)
    assert table is not None
    spec = TABLES["scores"].arrow
    table.overwrite(flipped.to_arrow().select(spec.names).cast(spec))
    code, err = _pull(tmp_path, published, "base-run", capsys)
    assert code != 0
    assert "run base-run: shared table scores holds rows whose content differs" in err
    _nothing_local(tmp_path)


def test_an_untouched_published_run_pulls_whole(tmp_path: Path, published: str, capsys) -> None:
    code, err = _pull(tmp_path, published, "base-run", capsys)
    assert code == 0, err
    with open_store(tmp_path / "b.duckdb", read_only=True) as store:
        assert store.query("SELECT count(*) AS n FROM scores")["n"][0] == 1200
        assert store.query("SELECT count(*) AS n FROM outputs")["n"][0] == 600


def _promotion(run_id: str) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "suite": ["demo"], "run_id": [run_id], "who": ["mallory"], "reason": ["trust me"],
            "promoted_at": [dt.datetime.now(dt.UTC)], "tier": [None], "policy": [None],
        },
        schema_overrides={"tier": pl.String, "policy": pl.String},
    )  # fmt: skip


def test_a_promotion_naming_an_unpublished_run_is_refused(
    tmp_path: Path, published: str, capsys
) -> None:
    from evalkit.store.shared import open_shared_store

    open_shared_store(published).promote("demo", "base-run", "ana", "reviewed")
    table = load_table(open_catalog(parse_store_uri(published)), TABLES["baselines"], create=True)
    assert table is not None
    spec = TABLES["baselines"].arrow
    table.append(pa.Table.from_pylist(_promotion("ghost-run").to_dicts(), spec))
    code, err = _pull(tmp_path, published, "demo", capsys)
    assert code != 0 and len(err.strip().splitlines()) == 1
    assert "run ghost-run" in err and "shared table baselines" in err
    assert "never published" in err
    _nothing_local(tmp_path)


def test_promoting_a_forged_run_is_refused(tmp_path: Path, published: str) -> None:
    from evalkit.errors import StoreError
    from evalkit.store.shared import open_shared_store

    _append(published, "outputs", _forged_outputs(published))
    with pytest.raises(StoreError, match="run base-run: shared table outputs"):
        open_shared_store(published).promote("demo", "base-run", "ana", "reviewed")
    assert _shared(published, "baselines").height == 0


def test_a_rescoring_pushed_later_is_sealed_by_its_own_row_and_pulls(
    tmp_path: Path, published: str, capsys
) -> None:
    with open_store(tmp_path / "a.duckdb", write=True) as store:
        scores = store.query("SELECT * FROM scores WHERE run_id = 'base-run'")
        hashes = dict(store.query("SELECT case_id, case_hash FROM cases").iter_rows())
        scoring = store.write_scoring("base-run", "rescored", scores, hashes)
    db = str(tmp_path / "a.duckdb")
    assert main(["push", "base-run", "--db", db, "--store", published]) == 0
    seals = _shared(published, "scorings").sort("scoring_id")["published"].to_list()
    assert all(seals) and len(seals) == 2
    code, err = _pull(tmp_path, published, "base-run", capsys)
    assert code == 0, err
    with open_store(tmp_path / "b.duckdb", read_only=True) as store:
        n = store.query("SELECT count(*) AS n FROM scores WHERE scoring_id = ?", [scoring])["n"][0]
    assert n == 1200

"""A flake list excuses only what it measured: the baseline's configuration, the same case
version, before the candidate ran. The candidate's own list excuses nothing (it is shown)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from synthetic_runs import MANIFEST, OLD_RUNS_DDL, C, make_run, write_store

from evalkit.compare.analysis import load_comparison, load_run
from evalkit.compare.flakes import (
    AFTER_CANDIDATE,
    CANDIDATE_CONFIG,
    NO_CASE_HASH,
    NOT_IN_BASELINE,
    OTHER_WORDING,
    excusing_flakes,
    shown_flakes,
)
from evalkit.compare.gate import gate_comparison
from evalkit.compare.policy import GatePolicy
from evalkit.store import open_store

BASE_CFG, CAND_CFG = "cfg-base", "cfg-cand"
#: Every must_pass case fails in the candidate; what may excuse each is the flake list.
CASES = {  # case id: (baseline hash, candidate hash)
    "mp-excused": ("h1", "h1"),
    "mp-own-config": ("h1", "h1"),
    "mp-old-wording": ("h1", "h1"),
    "mp-edited": ("h1", "h2"),
    "mp-no-hash": ("h1", "h1"),
    "mp-later": ("h1", "h1"),
    "mp-added": (None, "h1"),
}


def _runs(cand_cfg: str = CAND_CFG):
    base = [C(cid, "p", ["policy"], "must_pass", b) for cid, (b, _) in CASES.items() if b]
    cand = [C(cid, "f", ["policy"], "must_pass", c) for cid, (_, c) in CASES.items()]
    base += [C("normal-own-config", "p", ["general"])]
    cand += [C("normal-own-config", "f", ["general"])]
    base_manifest = MANIFEST | {"config_hash": BASE_CFG}
    cand_manifest = MANIFEST | {"config_hash": cand_cfg, "prompt": {"version": "v2"}}
    return (
        make_run("base-run", base, base_manifest, label="base"),
        make_run("cand-run", cand, cand_manifest, label="cand"),
    )


def _flakes(rows: list[tuple[str, str | None, float]]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "case_id": [r[0] for r in rows],
            "tags": [["policy"]] * len(rows),
            "runs": [5] * len(rows),
            "flips": [round(5 * r[2]) for r in rows],
            "flake_rate": [r[2] for r in rows],
            "case_hash": [r[1] for r in rows],
        },
        schema_overrides={"case_hash": pl.String},
    )


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    """The baseline, flake lists measured before the candidate, the candidate, a later list."""
    db = tmp_path / "e.duckdb"
    base, cand = _runs()
    write_store(db, [base])
    with open_store(db, write=True) as store:
        store.save_flakes(BASE_CFG, _flakes([
            ("mp-excused", "h1", 0.4), ("mp-old-wording", "h0", 0.4), ("mp-edited", "h1", 0.4),
            ("mp-added", "h1", 0.4),
        ]))  # fmt: skip
        store.save_flakes(BASE_CFG, _flakes([("mp-no-hash", None, 0.4)]).drop("case_hash"))
        store.save_flakes(CAND_CFG, _flakes([
            ("mp-own-config", "h1", 0.6), ("mp-edited", "h2", 0.6),
            ("normal-own-config", "h1", 0.6),
        ]))  # fmt: skip
    write_store(db, [cand])
    with open_store(db, write=True) as store:
        store.save_flakes(BASE_CFG, _flakes([("mp-later", "h1", 0.4)]))
    return db


def test_only_baseline_flakes_of_the_same_case_before_the_candidate_excuse(
    store_path: Path,
) -> None:
    with open_store(store_path, read_only=True) as store:
        base, cand = load_run(store, "base"), load_run(store, "cand")
        excusing = excusing_flakes(store, base, cand)
        shown = shown_flakes(store, base, cand)
    assert excusing.filter(pl.col("flake_rate") > 0).select("case_id", "flake_rate").rows() == [
        ("mp-excused", 0.4)
    ]
    assert {"case_id", "flake_rate"} <= set(excusing.columns)
    reasons = dict(shown.select("case_id", "why_not").iter_rows())
    assert shown.height == len(reasons) + 1  # mp-edited: two measurements, two reasons
    assert reasons == {
        "mp-own-config": CANDIDATE_CONFIG,
        "mp-old-wording": OTHER_WORDING,
        "mp-edited": reasons["mp-edited"],  # checked below
        "mp-no-hash": NO_CASE_HASH,
        "mp-later": AFTER_CANDIDATE,
        "mp-added": NOT_IN_BASELINE,
    }
    edited = shown.filter(case_id="mp-edited").sort("why_not")
    # the candidate's wording measured on its own configuration; the baseline's on its
    assert edited["why_not"].to_list() == [OTHER_WORDING, CANDIDATE_CONFIG]
    assert edited["flake_rate"].to_list() == [0.4, 0.6]
    assert "normal-own-config" not in reasons  # not must_pass: a flake list excuses it nothing
    assert "mp-excused" not in reasons
    assert shown["why_not"].str.contains("\n").sum() == 0


def test_the_gate_warns_only_on_the_excused_case(store_path: Path) -> None:
    with open_store(store_path, read_only=True) as store:
        cmp = load_comparison(store, "base", "cand", allow_diff=["prompt"])
        decision = gate_comparison(store, cmp, GatePolicy())
    must_pass = {f.case_ids[0]: f.severity for f in decision.findings if f.tier == 1 and f.case_ids}
    assert must_pass["mp-excused"] == "warn"
    assert must_pass["mp-own-config"] == must_pass["mp-later"] == "block"
    assert must_pass["mp-no-hash"] == must_pass["mp-old-wording"] == "block"
    shown = [f.message for f in decision.findings if f.slice == "flakes"]
    assert any("mp-own-config excuses nothing: measured on the candidate's" in m for m in shown)


def test_the_same_configuration_rerun_is_excused_by_its_measured_flakes(tmp_path: Path) -> None:
    db = tmp_path / "e.duckdb"
    base, cand = _runs(cand_cfg=BASE_CFG)  # the candidate runs the baseline's configuration
    write_store(db, [base])
    with open_store(db, write=True) as store:
        store.save_flakes(BASE_CFG, _flakes([("mp-own-config", "h1", 0.2)]))
    write_store(db, [cand])
    with open_store(db, read_only=True) as store:
        base, cand = load_run(store, "base"), load_run(store, "cand")
        assert excusing_flakes(store, base, cand)["case_id"].to_list() == ["mp-own-config"]
        assert shown_flakes(store, base, cand).is_empty()


def test_a_store_without_flake_case_hashes_reads_them_as_null(tmp_path: Path) -> None:
    import duckdb

    db = tmp_path / "old.duckdb"
    con = duckdb.connect(str(db))  # a store written before flakes recorded a case hash
    con.execute(OLD_RUNS_DDL)
    con.execute(
        "CREATE TABLE flakes (config_hash VARCHAR, measured_at TIMESTAMPTZ, case_id VARCHAR, "
        "tags VARCHAR[], runs INTEGER, flips INTEGER, flake_rate DOUBLE)"
    )
    con.execute("INSERT INTO flakes VALUES ('cfg', now(), 'a', ['x'], 5, 2, 0.4)")
    con.close()
    with open_store(db, read_only=True) as store:
        assert store.latest_flakes("cfg")["case_hash"].to_list() == [None]
        assert store.flake_measurements(["cfg"])["case_hash"].to_list() == [None]
    with open_store(db, write=True) as store:  # a writer adds the column; old rows stay NULL
        store.save_flakes("cfg", _flakes([("b", "hb", 0.2)]))
        rows = store.flake_measurements(["cfg"]).sort("case_id")
        assert rows.select("case_id", "case_hash").rows() == [("a", None), ("b", "hb")]

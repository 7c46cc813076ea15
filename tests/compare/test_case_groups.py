"""Case groups (``group:`` on a case): the field, its hash, the store's ``case_group`` column, the
paired frame, and slice intervals that cluster over groups, through the real `slices` and
`decide`, against `stats.clustered_interval`, statsmodels and the exact McNemar test."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pytest

from evalkit import stats
from evalkit.compare.gate import decide
from evalkit.compare.paired import paired_frame
from evalkit.compare.policy import GatePolicy
from evalkit.compare.slices import CLUSTERED_METHOD, slices
from evalkit.corpus.cases import load_corpus
from evalkit.store import open_store

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "corpus"))
from test_cases import GOOD, make_corpus


def test_group_is_loaded_and_hashed_only_when_set(tmp_path: Path) -> None:
    plain = load_corpus(make_corpus(tmp_path / "a", {"cases/a.yaml": GOOD})).cases[0]
    grouped_text = GOOD.replace("  tags: [billing]", "  tags: [billing]\n  group: incident-42")
    grouped = load_corpus(make_corpus(tmp_path / "b", {"cases/a.yaml": grouped_text})).cases[0]
    assert plain.group is None and grouped.group == "incident-42"
    assert grouped.hash != plain.hash
    # unset, the field is left out of the canonical form, so every stored hash stands: this is
    # GOOD's hash as computed before case groups existed
    assert plain.hash == "285c557d7b8fb54453b8ad975a2435c35aa428b8f9532e565cf80084ebe4bf8e"


class _Case:
    def __init__(self, case_id: str, group: str | None) -> None:
        self.id, self.group, self.tags, self.hash = case_id, group, ("billing",), "h-" + case_id
        self.criticality, self.sealed, self.provenance, self.source = "normal", False, {}, "x:1"

    def input_json(self) -> str:
        return "{}"


def test_store_keeps_the_group_and_migrates_an_old_cases_table(tmp_path: Path) -> None:
    db = tmp_path / "old.duckdb"
    con = duckdb.connect(str(db))  # a store written before case groups existed
    con.execute(  # an evalkit store has its runs table (a file without one is someone else's)
        "CREATE TABLE runs (run_id VARCHAR PRIMARY KEY, label VARCHAR, created_at TIMESTAMPTZ, "
        "finished_at TIMESTAMPTZ, config_hash VARCHAR, status VARCHAR, manifest VARCHAR, "
        "summary VARCHAR)"
    )
    con.execute(
        "CREATE TABLE cases (run_id VARCHAR, case_id VARCHAR, case_hash VARCHAR, tags VARCHAR[],"
        " criticality VARCHAR, sealed BOOLEAN, input VARCHAR, provenance VARCHAR, source VARCHAR)"
    )
    con.execute("INSERT INTO runs VALUES ('r0', 'a', now(), now(), 'c', 'complete', '{}', '{}')")
    con.execute("INSERT INTO cases VALUES ('r0', 'old', 'h', ['x'], 'normal', false, '{}', '{}',"
                " 's')")  # fmt: skip
    con.close()
    manifest = {"run": {"run_id": "r1", "label": "b"}, "config_hash": "c", "model": {"id": "m"}}
    with open_store(db, write=True) as store:
        store.create_run(manifest, [_Case("a", "inc-1"), _Case("b", None)])
        got = store.cases("r1").select("case_id", "case_group").rows()
        old = store.cases("r0")["case_group"].to_list()
    assert got == [("a", "inc-1"), ("b", None)] and old == [None]


def _paired(groups: list[str | None], base: list[bool], cand: list[bool]) -> pl.DataFrame:
    n = len(groups)
    ids = [f"c{i:03d}" for i in range(n)]
    cases = pl.DataFrame({"case_id": ids, "case_hash": ids, "tags": [["billing"]] * n,
                          "criticality": ["normal"] * n, "sealed": [False] * n,
                          "case_group": pl.Series(groups, dtype=pl.String)})  # fmt: skip
    verdict = pl.DataFrame({"case_id": ids, "score": [1.0] * n, "error": [False] * n,
                            "unstable": [False] * n})  # fmt: skip
    return paired_frame(verdict.with_columns(passed=pl.Series(base)),
                        verdict.with_columns(passed=pl.Series(cand)), cases, cases)  # fmt: skip


def test_paired_frame_carries_the_group_and_frames_without_it_get_nulls() -> None:
    p = _paired(["g1", None], [True, True], [False, True])
    assert p["case_group"].to_list() == ["g1", None]
    cases = pl.DataFrame({"case_id": ["a"], "case_hash": ["h"], "tags": [["x"]],
                          "criticality": ["normal"], "sealed": [False]})  # fmt: skip
    v = pl.DataFrame({"case_id": ["a"], "passed": [True], "score": [1.0], "error": [False],
                      "unstable": [False]})  # fmt: skip
    assert paired_frame(v, v, cases, cases)["case_group"].to_list() == [None]


def test_ungrouped_slices_keep_the_exact_consistent_interval() -> None:
    p = _paired([None] * 20, [True] * 20, [False] * 6 + [True] * 14)
    row = slices(p).row(0, named=True)
    assert row["interval_method"] == "tango-exact" and row["n_groups"] is None
    assert row["p_value"] == stats.mcnemar_exact(6, 0, "greater")


@pytest.mark.parametrize("seed", range(40))
def test_grouped_slice_is_the_union_with_the_clustered_interval(seed: int) -> None:
    """On many random grouped slices: the interval is the union of the Tango exact-consistent
    interval and the clustered t interval (checked against statsmodels), p the larger one."""
    import statsmodels.api as sm

    rng = np.random.default_rng(seed)
    n = int(rng.integers(8, 120))
    n_groups = int(rng.integers(2, max(3, n // 3)))
    g = rng.integers(0, n_groups, n)
    grouped = rng.random(n) < 0.8  # some cases stay ungrouped: each its own cluster
    base = rng.random(n) < 0.85
    breaks = rng.random(n_groups) < 0.3  # whole incidents break together
    cand = base & ~(breaks[g] & (rng.random(n) < 0.8)) | (~base & (rng.random(n) < 0.05))
    groups = [f"inc-{k}" if grouped[i] else None for i, k in enumerate(g)]
    row = slices(_paired(groups, list(base), list(cand)), level=0.95).row(0, named=True)

    d = cand.astype(float) - base.astype(float)
    clusters = np.array([f"inc-{k}" if grouped[i] else f"case-{i}" for i, k in enumerate(g)])
    broken, fixed = int((base & ~cand).sum()), int((~base & cand).sum())
    tango = stats.paired_diff_interval(broken, fixed, n, 0.95)
    exact_p = stats.mcnemar_exact(broken, fixed, "greater")
    assert row["interval_method"] == CLUSTERED_METHOD
    assert row["n_groups"] == np.unique(clusters).size
    if np.ptp(d) == 0:
        return
    fit = sm.OLS(d, np.ones(n)).fit(cov_type="cluster", cov_kwds={"groups": clusters}, use_t=True)
    lo, hi = fit.conf_int(alpha=0.05)[0]
    t = float(fit.tvalues[0])
    p_less = float(fit.pvalues[0]) / 2 if t < 0 else 1 - float(fit.pvalues[0]) / 2
    assert row["diff_lo"] == pytest.approx(min(tango.lo, max(lo, -1.0)), abs=1e-9)
    assert row["diff_hi"] == pytest.approx(max(tango.hi, min(hi, 1.0)), abs=1e-9)
    assert row["p_value"] == pytest.approx(max(exact_p, p_less), abs=1e-9)
    assert row["diff_hi"] >= tango.hi and row["p_value"] >= exact_p  # groups only widen


def _frame_for_gate(groups: list[str | None], broken: int, n: int) -> pl.DataFrame:
    return _paired(groups, [True] * n, [False] * broken + [True] * (n - broken))


def test_gate_one_broken_incident_is_one_observation_not_six() -> None:
    """Six cases of one incident break: independent, exact p = 0.016 blocks; as one group of
    fifteen they are one observation, and the clustered test sees no evidence."""
    policy = GatePolicy(critical_tags=("billing",))
    n = 20
    independent = decide(_frame_for_gate([None] * n, 6, n), policy)
    assert independent.critical[0].state == "regressed" and independent.blocked
    groups = ["incident-1"] * 6 + [None] * (n - 6)
    grouped = decide(_frame_for_gate(groups, 6, n), policy)
    assert grouped.critical[0].state != "regressed" and not grouped.blocked
    row = slices(_frame_for_gate(groups, 6, n)).row(0, named=True)
    assert row["p_value"] > policy.alpha and row["diff_hi"] > -policy.tolerance


def test_gate_many_broken_incidents_still_block_and_say_so() -> None:
    policy = GatePolicy(critical_tags=("billing",))
    n = 60
    groups = [f"inc-{i // 2}" for i in range(n)]  # 30 incidents of 2 cases
    decision = decide(_frame_for_gate(groups, 24, n), policy)  # 12 incidents break
    assert decision.blocked and decision.critical[0].state == "regressed"
    message = next(f.message for f in decision.blocking())
    assert "clustered t over 30 case groups" in message


def test_one_group_has_no_interval_and_never_blocks() -> None:
    policy = GatePolicy(critical_tags=("billing",))
    frame = _frame_for_gate(["conv-1"] * 12, 12, 12)  # every case of one conversation breaks
    row = slices(frame).row(0, named=True)
    assert (row["diff_lo"], row["diff_hi"], row["p_value"], row["n_groups"]) == (-1, 1, 1, 1)
    assert not decide(frame, policy).blocked
    assert math.isclose(row["diff"], -1.0)

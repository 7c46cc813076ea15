"""Verdicts, the paired frame, flips, slices and comparability, on synthetic store frames
(``make_run`` in tests/synthetic_runs.py)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from scipy.stats import binomtest
from synthetic_runs import MANIFEST, C, make_run

from evalkit import stats
from evalkit.compare.analysis import RunData, compare
from evalkit.compare.comparability import check_comparable
from evalkit.compare.paired import case_changes, flips, paired_frame
from evalkit.compare.slices import slices
from evalkit.compare.verdicts import replay_verdicts, verdicts
from evalkit.errors import ComparabilityError, ConfigError


def _verdict(replays: str) -> dict:
    run = make_run("r", [C("a", replays)])
    return verdicts(run.outputs, run.scores, run.cases).row(0, named=True)


@pytest.mark.parametrize(
    ("replays", "passed", "unstable", "error"),
    [
        ("p", True, False, False),
        ("f", False, False, False),
        ("ppf", True, True, False),
        ("pff", False, True, False),
        ("pf", False, True, False),  # a tie fails
        ("ppffe", False, True, False),  # errors are left out, then a tie
        ("ppe", True, False, False),
        ("eee", None, False, True),  # every replay errored: no verdict
        ("s", None, False, True),  # a scorer that could not decide is an error, not a fail
        ("r", False, False, False),  # the runner's fail_reason is a real failure
        ("pppps", True, False, False),
    ],
)
def test_verdict_majority_ties_unstable_and_errors(replays, passed, unstable, error):
    v = _verdict(replays)
    assert (v["passed"], v["unstable"], v["error"]) == (passed, unstable, error)
    assert v["n_replays"] == len(replays)


def test_replay_errors_are_neither_pass_nor_fail():
    run = make_run("r", [C("a", "pfesr")])
    rv = replay_verdicts(run.outputs, run.scores).sort("replay")
    assert rv["passed"].to_list() == [True, False, None, None, False]
    assert rv["errored"].to_list() == [False, False, True, True, False]


def test_a_scorer_error_makes_the_replay_errored_even_beside_a_failure():
    run = make_run("r", [C("a", "f"), C("b", "r")])
    scores = run.scores.with_columns(error=pl.col("scorer") == "json_schema")
    rv = replay_verdicts(run.outputs, scores)
    assert rv["passed"].to_list() == [None, None] and rv["errored"].all()


def test_output_without_scores_is_an_error_and_case_without_output_too():
    run = make_run("r", [C("a", "p"), C("b", "p")])
    v = verdicts(run.outputs.filter(pl.col("case_id") == "a"), run.scores.head(0), run.cases)
    assert v.select("case_id", "error", "n_replays").rows() == [("a", True, 1), ("b", True, 0)]


def test_paired_frame_pairs_only_unedited_cases_in_both_runs():
    base = make_run("b", [C("same", "p", ["x"]), C("edited", "p", ["x"]), C("gone", "p")])
    cand = make_run("c", [C("same", "f", ["x"]), C("edited", "f", ["x"], hash="h2"), C("new", "f")])
    cmp = compare(base, cand)
    assert cmp.paired["case_id"].to_list() == ["same"]
    assert cmp.paired.select("base", "cand", "base_error", "cand_error").row(0) == (
        True, False, False, False,
    )  # fmt: skip
    changes = case_changes(base.cases, cand.cases).select("case_id", "change").rows()
    assert changes == [("edited", "edited"), ("gone", "removed"), ("new", "added")]
    again = paired_frame(cmp.base_verdicts, cmp.cand_verdicts, base.cases, cand.cases)
    assert again.equals(cmp.paired)
    assert set(again.columns) >= {
        "case_id", "tags", "criticality", "base", "cand", "base_score", "cand_score",
        "base_error", "cand_error", "base_unstable", "cand_unstable", "sealed",
    }  # fmt: skip


def test_flips_ignore_errored_sides():
    base = make_run("b", [C("a", "p"), C("b", "f"), C("c", "p"), C("d", "e")])
    cand = make_run("c", [C("a", "f"), C("b", "p"), C("c", "e"), C("d", "f")])
    broken, fixed = flips(compare(base, cand).paired)
    assert broken["case_id"].to_list() == ["a"] and fixed["case_id"].to_list() == ["b"]


def test_slices_match_scipy_and_put_the_aggregate_last():
    cases_b, cases_c = [], []
    for i in range(40):
        tag = ["billing"] if i < 20 else ["general", "negation"]
        b, c = ("p", "f") if i % 5 == 0 else ("f", "p") if i % 13 == 0 else ("p", "p")
        cases_b.append(C(f"c{i}", b, tag))
        cases_c.append(C(f"c{i}", c, tag))
    table = slices(compare(make_run("b", cases_b), make_run("c", cases_c)).paired, seed=3)
    assert table["slice"].to_list() == ["billing", "general", "negation", "ALL"]
    for r in table.iter_rows(named=True):
        want = binomtest(r["broken"], r["broken"] + r["fixed"], 0.5, alternative="greater")
        assert r["p_value"] == pytest.approx(want.pvalue)
        assert r["diff"] == pytest.approx((r["fixed"] - r["broken"]) / r["n"])
        assert r["diff_lo"] <= r["diff"] <= r["diff_hi"]
        lo, hi = stats.wilson_interval(round(r["cand_pass"] * r["n"]), r["n"])
        assert (r["cand_lo"], r["cand_hi"]) == pytest.approx((lo, hi))
    all_row = table.row(3, named=True)
    assert (all_row["n"], all_row["broken"], all_row["fixed"]) == (40, 8, 3)


def test_slice_interval_is_the_small_n_paired_interval_of_the_cases_own_counts():
    rng = np.random.default_rng(0)
    base, cand = rng.random(300) < 0.8, rng.random(300) < 0.75
    paired = pl.DataFrame({
        "case_id": [str(i) for i in range(300)], "tags": [["t"]] * 300, "base": base,
        "cand": cand, "base_error": False, "cand_error": False,
    })  # fmt: skip
    row = slices(paired, iters=2000, seed=11).row(0, named=True)
    broken, fixed = int((base & ~cand).sum()), int((~base & cand).sum())
    direct = stats.paired_diff_interval(broken, fixed, 300)
    assert (row["diff"], row["diff_lo"], row["diff_hi"]) == pytest.approx(
        (direct.diff, direct.lo, direct.hi)
    )
    assert row["interval_method"] == direct.method == "tango-exact"


def test_comparability_refuses_two_undeclared_differences_and_names_them():
    cand = MANIFEST | {
        "model": {"id": "other", "snapshot": "other"},
        "sampling": {"temperature": 0.7},
    }
    with pytest.raises(ComparabilityError) as err:
        check_comparable(MANIFEST, cand)
    message = str(err.value)
    assert "model" in message and "sampling" in message and "--allow-diff" in message
    assert "\n" not in message
    assert "sampling.temperature 0.0 → 0.7" in message
    with pytest.raises(ComparabilityError, match="--allow-diff sampling"):
        check_comparable(MANIFEST, cand, allow_diff=["model"])
    assert check_comparable(MANIFEST, cand, allow_diff=["model", "sampling"]) == [
        "model",
        "sampling",
    ]
    assert check_comparable(MANIFEST, MANIFEST | {"prompt": {"version": "v2"}}) == ["prompt"]
    with pytest.raises(ConfigError, match="unknown manifest field"):
        check_comparable(MANIFEST, cand, allow_diff=["modle"])


def test_runs_of_two_suites_are_refused_as_such_not_with_a_list_of_flags():
    other = MANIFEST | {"suite": "other-suite", "model": {"id": "other", "snapshot": "other"}}
    with pytest.raises(ComparabilityError) as err:
        check_comparable(MANIFEST, other)
    message = str(err.value)
    assert f"the runs are of different suites ({MANIFEST['suite']} → other-suite" in message
    assert "compare two runs of one suite" in message and "--allow-diff model" not in message
    # a renamed suite with nothing else changed is one variable, as before
    assert check_comparable(MANIFEST, MANIFEST | {"suite": "renamed"}) == ["suite"]


def test_compare_refuses_incomparable_runs():
    cand = MANIFEST | {"model": {"id": "x"}, "replays": 5}
    with pytest.raises(ComparabilityError):
        compare(make_run("b", [C("a", "p")]), make_run("c", [C("a", "p")], cand))


def _big_run(run_id: str, n_cases: int, replays: int, seed: int) -> RunData:
    rng = np.random.default_rng(seed)
    ids = pl.select(pl.format("c{}", pl.int_range(n_cases).cast(pl.String).str.zfill(7)))
    ids = ids.to_series().alias("case_id")
    n, m = n_cases * replays, n_cases * replays * 3
    errors = pl.select(pl.when(pl.Series(rng.random(n) < 0.01)).then(pl.lit("timeout")))
    out = pl.DataFrame(
        {
            "run_id": pl.repeat(run_id, n, eager=True),
            "case_id": ids.gather(np.repeat(np.arange(n_cases), replays)),
            "replay": np.tile(np.arange(replays, dtype=np.int32), n_cases),
            "error": errors.to_series(),
            "fail_reason": pl.repeat(None, n, dtype=pl.String, eager=True),
            "latency_ms": rng.random(n) * 900,
            "prompt_tokens": np.full(n, 100),
            "completion_tokens": np.full(n, 20),
            "cost_usd": np.full(n, 1e-3),
        }
    )
    passed = rng.random(m) < 0.97
    sc = pl.DataFrame(
        {
            "run_id": pl.repeat(run_id, m, eager=True),
            "case_id": out["case_id"].gather(np.repeat(np.arange(n), 3)),
            "replay": np.repeat(out["replay"].to_numpy(), 3),
            "scorer_index": np.tile(np.arange(3), n),
            "score": passed.astype(float),
            "passed": passed,
            "error": rng.random(m) < 0.001,
        }
    )
    tags = pl.Series([["a", "b"], ["c"], ["b"]] * (n_cases // 3) + [["a"]] * (n_cases % 3))
    cases = pl.DataFrame({"case_id": ids, "tags": tags}).with_columns(
        run_id=pl.lit(run_id),
        case_hash=pl.lit("h"),
        criticality=pl.lit("normal"),
        sealed=pl.lit(False),
        source=pl.lit("cases/big.yaml"),
    )
    return RunData(
        run_id=run_id, label=run_id, manifest=MANIFEST, cases=cases, outputs=out, scores=sc
    )


def test_analysis_scales_to_a_million_outputs():
    """200k cases x 5 replays = 1M outputs and 3M score rows, vectorized end to end."""
    base = _big_run("b", 200_000, 5, 1)
    assert base.outputs.height == 1_000_000 and base.scores.height == 3_000_000
    bv = verdicts(base.outputs, base.scores, base.cases)
    flip = pl.Series(np.random.default_rng(3).random(bv.height) < 0.02)
    cv = bv.with_columns(passed=pl.col("passed") ^ flip)
    table = slices(paired_frame(bv, cv, base.cases, base.cases), iters=10_000)
    assert bv.height == 200_000 and bv["n_replays"].sum() == 1_000_000
    assert table.filter(pl.col("slice") == "ALL")["n"][0] + table["n_error"][-1] == 200_000
    broken = int(table.filter(pl.col("slice") == "ALL")["broken"][0])
    assert broken == int((flip & bv["passed"]).sum())  # every flipped pass is one broken case
    # How fast this is, is bench/bench_analysis.py's to measure (100k x 5 x 2 runs, printed).


def test_allow_diff_names_the_variable_under_test_and_nothing_else():
    model_only = MANIFEST | {"model": {"id": "other-model", "snapshot": "other-model"}}
    with pytest.raises(ComparabilityError) as caught:
        check_comparable(MANIFEST, model_only, allow_diff=["prompt"])
    message = str(caught.value)
    assert "differ in 1 field(s) (model) (declared: prompt)" in message
    assert "--allow-diff model" in message
    assert check_comparable(MANIFEST, model_only) == ["model"]  # undeclared: one variable is fine
    prompt_only = MANIFEST | {"prompt": {"version": "v2", "template_hash": "t2"}}
    assert check_comparable(MANIFEST, prompt_only, allow_diff=["prompt"]) == ["prompt"]


def test_a_declared_field_that_did_not_differ_is_a_warning_in_the_comparison():
    from evalkit.compare.analysis import compare

    base = make_run("b", [C("a", "p")])
    cand = make_run("c", [C("a", "p")], manifest=MANIFEST | {"prompt": {"version": "v2"}})
    comparison = compare(base, cand, allow_diff=["prompt", "model"])
    assert comparison.warnings == (
        "--allow-diff model: the runs do not differ in model (is this the pair you meant?)",
    )

"""History across runs (`evalkit.history`, `evalkit history`) over synthetic runs written
through the store's API: per-tag rates counted by hand, a planted growth in unstable cases, a
served-model change, flake counts, rescored runs, and the same verdicts as `verdicts`."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import polars as pl
import pytest
from synthetic_runs import MANIFEST, C, make_run, write_store

from evalkit.cli import main
from evalkit.compare.verdicts import verdicts
from evalkit.errors import StoreError
from evalkit.stats.intervals import wilson_interval
from evalkit.store import open_store
from evalkit.store.history_queries import tag_counts
from evalkit.trends.analysis import SERVED_MODEL_CHANGE, UNSTABLE_GROWING, history

#: Failing billing cases per run, and unstable (replays "pf": a tie, so failing) cases per run.
BILLING_FAILS = [0, 1, 1, 2, 3, 2]
UNSTABLE = [0, 0, 1, 2, 3, 4]


def _cases(k: int, unstable: list[int]) -> list[C]:
    """Run k: 10 billing cases (BILLING_FAILS[k] fail), 8 refunds cases (1 errored, unstable[k]
    unstable), one must_pass case in both tags that always passes."""
    billing = [C(f"billing-{i}", "ff" if i < BILLING_FAILS[k] else "pp", ["billing"]) for i in
               range(10)]  # fmt: skip
    refunds = [C("refunds-err", "ee", ["refunds"])] + [
        C(f"refunds-{i}", "pf" if i < unstable[k] else "pp", ["refunds"]) for i in range(7)
    ]
    both = [C("policy-0", "pp", ["billing", "refunds"], "must_pass")]
    return billing + refunds + both


def _six_runs(tmp_path: Path, unstable: list[int] = UNSTABLE, label: str = "nightly") -> Path:
    manifest = MANIFEST | {"gate_policy": {"critical_tags": ["billing", "refunds"]}}
    runs = [
        make_run(f"run-{k}", _cases(k, unstable), manifest=manifest, label=label) for k in range(6)
    ]
    db = tmp_path / "history.duckdb"
    write_store(db, runs)
    return db


def _set_model(db: Path, run_ids: list[str], model: str) -> None:
    with duckdb.connect(str(db)) as con:  # what the provider answered with, per output
        con.execute("UPDATE outputs SET model = ? WHERE run_id IN ?", [model, run_ids])
    with open_store(
        db, write=True
    ) as store:  # outputs edited by hand: their recorded usage follows
        for run_id in run_ids:
            store.record_history(run_id)


def test_six_runs_per_tag_rates_and_intervals(tmp_path: Path) -> None:
    db = _six_runs(tmp_path)
    with open_store(db, read_only=True) as store:
        result = history(store, by="label")
    assert [p.run_id for p in result.points] == [f"run-{k}" for k in range(6)]
    assert result.critical_tags == ("billing", "refunds")
    for k, point in enumerate(result.points):
        billing = point.rate("billing")
        assert billing is not None
        assert (billing.cases, billing.decided) == (11, 11)
        assert billing.passed == 11 - BILLING_FAILS[k]
        assert (billing.lo, billing.hi) == tuple(wilson_interval(billing.passed, 11))
        refunds = point.rate("refunds")
        assert refunds is not None
        # the errored case is not decided; an unstable case ties 1-1, and a tie fails
        assert (refunds.cases, refunds.decided, refunds.errored) == (9, 8, 1)
        assert refunds.passed == 8 - UNSTABLE[k]
        assert refunds.unstable == UNSTABLE[k] == point.unstable
        everything = point.rate()
        assert everything is not None and everything.cases == 19  # policy-0 counted once
        assert everything.passed == 19 - 1 - BILLING_FAILS[k] - UNSTABLE[k]
        assert point.mean_latency_ms == 100.0 and point.mean_cost_usd == pytest.approx(0.001)
        assert point.served_model == "demo-model"
    frame = result.frame()
    assert frame.filter(pl.col("tag") == "billing")["passed"].to_list() == [
        11 - f for f in BILLING_FAILS
    ]


def test_a_planted_growth_in_unstable_cases_is_a_warning(tmp_path: Path) -> None:
    with open_store(_six_runs(tmp_path), read_only=True) as store:
        assert not history(store, by="label").findings  # no complete window of 10 runs yet
        result = history(store, by="label", trend_runs=6)
    (growing,) = [f for f in result.findings if f.kind.startswith(UNSTABLE_GROWING)]
    assert growing.severity == "warn"
    assert growing.statistic["runs"] == [f"run-{k}" for k in range(6)]
    # shares 0, 0, 1, 2, 3, 4 of 19: one tie, so the permutation test; S = 14 of 15 pairs, which
    # 2 of the 720 orderings reach (p = 1/360), at alpha * 6 / 30 = 0.01 per window
    assert growing.statistic["s"] == 14 and growing.statistic["method"] == "permutation"
    assert growing.statistic["p_value"] == pytest.approx(1 / 360, abs=0.002)
    assert growing.statistic["window_alpha"] == pytest.approx(0.01)
    assert "unstable cases are growing in nightly" in growing.message
    assert "at most 5% of the time over 30 runs" in growing.message


@pytest.mark.parametrize("unstable", [[2, 2, 2, 2, 2, 2], [4, 3, 2, 1, 0, 0], [0, 2, 0, 2, 0, 2]])
def test_no_growth_no_warning(tmp_path: Path, unstable: list[int]) -> None:
    with open_store(_six_runs(tmp_path, unstable), read_only=True) as store:
        result = history(store, by="label", trend_runs=6)
    assert not [f for f in result.findings if f.kind.startswith(UNSTABLE_GROWING)]
    assert [p.unstable for p in result.points] == unstable


def test_the_trend_tests_non_overlapping_windows_once_each(tmp_path: Path) -> None:
    db = _six_runs(tmp_path, [5, 4, 3, 3, 4, 5])  # falling, then growing over the last three
    with open_store(db, read_only=True) as store:
        assert not history(store, by="label", trend_runs=6).findings  # S = 0 over all six
        recent = history(store, by="label", trend_runs=3, horizon=30)
        cut = history(store, by="label", trend_runs=4, last=5)  # runs 2-5: window 1-4 is cut
    (trend,) = recent.trends
    assert trend.run_ids == ("run-3", "run-4", "run-5")  # the second window, not a sliding one
    assert trend.test.s == 3 and trend.test.p_value == pytest.approx(1 / 6)
    assert not recent.findings  # three runs can never reach 0.05 * 3 / 30
    assert cut.trends == ()


def test_a_stationary_series_warns_at_most_at_the_stated_rate() -> None:
    """Seeded simulation: 400 stationary 30-run series (unstable counts Binomial(40, 0.1) of
    40 cases, ties and all), checked after every run as a nightly job would. The warning fires
    at most alpha = 5 % of the time over the 30 runs; the sliding window it replaces fired
    about half the time."""
    import numpy as np

    from evalkit.stats.trend import mann_kendall
    from evalkit.trends.analysis import latest_window, unstable_trend

    rng = np.random.default_rng(45)
    reps, runs, window, alpha, horizon = 400, 30, 10, 0.05, 30
    fired = sliding = 0
    for _ in range(reps):
        shares = (rng.binomial(40, 0.1, runs) / 40).tolist()
        tested = set()
        for now in range(1, runs + 1):  # what a user sees after each run
            span = latest_window(list(range(now)), window)
            if span is not None:
                tested.add(span)
        fired += any(
            unstable_trend(shares[i:j]).p_value <= alpha * window / horizon for i, j in tested
        )
        if _ < 200:  # the old rule, on fewer series
            sliding += any(
                mann_kendall(shares[max(0, k - window) : k]).p_value <= alpha
                for k in range(3, runs + 1)
            )
    rate, se = fired / reps, (alpha * (1 - alpha) / reps) ** 0.5
    assert rate <= alpha + 2 * se
    assert sliding / 200 > 0.3  # the old rule: the defect this replaces


def test_last_and_tag_select_points_and_cases(tmp_path: Path) -> None:
    db = _six_runs(tmp_path)
    with open_store(db, read_only=True) as store:
        result = history(store, tag="refunds", last=3, by="label")
        with pytest.raises(StoreError, match="tag 'shipping'"):
            history(store, tag="shipping", by="label")
    assert [p.run_id for p in result.points] == ["run-3", "run-4", "run-5"]
    for point in result.points:
        assert {t.tag for t in point.tags} == {"ALL", "refunds"}
        assert point.rate().cases == 9  # type: ignore[union-attr]


def test_by_baseline_follows_promotions_per_suite(tmp_path: Path) -> None:
    db = _six_runs(tmp_path)
    with open_store(db, write=True) as store:
        for run_id in ("run-1", "run-4", "run-1"):  # re-promoting run-1 adds no point
            store.promote_baseline("demo", run_id, "ana", "nightly looked right")
        store.promote_baseline("demo", "run-5", "ana", "smoke tier", tier="smoke")
    with open_store(db, read_only=True) as store:
        result = history(store)
    assert [(p.series, p.run_id, p.promoted_by) for p in result.points] == [
        ("demo", "run-1", "ana"), ("demo", "run-4", "ana"), ("demo@smoke", "run-5", "ana"),
    ]  # fmt: skip


def test_a_served_model_change_is_marked(tmp_path: Path) -> None:
    db = _six_runs(tmp_path)
    _set_model(db, ["run-4", "run-5"], "demo-model-0806")
    with open_store(db, read_only=True) as store:
        result = history(store, by="label")
    (change,) = [f for f in result.findings if f.kind.startswith(SERVED_MODEL_CHANGE)]
    assert change.statistic == {
        "from": "demo-model", "to": "demo-model-0806", "run_id": "run-4",
        "previous_run_id": "run-3",
    }  # fmt: skip
    assert result.runs_frame()["model_changed"].to_list() == [False] * 4 + [True, False]


def test_flaky_counts_come_from_the_newest_measurement_of_the_config(tmp_path: Path) -> None:
    db = _six_runs(tmp_path)
    rows = {"case_id": ["refunds-0", "refunds-1", "billing-0"], "tags": [["refunds"]] * 3,
            "runs": [5, 5, 5], "flips": [2, 0, 1], "flake_rate": [0.4, 0.0, 0.2]}  # fmt: skip
    with open_store(db, write=True) as store:
        store.save_flakes("cfg", pl.DataFrame(rows))
        store.save_flakes("cfg", pl.DataFrame(rows).with_columns(flips=pl.Series([2, 0, 0])))
        store.save_flakes("other", pl.DataFrame(rows))
    with open_store(db, read_only=True) as store:
        result = history(store, by="label")
    assert [p.flaky for p in result.points] == [1] * 6


def test_counts_match_verdicts_on_every_kind_of_replay(tmp_path: Path) -> None:
    """p pass, f fail, r runner fail_reason, e provider error, s scorer undecided; mixed."""
    kinds = ["p", "f", "r", "e", "s", "pf", "pfp", "ffp", "pe", "es", "fr", "psp", "ee", "rpp"]
    cases = [C(f"c{i}", k, ["a"] if i % 2 else ["a", "b"]) for i, k in enumerate(kinds)]
    runs = [make_run("mix", cases), make_run("mix2", cases[::-1][:9])]
    db = tmp_path / "mix.duckdb"
    write_store(db, runs)
    with open_store(db, read_only=True) as store:
        counts = tag_counts(store, ["mix", "mix2"])
        for run in runs:
            v = verdicts(run.outputs, run.scores, run.cases)
            got = counts.filter(pl.col("run_id") == run.run_id, pl.col("tag") == "ALL").row(
                0, named=True
            )
            assert got["cases"] == v.height
            assert got["passed"] == int(v["passed"].fill_null(False).sum())
            assert got["errored"] == int(v["error"].sum())
            assert got["decided"] == v.height - int(v["error"].sum())
            assert got["unstable"] == int(v["unstable"].sum())


def test_a_rescored_run_counts_its_newest_scoring(tmp_path: Path) -> None:
    db = _six_runs(tmp_path)
    with open_store(db, write=True) as store:
        scores = store.scores("run-0").with_columns(passed=pl.lit(False), score=pl.lit(0.0))
        hashes = dict(store.cases("run-0").select("case_id", "case_hash").iter_rows())
        store.write_scoring("run-0", "stricter", scores, hashes)
    with open_store(db, read_only=True) as store:
        first = history(store, by="label").points[0]
    assert first.rate().passed == 0  # type: ignore[union-attr]


def test_cli_table_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = _six_runs(tmp_path)
    assert main(["history", "--db", str(db), "--by", "label", "--last", "2"]) == 0
    table = capsys.readouterr().out
    assert "label nightly:" in table and "run-4" in table and "run-3" not in table
    assert "billing" in table and "refunds" in table  # the critical tags' columns
    json_args = ["--by", "label", "--format", "json", "--trend-runs", "6"]
    assert main(["history", "--db", str(db), *json_args]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["points"]) == 6
    assert any(f["kind"].startswith(UNSTABLE_GROWING) for f in data["findings"])
    assert main(["history", "--db", str(db)]) == 0
    assert "no promoted baseline" in capsys.readouterr().out
    assert main(["history", "--db", str(db), "--by", "label", "--tag", "nope"]) == 2
    assert "tag 'nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["history", "--db", str(db), "--last", "0"])


def test_an_empty_store_has_an_empty_history(tmp_path: Path) -> None:
    db = tmp_path / "empty.duckdb"
    open_store(db, write=True).close()
    with open_store(db, read_only=True) as store:
        result = history(store, by="label")
    assert result.points == () and result.findings == ()
    assert result.frame().is_empty() and result.runs_frame().is_empty()


def test_charts_have_a_panel_per_critical_tag_and_mark_the_model_change(tmp_path: Path) -> None:
    from evalkit.report.history_charts import pass_rate_history, unstable_history

    db = _six_runs(tmp_path)
    _set_model(db, ["run-4", "run-5"], "demo-model-0806")
    with open_store(db, read_only=True) as store:
        result = history(store, by="label")
    spec = pass_rate_history(result).to_dict()
    titles = [panel["title"] for panel in spec["vconcat"]]
    assert titles == [
        "billing: pass rate (per case; Wilson 95% band)",
        "refunds: pass rate (per case; Wilson 95% band)",
    ]
    marked = [
        row["run_id"]
        for rows in spec["datasets"].values()
        for row in rows
        if row.get("model_changed") and row.get("tag") == "billing"
    ]
    assert marked == ["run-4"]
    unstable = unstable_history(result).to_dict()
    counts = [r["cases_n"] for rows in unstable["datasets"].values() for r in rows
              if r.get("kind") == "unstable"]  # fmt: skip
    assert counts[:6] == UNSTABLE


def test_label_keeps_one_labels_runs(tmp_path: Path) -> None:
    db = tmp_path / "two.duckdb"
    runs = [make_run(f"n-{k}", _cases(k, UNSTABLE), label="nightly") for k in range(3)]
    runs += [make_run("pr-1", _cases(0, UNSTABLE), label="pr-1")]
    write_store(db, runs)
    with open_store(db, read_only=True) as store:
        assert {p.series for p in history(store, by="label").points} == {"nightly", "pr-1"}
        kept = history(store, by="label", label="nightly")
    assert [p.run_id for p in kept.points] == ["n-0", "n-1", "n-2"]
    assert main(["history", "--db", str(db), "--by", "label", "--label", "pr-1"]) == 0


def test_finished_runs_record_their_counts_and_history_reads_them_without_recounting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import evalkit.store.history_queries as queries

    db = _six_runs(tmp_path)  # write_store finishes each run: each records its counts
    runs = [f"run-{k}" for k in range(6)]
    with open_store(db, read_only=True) as store:
        assert store.has_table("history_counts") and store.has_table("history_usage")
        for tag in (None, "billing"):  # what is recorded is what counting the outputs gives
            assert tag_counts(store, runs, tag).equals(queries.count_tags(store, runs, tag))
        recounted: list[list[str]] = []
        count_tags = queries.count_tags
        monkeypatch.setattr(
            queries, "count_tags", lambda s, ids, t=None: recounted.append(list(ids)) or
            count_tags(s, ids, t),
        )  # fmt: skip
        expected = history(store, by="label")
        assert recounted == []  # a thousand runs cost a few thousand recorded rows
    with duckdb.connect(str(db)) as con:  # a run recorded nothing (an older evalkit wrote it)
        con.execute("DELETE FROM history_counts WHERE run_id = 'run-3'")
        con.execute("DELETE FROM history_usage WHERE run_id = 'run-3'")
    with open_store(db, read_only=True) as store:
        again = history(store, by="label")
    assert recounted == [["run-3"]] and again.to_dict() == expected.to_dict()


def test_a_rescore_records_the_new_scoring_and_the_old_counts_are_not_read(
    tmp_path: Path,
) -> None:
    db = _six_runs(tmp_path)
    with open_store(db, write=True) as store:
        scores = store.scores("run-0").with_columns(passed=pl.lit(False))  # everything fails
        store.write_scoring("run-0", "strict", scores, {})
    with open_store(db, read_only=True) as store:
        point = history(store, by="label").points[0]
        assert point.run_id == "run-0" and point.rate("billing").passed == 0
        recorded = store.query(
            "SELECT DISTINCT scoring_id FROM history_counts WHERE run_id = 'run-0'"
        )["scoring_id"].to_list()
    assert recorded == [store.latest_scoring("run-0")] == ["run-0/s1"]

"""The gate holds a run's figures, not its answers (issue 48, item 4): it reads the outputs
without their text, the cases without their input and the scores without their reasons (each
read back for the cases the report shows) and decides verdicts a range of case ids at a time.
On a seeded pair with replays, slices and every kind of error, the decision, every frame it
rests on and the report are the same as the whole-run path's. A thin run holds its judges'
score rows alone: verdicts read the rest from the store a range of cases at a time."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import polars as pl
import pytest
from synthetic_runs import MANIFEST, C, make_run, write_store

from evalkit.compare import pin, verdicts
from evalkit.compare.analysis import (
    CASE_DETAIL_COLUMNS,
    DETAIL_COLUMNS,
    SCORE_DETAIL_COLUMNS,
    load_comparison,
)
from evalkit.report.build import build_report, to_json
from evalkit.store import Store, open_store

TAGS = ("billing", "policy", "general")


def _seeded_pair(seed: int = 48) -> tuple[list[C], list[C]]:
    """240 cases of 3 replays: p pass, f scorer fail, r runner fail, e provider error,
    s scorer undecided; the candidate breaks more billing cases than it fixes."""
    rng = random.Random(seed)
    base, cand = [], []
    for i in range(240):
        tag = TAGS[i % 3]
        crit = "must_pass" if i % 40 == 0 else "normal"
        weights = (80, 10, 4, 3, 3)
        b = "".join(rng.choices("pfres", weights, k=3))
        c = "".join(rng.choices("pfres", (60, 30, 4, 3, 3) if tag == "billing" else weights, k=3))
        base.append(C(f"{tag}-{i:03d}", b, [tag, f"slice-{i % 5}"], crit))
        cand.append(C(f"{tag}-{i:03d}", c, [tag, f"slice-{i % 5}"], crit))
    return base, cand


#: A judge check's identity as a judge scorer records it (`evalkit.judges.gating`).
_JUDGE = {"judge_model": "judge-m", "rubric": "tone.md", "rubric_hash": "ab12"}


def _judged(run, seed: int):  # type: ignore[no-untyped-def]
    """``run`` with a tier-3 judge check on every scored replay (no calibration: not gated).
    Its scores are quarters: a case's mean over replays is exact, whatever order Polars' threads
    add them in (with fifths, the two paths' means differed in their last bit in some runs)."""
    rng = random.Random(seed)
    rows = run.scores.filter(pl.col("scorer") == "contains")
    level = [rng.choice([1, 2, 3, 4, 5]) for _ in range(rows.height)]
    details = [json.dumps({**_JUDGE, "judge_score": x}) for x in level]
    judge = rows.with_columns(
        scorer=pl.lit("judge:tone"), scorer_index=pl.lit(2, rows["scorer_index"].dtype),
        tier=pl.lit(3, rows["tier"].dtype), passed=pl.Series(level) >= 3,
        score=pl.Series(level, dtype=pl.Float64) / 4, reason=pl.lit("tone"),
        details=pl.Series(details),
    )  # fmt: skip
    return dataclasses.replace(run, scores=pl.concat([run.scores, judge], how="diagonal_relaxed"))


def _write_pair(folder: Path, judged: bool = False) -> tuple[Path, Path]:
    manifest = {**MANIFEST, "replays": 3}
    base_cases, cand_cases = _seeded_pair()
    base = make_run("base-run", base_cases, manifest, "base")
    cand = make_run("cand-run", cand_cases, manifest, "cand")
    if judged:
        base, cand = _judged(base, 1), _judged(cand, 2)
    tmp_path = folder
    db = tmp_path / "e.duckdb"
    write_store(db, [base, cand])
    config = tmp_path / "evalkit.yaml"
    lines = ["suite: demo", "system:", "  model: demo-model", "  base_url: http://127.0.0.1:9/v1"]
    config.write_text("\n".join([*lines, "critical_tags: [billing]", ""]), encoding="utf-8")
    return db, config


@pytest.fixture
def store_path(tmp_path: Path) -> tuple[Path, Path]:
    return _write_pair(tmp_path)


def _decided(db: Path, config: Path):  # type: ignore[no-untyped-def]
    with open_store(db, read_only=True) as store:
        comparison, decision = pin.gate_pair(store, "base-run", "cand-run", str(config))
        report = to_json(build_report(comparison, decision))
    return comparison, decision, report


def test_the_bounded_gate_decides_exactly_as_the_whole_run_path(
    store_path: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    db, config = store_path
    whole_cmp, whole, whole_report = _decided(db, config)  # a single pass: 240 < VERDICT_CASES
    thin = whole_cmp.cand
    for frame, columns in _DETAILS:
        assert not set(columns) & set(getattr(thin, frame).columns)  # thin: left in the store

    def full(*args, **kwargs):  # type: ignore[no-untyped-def]
        return load_comparison(*args, **{**kwargs, "thin": False})

    monkeypatch.setattr(pin, "load_comparison", full)
    old_cmp, old, old_report = _decided(db, config)  # the whole-run path: every column, one pass
    for frame, columns in _DETAILS:
        assert set(columns) <= set(getattr(old_cmp.cand, frame).columns)
    monkeypatch.undo()

    monkeypatch.setattr(verdicts, "VERDICT_CASES", 17)  # 15 ranges of case ids
    new_cmp, new, new_report = _decided(db, config)

    assert old.status in ("BLOCKED", "UNVERIFIED")  # the seeded pair has something to decide
    assert any(f.tier == 2 for f in old.findings)  # the critical tag was tested
    for cmp, decision, report in ((whole_cmp, whole, whole_report), (new_cmp, new, new_report)):
        assert decision.to_dict() == old.to_dict()
        assert cmp.base_verdicts.equals(old_cmp.base_verdicts)
        assert cmp.cand_verdicts.equals(old_cmp.cand_verdicts)
        assert cmp.paired.equals(old_cmp.paired)
        assert report == old_report  # the shown cases' answers read back per case
    assert "says" in new_report  # the report does show answers' text (make_run's "... says p")
    assert "question billing-" in new_report  # ... the shown cases' input
    assert "missing 'refund'" in new_report  # ... and the scorers' reasons


#: The frames a thin load reads without their detail columns.
_DETAILS = (
    ("outputs", DETAIL_COLUMNS),
    ("cases", CASE_DETAIL_COLUMNS),
    ("scores", SCORE_DETAIL_COLUMNS),
)


def test_verdicts_in_ranges_of_case_ids_equal_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    base_cases, _ = _seeded_pair(seed=7)
    run = make_run("r", base_cases, {**MANIFEST, "replays": 3})
    one = verdicts.verdicts(run.outputs, run.scores, run.cases)
    monkeypatch.setattr(verdicts, "VERDICT_CASES", 10)
    ranged = verdicts.verdicts(run.outputs, run.scores, run.cases)
    assert ranged.equals(one) and ranged.height == 240
    assert one["error"].sum() > 0 and one["unstable"].sum() > 0  # errors and disagreeing replays
    without_cases = verdicts.verdicts(run.outputs, run.scores)
    monkeypatch.setattr(verdicts, "VERDICT_CASES", 1_000_000)
    assert without_cases.equals(verdicts.verdicts(run.outputs, run.scores))


def _score_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The rows of every read of a run's score rows that is not a read-back of named cases
    (the report's shown and failing cases): what a gate holds of a run's scores at once."""
    heights: list[int] = []
    read = Store.scores

    def counted(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        frame = read(self, *args, **kwargs)
        if kwargs.get("case_ids") is None:
            heights.append(frame.height)
        return frame

    monkeypatch.setattr(Store, "scores", counted)
    return heights


def test_the_gate_never_holds_a_run_s_score_rows_whole(
    store_path: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    db, config = store_path
    with open_store(db, read_only=True) as store:
        stored = store.query("SELECT count(*) AS n FROM scores WHERE run_id = 'cand-run'")
    per_run = int(stored["n"][0])  # 240 cases x 3 replays x 2 scorers, less the errored
    monkeypatch.setattr(verdicts, "VERDICT_CASES", 17)
    heights = _score_reads(monkeypatch)
    comparison, _, _ = _decided(db, config)
    assert comparison.cand.scores.height == comparison.base.scores.height == 0  # no judges
    per_range = 17 * 3 * 2  # a range of 17 cases: 3 replays, 2 scorers each
    assert len(heights) > 2 * 240 // 17 and max(heights) <= per_range < per_run / 10
    assert sum(heights) >= 2 * per_run  # ... and every row was read, range by range

    heights.clear()
    monkeypatch.setattr(
        pin, "load_comparison", lambda *a, **k: load_comparison(*a, **{**k, "thin": False})
    )
    _decided(db, config)  # the whole-run path: the counter sees each run's rows at once
    assert max(heights) == per_run


def test_an_ungated_judge_leaves_the_bounded_gate_as_the_whole_run_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, config = _write_pair(tmp_path, judged=True)
    monkeypatch.setattr(verdicts, "VERDICT_CASES", 17)
    thin_cmp, thin, thin_report = _decided(db, config)
    assert set(thin_cmp.cand.scores["scorer"]) == {"judge:tone"}  # the judges' rows alone
    monkeypatch.setattr(
        pin, "load_comparison", lambda *a, **k: load_comparison(*a, **{**k, "thin": False})
    )
    whole_cmp, whole, whole_report = _decided(db, config)
    assert whole_cmp.judge_paired is not None and whole_cmp.judge_paired.height > 0
    assert thin_cmp.judge_paired is not None and thin_cmp.judge_paired.equals(
        whole_cmp.judge_paired
    )
    assert thin.to_dict() == whole.to_dict() and thin_report == whole_report
    assert thin_cmp.paired.equals(whole_cmp.paired)
    assert thin_cmp.cand_verdicts.equals(whole_cmp.cand_verdicts)
    assert any("judge not calibrated" in f.message for f in whole.findings)

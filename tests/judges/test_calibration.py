"""Judge calibration against human labels, the judge gate rule, and pairwise judging.

The end-to-end tests run the demo corpus's judged cases through the simulator (system under test
and judge), import labels, calibrate, and judge the two runs pairwise in both orders.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from evalkit import stats
from evalkit.cli import main
from evalkit.compare.verdicts import verdicts
from evalkit.corpus.cases import load_corpus
from evalkit.corpus.suite import load_suite
from evalkit.demo.server import DemoServer
from evalkit.judges.calibration import calibrate_frames, judged_outputs, latest_calibration
from evalkit.judges.calibration_record import Calibration, CalibrationError
from evalkit.judges.gating import gated_scores, judge_gating
from evalkit.judges.labels import output_hash
from evalkit.judges.pairwise import judge_paired_outputs
from evalkit.run.runner import RunOptions, run_suite
from evalkit.scorers.judge_client import JudgeClient, load_rubric
from evalkit.store import CALIBRATION_SCHEMA, open_store

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "corpus" / "evalkit.yaml"
RUBRIC = REPO / "corpus" / "rubrics" / "reply_tone.md"
DEMO_LABELS = REPO / "data" / "labels" / "demo_reply_tone.csv"


# --------------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def demo_db(demo_server: DemoServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Baseline (prompt v1) and candidate (v2) runs of the demo's judged cases."""
    sets = [f"system.base_url={demo_server.base_url}", f"judge.base_url={demo_server.base_url}"]
    suite = load_suite(CONFIG, overrides=sets)
    corpus = load_corpus(suite.root, user_template=suite.config.system.user_template)
    judged = [c.id for c in corpus.cases if any(s.name == "judge" for s in c.scorers)]
    corpus = corpus.select(ids=judged)
    candidate = load_suite(CONFIG, overrides=sets, prompt=suite.root / "prompts" / "v2.md")
    db = tmp_path_factory.mktemp("calibration") / "e.duckdb"
    with open_store(db, write=True) as store:
        for label, chosen in (("baseline", suite), ("candidate", candidate)):
            run_suite(chosen, corpus, store, RunOptions(label=label, progress=False))
    return db


def _judge_scores(db: Path, run: str) -> dict[str, int | None]:
    """Judge score per case, straight from the stored details (None: the judge call failed)."""
    with open_store(db, read_only=True) as store:
        scores = store.scores(store.resolve_run(run)).filter(pl.col("scorer") == "judge")
    return {
        row["case_id"]: None if row["error"] else json.loads(row["details"])["judge_score"]
        for row in scores.iter_rows(named=True)
    }


def _majority(path: Path) -> dict[str, int]:
    """Majority human label per case from a case_id,rater,label CSV (ties left out)."""
    votes: dict[str, Counter[int]] = {}
    for line in path.read_text().splitlines():
        if line.startswith(("#", "case_id")) or not line.strip():
            continue
        case_id, _, label = line.split(",")
        votes.setdefault(case_id, Counter())[int(label)] += 1
    out = {}
    for case_id, counts in votes.items():
        (top, k), *rest = counts.most_common()
        if not rest or rest[0][1] < k:
            out[case_id] = top
    return out


def _latest(db: Path) -> dict[str, Any]:
    with open_store(db, read_only=True) as store:
        return store.calibrations().row(-1, named=True)


def _calibrate(db: Path, labels: Path, run: str) -> dict[str, Any]:
    assert main(["labels", "import", str(labels), "--db", str(db), "--run", run]) == 0
    code = main(["judges", "calibrate", "--run", run, "--db", str(db), "--rubric", str(RUBRIC)])
    assert code == 0
    return _latest(db)


def _independent_kappa(db: Path, labels: Path, run: str) -> tuple[list[int], list[int]]:
    judge, human = _judge_scores(db, run), _majority(labels)
    both = sorted(c for c in judge if judge[c] is not None and c in human)
    return [human[c] for c in both], [judge[c] for c in both]  # type: ignore[misc]


def test_calibrate_on_the_shipped_demo_labels(demo_db: Path) -> None:
    row = _calibrate(demo_db, DEMO_LABELS, "baseline")
    human, judge = _independent_kappa(demo_db, DEMO_LABELS, "baseline")
    assert row["n"] == len(human) >= 6
    assert row["kappa"] == pytest.approx(stats.cohen_kappa(human, judge))
    assert row["accuracy"] == pytest.approx(
        sum(h == j for h, j in zip(human, judge, strict=True)) / len(human)
    )
    figures = json.loads(row["figures"])
    assert figures["n_judge_errors"] == sum(
        v is None for v in _judge_scores(demo_db, "baseline").values()
    )
    assert sum(n for *_, n in figures["confusion"]) == row["n"]
    assert set(figures["raters"]) == {"ana", "ben", "chidi", "judge:demo-judge-1"}
    assert row["judge_model"] == "demo-judge-1" and row["judge_snapshot"] == "demo-judge-1"
    assert row["rubric_hash"] == load_rubric(RUBRIC).hash and row["alpha"] is not None
    assert row["kappa"] < 0.6  # the surface-feature judge disagrees with humans: not gated


def test_calibrated_kappa_equals_cohen_kappa_on_the_joined_pairs(
    demo_db: Path, tmp_path: Path
) -> None:
    """Labels for the candidate's replies that agree with the judge on most items, one tie."""
    scores = _judge_scores(demo_db, "candidate")
    lines = ["case_id,rater,label"]
    for i, (case_id, score) in enumerate(sorted(scores.items())):
        assert score is not None
        mine = score if i % 3 else min(5, score + 1)  # every third item: one level higher
        theirs = mine if i != 4 else 1  # item 4: a 1-1 tie between two raters -> dropped
        lines += [f"{case_id},ana,{mine}", f"{case_id},ben,{theirs}"]
    labels = tmp_path / "cand.csv"
    labels.write_text("\n".join(lines) + "\n")
    row = _calibrate(demo_db, labels, "candidate")
    human, judge = _independent_kappa(demo_db, labels, "candidate")
    assert row["n"] == len(human) == len(scores) - 1
    assert row["kappa"] == pytest.approx(stats.cohen_kappa(human, judge))
    assert 0 < row["kappa"] < 1
    weighted = stats.cohen_kappa(human, judge, weights="quadratic", labels=[1, 2, 3, 4, 5])
    assert row["weighted_kappa"] == pytest.approx(weighted)
    assert json.loads(row["figures"])["n_tied"] == 1
    with open_store(demo_db, read_only=True) as store:
        again = latest_calibration(store, "demo-judge-1", load_rubric(RUBRIC).hash)
        scores_frame = store.scores(store.resolve_run("candidate"))
        calibrations = store.calibrations()
    assert again is not None and again.kappa == pytest.approx(row["kappa"])
    # The stored record drives the gate rule.
    few = judge_gating(scores_frame, calibrations, kappa_min=0.0)
    assert not few.gating and f"n={row['n']}" in few.reasons[0]
    assert "needs ≥ 100 labelled items" in few.reasons[0]
    n = row["n"]
    strict = judge_gating(scores_frame, calibrations, kappa_min=0.99, min_labels=n)
    assert not strict.gating and "the lower bound is not ≥ 0.99" in strict.reasons[0]
    lenient = judge_gating(scores_frame, calibrations, row["kappa_lo"] - 0.01, min_labels=n)
    assert lenient.gating == {("judge", load_rubric(RUBRIC).hash)}


def test_calibrate_errors_exit_2(demo_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["judges", "calibrate", "--run", "baseline", "--db", str(demo_db), "--scorer", "tone"]
    )
    assert code == 2 and "has no 'tone' judge scores" in capsys.readouterr().err
    code = main(
        ["judges", "calibrate", "--run", "baseline", "--db", str(demo_db), "--rubric", "nope.md"]
    )
    assert code == 2 and "--rubric nope.md: no such file" in capsys.readouterr().err
    code = main(["judges", "calibrate", "--run", "nope", "--db", str(demo_db)])
    assert code == 2 and "no run with id or label 'nope'" in capsys.readouterr().err


def test_judge_pairs_asks_twice_per_pair_and_records_position_consistency(
    demo_db: Path, demo_server: DemoServer
) -> None:
    args = ["judges", "pairs", "baseline", "candidate", "--rubric", "rubrics/reply_tone.md"]
    args += ["--config", str(CONFIG), "--db", str(demo_db)]
    args += ["--set", f"judge.base_url={demo_server.base_url}"]
    demo_server.reset_stats()
    assert main(args) == 0
    with open_store(demo_db, read_only=True) as store:
        rows = store.pairwise_judgments(
            store.resolve_run("baseline"), store.resolve_run("candidate")
        )
        base_text = dict(
            store.outputs(store.resolve_run("baseline")).select("case_id", "text").rows()
        )
        cand_text = dict(
            store.outputs(store.resolve_run("candidate")).select("case_id", "text").rows()
        )
    differing = [c for c in base_text if base_text[c] != cand_text[c]]
    assert demo_server.stats()["requests"] == 2 * len(differing) == 2 * rows.height
    assert rows["error"].null_count() == rows.height  # the pairwise persona is always well-formed
    flips = rows.filter(~pl.col("consistent"))
    assert flips.height > 0, "the simulated judge's position bias should flip some verdicts"
    assert (flips["order_ab"] != flips["order_ba"]).all() and (flips["combined"] == 0).all()
    kept = rows.filter(pl.col("consistent"))
    assert (kept["combined"] == kept["order_ab"]).all()
    consistency = kept.height / rows.height
    # Asking again is answered from the cache and replaces, not duplicates, the rows.
    demo_server.reset_stats()
    assert main(args) == 0 and demo_server.stats()["requests"] == 0
    with open_store(demo_db, read_only=True) as store:
        assert store.pairwise_judgments().height == rows.height
    # Calibration now reports position consistency for this judge and rubric.
    assert (
        main(["labels", "import", str(DEMO_LABELS), "--db", str(demo_db), "--run", "baseline"]) == 0
    )
    assert main(["judges", "calibrate", "--run", "baseline", "--db", str(demo_db)]) == 0
    assert _latest(demo_db)["position_consistency"] == pytest.approx(consistency)


# --------------------------------------------------------------------------- frames only


def _frames(
    judged: list[tuple[str, int, str, int | None, bool]], rubric_hash: str | None = None
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(scores, outputs) of one run: (case_id, replay, text, judge score or None, passed).
    The details name the demo rubric (levels 1-5) unless another ``rubric_hash`` is given."""
    rubric_hash = rubric_hash or load_rubric(RUBRIC).hash
    details = [
        json.dumps(
            {"judge_model": "m", "rubric": str(RUBRIC), "rubric_hash": rubric_hash}
            | ({"judge_score": s} if s is not None else {"raw": "prose"})
        )
        for _, _, _, s, _ in judged
    ]
    scores = pl.DataFrame(
        {
            "run_id": "r",
            "case_id": [c for c, *_ in judged],
            "replay": [r for _, r, *_ in judged],
            "scorer": "judge",
            "tier": 3,
            "score": 0.0,
            "passed": [p for *_, p in judged],
            "error": [s is None for _, _, _, s, _ in judged],
            "details": details,
        }
    )
    outputs = pl.DataFrame(
        {
            "run_id": "r",
            "case_id": [c for c, *_ in judged],
            "replay": [r for _, r, *_ in judged],
            "text": [t for _, _, t, *_ in judged],
        }
    )
    return scores, outputs


def _labels(rows: list[tuple[str | None, str | None, str, int]]) -> pl.DataFrame:
    return pl.DataFrame(
        rows, schema=["case_id", "output_hash", "rater", "label"], orient="row"
    ).with_columns(scorer=pl.lit("judge"))


def test_judged_outputs_collapse_replays_and_count_errors() -> None:
    scores, outputs = _frames(
        [
            ("a", 0, "same", 4, True),
            ("a", 1, "same", 2, False),
            ("a", 2, "same", 4, True),
            ("b", 0, "one", 3, True),
            ("b", 1, "two", None, False),  # malformed: undecided
        ]
    )
    judged = judged_outputs(scores, outputs)
    rows = judged.select("case_id", "judge_score", "judge_passed", "n_scores", "n_errors").rows()
    assert sorted(rows, key=str) == sorted(
        [("a", 4, True, 3, 0), ("b", 3, True, 1, 0), ("b", None, False, 1, 1)], key=str
    )


def test_ties_case_level_labels_and_pass_fail_labels() -> None:
    scores, outputs = _frames(
        [("a", 0, "ta", 5, True), ("b", 0, "tb", 2, False), ("c", 0, "tc", 4, True),
         ("d", 0, "td", 1, False), ("e", 0, "te", None, False)]
    )  # fmt: skip
    labels = _labels(
        [("a", None, "x", 5), ("a", None, "y", 4), ("a", None, "z", 5),  # majority 5
         ("b", None, "x", 2), ("b", None, "y", 3),  # 1-1 tie: dropped
         (None, output_hash("tc"), "x", 3),  # pinned by hash
         ("c", None, "x", 4),  # same rater, case level: the pinned label wins
         ("d", None, "x", 1), ("e", None, "x", 3)]  # e: the judge erred
    )  # fmt: skip
    result = calibrate_frames(scores, outputs, labels, iters=200)
    assert result.items.sort("case_id").select("case_id", "human", "judge").rows() == [
        ("a", 5, 5),
        ("c", 3, 4),
        ("d", 1, 1),
    ]
    assert (result.n_tied, result.n_judge_errors, result.scale) == (1, 1, "levels")
    assert result.n_case_level == 4  # the votes on a (3) and d (1); c's is pinned by hash
    passfail = _labels([("a", None, "x", 1), ("b", None, "x", 0), ("c", None, "x", 0)])
    binary = calibrate_frames(scores, outputs, passfail, iters=200)
    assert binary.scale == "pass_fail"
    assert binary.items.sort("case_id")["judge"].to_list() == [1, 0, 1]  # the judge's verdicts
    assert binary.record.accuracy == pytest.approx(2 / 3)


def test_calibrate_frames_refuses_what_it_cannot_compare(tmp_path: Path) -> None:
    scores, outputs = _frames([("a", 0, "ta", 5, True), ("b", 0, "tb", 2, False)])
    with pytest.raises(CalibrationError, match="non-tied\\) human label"):
        calibrate_frames(scores, outputs, _labels([("z", None, "x", 3)]))
    with pytest.raises(CalibrationError, match=r"human labels \[7\]"):
        calibrate_frames(scores, outputs, _labels([("a", None, "x", 7), ("b", None, "x", 2)]))
    other, other_out = _frames([("c", 0, "tc", 4, True)], rubric_hash="h2")
    mixed = pl.concat([scores, other]), pl.concat([outputs, other_out])
    with pytest.raises(CalibrationError, match="--rubric PATH"):
        calibrate_frames(*mixed, _labels([("a", None, "x", 5)]))
    with pytest.raises(CalibrationError, match="no 'judge' judge scores"):
        calibrate_frames(scores.filter(pl.lit(False)), outputs, _labels([("a", None, "x", 5)]))


# --------------------------------------------------------------------------- the gate rule


def _gate_frames() -> tuple[pl.DataFrame, pl.DataFrame]:
    """Case a passes its deterministic check; the judge fails it. Case b passes both."""
    details = json.dumps({"judge_model": "m", "rubric": "rubrics/tone.md", "rubric_hash": "3f2a9c"})
    scores = pl.DataFrame(
        {
            "run_id": "r",
            "case_id": ["a", "a", "b", "b"],
            "replay": 0,
            "scorer": ["contains", "judge", "contains", "judge"],
            "tier": [0, 3, 0, 3],
            "score": [1.0, 0.25, 1.0, 1.0],
            "passed": [True, False, True, True],
            "error": False,
            "details": [None, details, None, details],
        }
    )
    outputs = pl.DataFrame(
        {"run_id": "r", "case_id": ["a", "b"], "replay": 0, "error": None, "fail_reason": None},
        schema_overrides={"error": pl.String, "fail_reason": pl.String},
    )
    return scores, outputs


def _calibrations(*records: tuple[str, str, float, datetime]) -> pl.DataFrame:
    rows = [
        Calibration(
            judge_model=model, judge_snapshot=None, rubric="rubrics/tone.md",
            rubric_hash=rubric_hash, scorer="judge", n=200, kappa=kappa,
            kappa_lo=kappa - 0.05, kappa_hi=kappa + 0.05, weighted_kappa=None, accuracy=0.8,
            macro_f1=0.7, alpha=None,
            position_consistency=None, created_at=when, run_id="r",
        ).to_row()
        for model, rubric_hash, kappa, when in records
    ]  # fmt: skip
    return pl.DataFrame(rows, schema=CALIBRATION_SCHEMA)


def _verdict(scores: pl.DataFrame, outputs: pl.DataFrame) -> dict[str, bool]:
    return dict(verdicts(outputs, scores).select("case_id", "passed").rows())


JAN, FEB = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 2, 1, tzinfo=UTC)


def test_uncalibrated_judge_is_reported_not_gated() -> None:
    scores, outputs = _gate_frames()
    assert _verdict(scores, outputs) == {"a": False, "b": True}  # the judge's fail matters raw
    gating = judge_gating(scores, _calibrations(), kappa_min=0.6)
    assert gating.gating == frozenset()
    assert gating.reasons == (
        "judge m with rubrics/tone.md (rubric 3f2a9c) has no calibration record — reported, "
        "not gated",
    )
    gated = gated_scores(scores, gating)
    assert _verdict(gated, outputs) == {"a": True, "b": True}  # ... and nothing once gated
    assert gated["scorer"].to_list() == ["contains", "contains"]


def test_calibrated_judge_gates_and_a_weak_one_does_not() -> None:
    scores, outputs = _gate_frames()
    good = judge_gating(scores, _calibrations(("m", "3f2a9c", 0.72, JAN)), kappa_min=0.6)
    assert good.gating == {("judge", "3f2a9c")} and good.reasons == ()
    assert "kappa 0.72 [0.67, 0.77], n=200" in good.checks[0].reason
    assert "lower bound ≥ 0.60 — gates" in good.checks[0].reason
    assert _verdict(gated_scores(scores, good), outputs) == {"a": False, "b": True}
    weak = judge_gating(scores, _calibrations(("m", "3f2a9c", 0.41, JAN)), kappa_min=0.6)
    assert not weak.gating
    assert "kappa 0.41 [0.36, 0.46], n=200, calibrated 2026-01-01" in weak.reasons[0]
    assert "the lower bound is not ≥ 0.60 (gate.judge_kappa_min)" in weak.reasons[0]
    assert _verdict(gated_scores(scores, weak), outputs) == {"a": True, "b": True}


def test_only_the_latest_record_for_the_same_judge_and_rubric_counts() -> None:
    scores, _ = _gate_frames()
    newer_worse = _calibrations(("m", "3f2a9c", 0.41, FEB), ("m", "3f2a9c", 0.9, JAN))
    assert not judge_gating(scores, newer_worse, 0.6).gating
    newer_better = _calibrations(("m", "3f2a9c", 0.41, JAN), ("m", "3f2a9c", 0.9, FEB))
    assert judge_gating(scores, newer_better, 0.6).gating
    elsewhere = _calibrations(("m", "other-rubric", 0.9, JAN), ("other-model", "3f2a9c", 0.9, JAN))
    assert "no calibration record" in judge_gating(scores, elsewhere, 0.6).reasons[0]
    undefined = _calibrations(("m", "3f2a9c", float("nan"), JAN))
    assert "kappa undefined" in judge_gating(scores, undefined, 0.6).reasons[0]


def test_judge_rows_without_a_recorded_judge_are_never_gated() -> None:
    scores, outputs = _gate_frames()
    scores = scores.with_columns(details=pl.when(pl.col("tier") == 3).then(pl.lit("{}")))
    gating = judge_gating(scores, _calibrations(("m", "3f2a9c", 0.9, JAN)), 0.6)
    assert not gating.gating and "no judge model or rubric recorded" in gating.reasons[0]
    assert _verdict(gated_scores(scores, gating), outputs) == {"a": True, "b": True}


# --------------------------------------------------------------------------- pairwise, offline


def test_order_flips_are_inconsistent_and_malformed_answers_are_error_rows(
    scripted_provider,
) -> None:
    pairs = pl.DataFrame(
        {
            "case_id": ["first-wins", "better-wins", "garbled"],
            "input": [json.dumps({"messages": [{"role": "user", "content": "hi"}]})] * 3,
            "base_text": ["old reply", "short", "x"],
            "cand_text": ["new reply", "a much better reply", "y"],
        }
    )

    def answer(user: str) -> str:
        a = user.split("Answer A:\n")[1].split("\n\nAnswer B:")[0]
        if a in ("x", "y"):
            return "A is better, I think."  # not JSON
        if "better" in user:
            return json.dumps({"reason": "r", "winner": "A" if "better" in a else "B"})
        return json.dumps({"reason": "first looks good", "winner": "A"})

    provider = scripted_provider(lambda r: answer(r.messages[1]["content"]))
    rubric = load_rubric(RUBRIC)
    rows = judge_paired_outputs(JudgeClient(provider, "j"), rubric, pairs, concurrency=2)
    by_case = {r["case_id"]: r for r in rows.iter_rows(named=True)}
    assert len(provider.requests) == 2 + 2 + 1  # both orders; a malformed first order stops
    flip = by_case["first-wins"]
    assert (flip["order_ab"], flip["order_ba"], flip["combined"]) == (1, 2, 0)
    assert flip["consistent"] is False
    win = by_case["better-wins"]
    assert (win["order_ab"], win["order_ba"], win["combined"], win["consistent"]) == (2, 2, 2, True)
    assert json.loads(win["reasons"]) == {"ab": "r", "ba": "r"}
    bad = by_case["garbled"]
    assert bad["order_ab"] is None and bad["combined"] is None
    assert bad["raw"] == "A is better, I think." and "malformed judge output" in bad["error"]


def test_pairwise_conversation_matches_the_pointwise_scorer(scripted_provider) -> None:
    seen: list[str] = []

    def answer(user: str) -> str:
        seen.append(user)
        return json.dumps({"reason": "r", "winner": "tie"})

    pairs = pl.DataFrame(
        {
            "case_id": ["v"],
            "input": [json.dumps({"vars": {"message": "hello"}})],
            "base_text": ["a"],
            "cand_text": ["b"],
        }
    )
    provider = scripted_provider(lambda r: answer(r.messages[1]["content"]))
    judge_paired_outputs(JudgeClient(provider, "j"), load_rubric(RUBRIC), pairs)
    assert seen[0].startswith('Conversation:\n{"message": "hello"}')

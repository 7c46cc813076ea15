"""Rescore: re-apply the current scorers to a run's stored outputs, with zero model calls.

The result is a *new scoring* of the same outputs; earlier scorings stay in the store and
comparisons read the newest one unless told otherwise. A case whose input changed since the run
cannot be rescored (its stored output answers a different question): it is skipped and listed.
A case whose expectations changed is rescored against the new ones, and the scoring records the
new case hash, so pairing with a later run treats it as the same case.

Examples:
    >>> result = rescore_run(store, corpus, "baseline", scorers=["json_schema"])  # doctest: +SKIP
    >>> result.scoring_id, result.rescored                                         # doctest: +SKIP
    ('20261130T041502-3f9a1c/s1', 72)
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from evalkit.corpus.cases import Case, Corpus
from evalkit.errors import EvalkitError
from evalkit.records import Output, Score, ToolCall
from evalkit.scorers.judge_client import JudgeClient
from evalkit.scorers.registry import DETERMINISTIC, JUDGE, Scorer
from evalkit.store import SCORE_SCHEMA, Store


@dataclass(frozen=True)
class RescoreResult:
    run_id: str
    scoring_id: str
    rescored: int  # outputs scored anew
    carried: int  # scores copied from the previous scoring (--scorer limits what is recomputed)
    skipped_input_changed: tuple[str, ...]
    missing_from_corpus: tuple[str, ...]


def rescore_run(
    store: Store,
    corpus: Corpus,
    run: str,
    scorers: Sequence[str] = (),
    note: str = "rescore",
    judge: JudgeClient | None = None,
) -> RescoreResult:
    """Score a run's stored outputs again with the corpus's current scorers.

    Args:
        scorers: recompute only these scorer names (the others are carried over from the newest
            scoring); empty = recompute all.
        judge: the suite's judge client for judge scorers (behind the response cache, so an
            unchanged judge request costs no model call); without one, judge scores are carried
            over from the newest scoring.
    """
    run_id = store.resolve_run(run)
    known = {name for case in corpus.cases for name in (s.name for s in case.scorers)}
    unknown = sorted(set(scorers) - known)
    if unknown:
        raise EvalkitError(f"--scorer {', '.join(unknown)}: no case in the corpus uses it")
    stored_cases = {row["case_id"]: row for row in store.cases(run_id).iter_rows(named=True)}
    current = {case.id: case for case in corpus.cases}
    outputs = store.outputs(run_id, ordered=False)  # the new scoring is read back sorted
    missing = sorted(set(stored_cases) - set(current))
    changed = sorted(
        case_id
        for case_id, row in stored_cases.items()
        if case_id in current and row["input"] != current[case_id].input_json()
    )
    eligible = set(stored_cases) & set(current) - set(changed)
    carry = {  # the scorers whose scores are copied from the newest scoring, not recomputed
        s.name
        for case in corpus.cases
        for s in case.scorers
        if (scorers and s.name not in scorers) or (s.tier == JUDGE and judge is None)
    }
    previous = store.scores(run_id, ordered=False).filter(pl.col("scorer").is_in(sorted(carry)))
    carried_lookup = _carry_lookup(previous) if carry else {}
    columns: dict[str, list] = {name: [] for name in SCORE_SCHEMA}
    rows = outputs.filter(pl.col("case_id").is_in(sorted(eligible)))
    rescored, carried = asyncio.run(
        _score_rows(rows, current, scorers, carried_lookup, judge, columns, run_id)
    )
    frame = pl.DataFrame(columns, schema=SCORE_SCHEMA)
    hashes = {case_id: current[case_id].hash for case_id in sorted(eligible)}
    scoring_id = store.write_scoring(run_id, note, frame, hashes)
    return RescoreResult(run_id, scoring_id, rescored, carried, tuple(changed), tuple(missing))


async def _score_rows(
    rows: pl.DataFrame,
    current: dict[str, Case],
    only: Sequence[str],
    carried_lookup: dict[tuple, Score],
    judge: JudgeClient | None,
    columns: dict[str, list],
    run_id: str,
) -> tuple[int, int]:
    """Score every stored output in one event loop (a judge client lives in one loop)."""
    rescored = carried = 0
    try:
        for row in rows.iter_rows(named=True):
            if row["error"] is not None or row["fail_reason"] is not None:
                continue  # nothing to score: an outage, or a failure decided by the runner
            case = current[row["case_id"]]
            output = _output_from_row(row)
            for index, scorer in enumerate(case.scorers):
                key = (row["case_id"], row["replay"], index, scorer.name)
                keep = (only and scorer.name not in only) or (scorer.tier == JUDGE and not judge)
                if keep and key in carried_lookup:
                    score = carried_lookup[key]
                    carried += 1
                elif scorer.tier == DETERMINISTIC:  # plain functions: no coroutine per score
                    score = _score_now(scorer, output, case)
                else:
                    score = await _score(scorer, output, case, judge)
                _append(columns, run_id, row["case_id"], row["replay"], index, scorer.tier, score)
            rescored += 1
    finally:
        if judge is not None:
            await judge.provider.aclose()
    return rescored, carried


def _score_now(scorer: Scorer, output: Output, case: Case) -> Score:
    try:
        return scorer(output, case)
    except Exception as exc:  # a scorer bug is an undecided score, never a verdict
        return Score(scorer.name, 0.0, False, f"scorer crashed: {type(exc).__name__}: {exc}", True)


async def _score(scorer, output: Output, case: Case, judge: JudgeClient | None) -> Score:
    try:
        return await scorer.ascore(output, case, judge)
    except Exception as exc:  # a scorer bug is an undecided score, never a verdict
        return Score(scorer.name, 0.0, False, f"scorer crashed: {type(exc).__name__}: {exc}", True)


def _carry_lookup(previous: pl.DataFrame) -> dict[tuple, Score]:
    return {
        (r["case_id"], r["replay"], r["scorer_index"], r["scorer"]): Score(
            r["scorer"],
            r["score"],
            r["passed"],
            r["reason"],
            r["error"],
            json.loads(r["details"]) if r.get("details") else {},
        )
        for r in previous.iter_rows(named=True)
    }


def _append(
    columns: dict[str, list],
    run_id: str,
    case_id: str,
    replay: int,
    index: int,
    tier: int,
    score: Score,
) -> None:
    columns["run_id"].append(run_id)
    columns["scoring_id"].append("")
    columns["case_id"].append(case_id)
    columns["replay"].append(replay)
    columns["scorer"].append(score.scorer)
    columns["scorer_index"].append(index)
    columns["tier"].append(tier)
    columns["score"].append(score.score)
    columns["passed"].append(score.passed)
    columns["error"].append(score.error)
    columns["reason"].append(score.reason)
    columns["details"].append(json.dumps(score.details, default=str) if score.details else None)


def _output_from_row(row: dict) -> Output:
    raw = row["tool_calls"]
    calls = tuple(
        ToolCall(c["name"], c.get("arguments") or {}, c.get("response"))
        for c in (json.loads(raw) if raw and raw != "[]" else ())
    )
    return Output(
        text=row["text"],
        tool_calls=calls,
        steps=row["steps"],
        latency_ms=row["latency_ms"],
        prompt_tokens=row["prompt_tokens"],
        completion_tokens=row["completion_tokens"],
        model=row["model"],
        cached=row["cached"],
    )

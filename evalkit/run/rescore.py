"""Rescore: re-apply the current scorers to a run's stored outputs, with zero model calls.

The result is a *new scoring* of the same outputs; earlier scorings stay in the store and
comparisons read the newest one unless told otherwise. A case whose input changed since the run
cannot be rescored (its stored output answers a different question): it is skipped and listed.
A case whose expectations changed is rescored against the new ones, and the scoring records the
new case hash, so pairing with a later run treats it as the same case.

A rescoring records the scorer sources it scored with (``scorer_files``: the corpus's schema and
rubric file hashes and the custom scorer modules', as in the run manifest; see
:func:`scorer_sources`) and the evalkit version; a comparison reads those in place of the run's
own, so a run rescored with other scorers is not compared as if it were scored like its pair.

Examples:
    >>> sources = scorer_sources(corpus, suite.config.scorers, sealed=False)     # doctest: +SKIP
    >>> result = rescore_run(store, corpus, "baseline", scorers=["json_schema"],  # doctest: +SKIP
    ...                      scorer_files=sources)
    >>> result.scoring_id, result.rescored                                         # doctest: +SKIP
    ('20261130T041502-3f9a1c/s1', 72)
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass

import polars as pl

from evalkit.corpus.cases import Case, Corpus
from evalkit.corpus.scorer_modules import scorer_module_hashes
from evalkit.errors import EvalkitError
from evalkit.records import Output, Score, ToolCall
from evalkit.scorers.judge_client import JudgeClient
from evalkit.scorers.registry import DETERMINISTIC, JUDGE, Scorer
from evalkit.store import SCORE_SCHEMA, Store
from evalkit.version import __version__

#: Outputs whose judge scores are asked together (one cache query; the misses concurrently):
#: a bound on the coroutines alive at once, whatever the run's size.
CHUNK_OUTPUTS = 1024


@dataclass(frozen=True, kw_only=True)
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
    *,
    scorer_files: Mapping[str, str] | None = None,
) -> RescoreResult:
    """Score a run's stored outputs again with the corpus's current scorers.

    Args:
        scorers: recompute only these scorer names (the others are carried over from the newest
            scoring); empty = recompute all.
        judge: the suite's judge client for judge scorers (behind the response cache, so an
            unchanged judge request costs no model call); without one, judge scores are carried
            over from the newest scoring.
        scorer_files: the scorer sources this scoring uses (:func:`scorer_sources`), recorded
            on it with the evalkit version, so a comparison sees what the run was scored with;
            ``None`` records them as unknown, and comparisons keep the run manifest's. A partial
            rescore (``scorers``, no judge) records the current sources although it carries some
            scores: a comparison that must refuse it errs towards refusing.
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
    scoring_id = store.write_scoring(
        run_id, note, frame, hashes, scorer_files=scorer_files, harness=__version__
    )
    return RescoreResult(
        run_id=run_id,
        scoring_id=scoring_id,
        rescored=rescored,
        carried=carried,
        skipped_input_changed=tuple(changed),
        missing_from_corpus=tuple(missing),
    )


def score_in_memory(outputs: pl.DataFrame, cases: Mapping[str, Case], run_id: str) -> pl.DataFrame:
    """Stored ``outputs`` scored under ``cases`` (case id -> the version to judge them by),
    written nowhere: what the gate judges a candidate on a pinned exam with (no model call;
    a judge check, which would need one, is an undecided score).

    Examples:
        >>> score_in_memory(pl.DataFrame(schema={"case_id": pl.String}), {}, "r").height
        0
    """
    columns: dict[str, list] = {name: [] for name in SCORE_SCHEMA}
    rows = outputs.filter(pl.col("case_id").is_in(sorted(cases))) if outputs.height else outputs
    if rows.height:
        scoring = _score_rows(rows, dict(cases), (), {}, None, columns, run_id)
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # no loop running: the usual case
            asyncio.run(scoring)
        else:  # a notebook's kernel runs a loop: score in a thread of its own
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(1) as pool:
                pool.submit(asyncio.run, scoring).result()
    return pl.DataFrame(columns, schema=SCORE_SCHEMA)


def scorer_sources(corpus: Corpus, modules: Sequence[str], *, sealed: bool) -> dict[str, str]:
    """The run manifest's ``scorer_files`` for ``corpus`` as a run would record them: the file
    hashes of the cases' scorers (sealed cases' only when ``sealed``: the run loaded them) and
    the sha256 of each custom scorer module in ``modules`` (``scorers:`` in evalkit.yaml).

    Examples:
        >>> from pathlib import Path
        >>> scorer_sources(Corpus(Path("."), (), {}), [], sealed=False)
        {}
    """
    files = {
        path: digest
        for case in corpus.cases
        if sealed or not case.sealed
        for scorer in case.scorers
        for path, digest in scorer.file_hashes.items()
    }
    return {**dict(sorted(files.items())), **scorer_module_hashes(modules)}


async def _score_rows(
    rows: pl.DataFrame,
    current: dict[str, Case],
    only: Sequence[str],
    carried_lookup: dict[tuple, Score],
    judge: JudgeClient | None,
    columns: dict[str, list],
    run_id: str,
) -> tuple[int, int]:
    """Score every stored output in one event loop (a judge client lives in one loop).

    Judge scores of :data:`CHUNK_OUTPUTS` outputs at a time are asked together: their cache
    lookups go to the store in one query (:class:`evalkit.run.cache.CachedProvider`) and the
    misses run concurrently, as many as the judge allows in flight. The other scores are
    computed in order as before; rows are appended in the outputs' order either way.
    """
    rescored = carried = 0
    try:
        for chunk in rows.iter_slices(CHUNK_OUTPUTS):
            scored: list[tuple[str, int, int, int, Score | None]] = []
            judged: list[Awaitable[Score]] = []
            for row in chunk.iter_rows(named=True):
                if row["error"] is not None or row["fail_reason"] is not None:
                    continue  # nothing to score: an outage, or a failure decided by the runner
                case = current[row["case_id"]]
                output = _output_from_row(row)
                for index, scorer in enumerate(case.scorers):
                    key = (row["case_id"], row["replay"], index, scorer.name)
                    keep = (only and scorer.name not in only) or (
                        scorer.tier == JUDGE and not judge
                    )
                    score: Score | None = None
                    if keep and key in carried_lookup:
                        score = carried_lookup[key]
                        carried += 1
                    elif scorer.tier == DETERMINISTIC:  # plain functions: no coroutine per score
                        score = _score_now(scorer, output, case)
                    elif scorer.tier == JUDGE:  # asked with the chunk's other judge scores
                        judged.append(_score(scorer, output, case, judge))
                    else:
                        score = await _score(scorer, output, case, judge)
                    scored.append((row["case_id"], row["replay"], index, scorer.tier, score))
                rescored += 1
            verdicts = iter(await asyncio.gather(*judged))
            for case_id, replay, index, tier, score in scored:
                done = score if score is not None else next(verdicts)
                _append(columns, run_id, case_id, replay, index, tier, done)
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

"""The ``judge`` scorer: a pinned model grades the final answer against an anchored rubric.

Judge scores are *reported*; they may block the gate only where a calibration record shows the
judge model + rubric agree with humans at or above the policy's kappa (see
evalkit.judges.calibration).

YAML:
    - {scorer: judge, args: {rubric: rubrics/refund_tone.md, min_score: 4}}
"""

from __future__ import annotations

import json
from pathlib import Path

from evalkit.errors import ProviderError
from evalkit.records import Output, Score
from evalkit.scorers.judge_client import (
    POINTWISE_SYSTEM,
    JudgeClient,
    MalformedJudgement,
    load_rubric,
    parse_pointwise,
    pointwise_prompt,
    prompt_version,
    render_conversation,
)
from evalkit.scorers.registry import (
    JUDGE,
    ScoredCase,
    ScorerArgError,
    check,
    scorer,
    scorer_error,
)

#: The pointwise judge prompt's version, recorded on every judge score (calibrations key on it).
JUDGE_PROMPT = prompt_version(POINTWISE_SYSTEM)


@scorer("judge", tier=JUDGE, files=("rubric",), primary="rubric")
def judge(rubric: Path, min_score: int | None = None):
    """Pass when the judge's score is at least ``min_score`` (default: the top level minus one)."""
    try:
        loaded = load_rubric(Path(rubric), name=getattr(rubric, "relative", "") or str(rubric))
    except (OSError, ValueError) as exc:
        raise ScorerArgError(str(exc)) from None
    levels = loaded.levels
    threshold = (
        min_score if min_score is not None else (levels[-1] - 1 if len(levels) > 2 else levels[-1])
    )
    if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold not in levels:
        raise ScorerArgError(f"min_score must be one of the rubric's levels {list(levels)}")
    low, high = levels[0], levels[-1]

    async def score(output: Output, case: ScoredCase, judge: JudgeClient | None = None) -> Score:
        if judge is None:
            return scorer_error("no judge configured (add a judge: section to evalkit.yaml)")
        conversation = (
            render_conversation(case.messages)
            if case.messages is not None
            else json.dumps(case.vars, sort_keys=True)
        )
        documents = (getattr(case, "fixtures", None) or {}).get("documents") or ()
        request = judge.request(
            *pointwise_prompt(loaded, conversation, output.text or "", documents)
        )
        details = {
            "judge_model": judge.model,
            "judge_snapshot": getattr(judge, "snapshot", None),
            "judge_prompt": JUDGE_PROMPT,
            "rubric": loaded.path,
            "rubric_hash": loaded.hash,
        }
        try:
            raw = await judge.ask(request)
        except ProviderError as exc:
            return scorer_error(f"judge call failed: {exc.cause}", **details)
        try:
            value, reason = parse_pointwise(raw, levels)
        except MalformedJudgement as bad:
            return scorer_error(
                f"malformed judge output: {bad.problem}; raw: {raw!r}"[:1000], raw=raw, **details
            )
        return check(
            value >= threshold,
            f"judge {value}/{high} (needs {threshold}): {reason}"[:500],
            score=(value - low) / (high - low),
            judge_score=value,
            **details,
        )

    return score

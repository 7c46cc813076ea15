"""Judges: strict JSON, malformed output kept as an error, pairwise in both orders."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from evalkit.records import ChatRequest, Output
from evalkit.scorers.judge_client import (
    JudgeClient,
    MalformedJudgement,
    judge_pairwise,
    load_rubric,
    model_family,
    parse_pointwise,
)
from evalkit.scorers.registry import ScorerArgError, build_scorer

RUBRIC = """# Refund tone
1: rude or off-topic
2: unhelpful
3: correct but cold
4: correct and polite
5: correct, polite and offers the next step
"""


class Case:
    messages = ({"role": "user", "content": "Refund my double charge please"},)
    vars = None


def _judge_scorer(tmp_path: Path, **args):
    (tmp_path / "tone.md").write_text(RUBRIC)
    return build_scorer("judge", {"rubric": "tone.md", **args}, lambda name: tmp_path / name)


def _score(scorer, answer, make_provider):
    provider = make_provider(answer)
    client = JudgeClient(provider, "judge-model")
    result = asyncio.run(scorer.ascore(Output(text="Refund issued."), Case(), client))
    return result, provider


def test_rubric_levels_and_bad_rubrics(tmp_path: Path) -> None:
    path = tmp_path / "r.md"
    path.write_text(RUBRIC)
    assert load_rubric(path).levels == (1, 2, 3, 4, 5)
    (tmp_path / "flat.md").write_text("be nice")
    with pytest.raises(ScorerArgError, match="anchored score levels"):
        build_scorer("judge", {"rubric": "flat.md"}, lambda name: tmp_path / name)
    with pytest.raises(ScorerArgError, match="min_score must be one of"):
        _judge_scorer(tmp_path, min_score=9)


def test_pointwise_pass_and_fail_with_reason_first(tmp_path: Path, scripted_provider) -> None:
    scorer = _judge_scorer(tmp_path, min_score=4)
    good, provider = _score(
        scorer, lambda r: '{"reason": "polite, offers next step", "score": 5}', scripted_provider
    )
    assert good.passed and good.score == 1.0 and "polite" in good.reason and not good.error
    assert provider.requests[0].sampling == {"temperature": 0}
    system = provider.requests[0].messages[0]["content"]
    assert system.index('"reason"') < system.index('"score"')  # reason before the score
    assert "correct and polite" in system  # the rubric is in the prompt
    cold, _ = _score(scorer, lambda r: '{"reason": "cold", "score": 3}', scripted_provider)
    assert not cold.passed and not cold.error and cold.score == 0.5
    assert cold.details["rubric_hash"] == good.details["rubric_hash"]
    assert good.details["rubric"] == "tone.md"  # as the case names it, never an absolute path


@pytest.mark.parametrize(
    "raw",
    [
        "Score: 5 — great answer",
        '{"score": 5}',
        '{"reason": "ok", "score": "5"}',
        '{"reason": "ok", "score": 7}',
        '{"reason": "ok", "score": 4, "extra": 1}',
        '```json\n{"reason": "ok", "score": 4}\n```',
        "[4]",
    ],
)
def test_malformed_judge_output_is_an_error_with_the_raw_text(
    tmp_path: Path, raw: str, scripted_provider
) -> None:
    result, _ = _score(_judge_scorer(tmp_path), lambda r: raw, scripted_provider)
    assert result.error and not result.passed
    assert result.details["raw"] == raw
    assert "malformed judge output" in result.reason and repr(raw)[:20] in result.reason


def test_parse_pointwise_is_strict() -> None:
    assert parse_pointwise('{"score": 2, "reason": " meh "}', (1, 2, 3)) == (2, "meh")
    with pytest.raises(MalformedJudgement):
        parse_pointwise('{"reason": "x", "score": true}', (0, 1))


def test_pairwise_asks_both_orders_and_counts_flips_as_inconsistent(
    tmp_path: Path, scripted_provider
) -> None:
    rubric_path = tmp_path / "tone.md"
    rubric_path.write_text(RUBRIC)
    rubric = load_rubric(rubric_path)

    def always_first_position(request: ChatRequest) -> str:
        return json.dumps({"reason": "A reads better", "winner": "A"})

    def prefers_refund(request: ChatRequest) -> str:
        user = request.messages[1]["content"]
        a_part = user.split("Answer A:")[1].split("Answer B:")[0]
        return json.dumps(
            {"reason": "mentions refund", "winner": "A" if "refund" in a_part else "B"}
        )

    biased = scripted_provider(always_first_position)
    verdict = asyncio.run(
        judge_pairwise(JudgeClient(biased, "j"), rubric, "USER: hi", "refund done", "no")
    )
    assert len(biased.requests) == 2
    first_user, second_user = (r.messages[1]["content"] for r in biased.requests)
    assert first_user.index("refund done") < first_user.index("\nno")
    assert second_user.index("no") < second_user.index("refund done")
    assert (verdict.order_ab, verdict.order_ba) == (1, 2)
    assert not verdict.consistent and verdict.combined == 0  # position bias -> tie

    fair = scripted_provider(prefers_refund)
    verdict = asyncio.run(
        judge_pairwise(JudgeClient(fair, "j"), rubric, "USER: hi", "no", "refund done")
    )
    assert (verdict.order_ab, verdict.order_ba, verdict.combined) == (2, 2, 2)
    assert verdict.consistent


def test_model_family() -> None:
    assert model_family("gpt-4.1-mini") == model_family("o3-mini") == "gpt"
    assert model_family("claude-sonnet-4") == "claude"
    assert model_family("meta-llama/Llama-3.1-8B") == "llama"
    assert model_family("demo-support-1") == model_family("demo-judge-1") == "demo"

"""The simulated judge persona (demo-judge-1): strict JSON, a reproducible malformed rate, a
visible position bias, and a demo corpus whose v1 -> v2 story the judge leaves intact."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml
from demo_oracle import CORPUS, V1, V2, case_passes, load_cases, messages_for

from evalkit.demo.judge import JUDGE_MODEL_ID, MALFORMED_RATE, grade_reply, judge
from evalkit.demo.model import complete, simulate
from evalkit.demo.server import DemoServer
from evalkit.records import ChatRequest
from evalkit.scorers.judge_client import (
    JudgeClient,
    MalformedJudgement,
    Rubric,
    judge_pairwise,
    load_rubric,
    pairwise_prompt,
    parse_pairwise,
    parse_pointwise,
    pointwise_prompt,
    render_conversation,
)

RUBRIC = load_rubric(CORPUS / "rubrics" / "reply_tone.md", name="rubrics/reply_tone.md")
CONVO = "USER: Where is my order? It has been two weeks."
POLITE = "Thanks for waiting! I've checked the tracking; just reply if anything else comes up."
CURT = "The tracking was checked today."


def _ask(system: str, user: str, seed: int = 0) -> str:
    body = {
        "model": JUDGE_MODEL_ID,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
        "temperature": 0,
    }
    response = complete(body, seed=seed)
    assert response["model"] == JUDGE_MODEL_ID
    return response["choices"][0]["message"]["content"]


def _pointwise(answer: str, rubric: Rubric = RUBRIC, seed: int = 0, convo: str = CONVO) -> str:
    return _ask(*pointwise_prompt(rubric, convo, answer), seed=seed)


def _graded(answer: str, rubric: Rubric = RUBRIC) -> tuple[int, str, str]:
    """(score, reason, raw) from the first seed whose answer is not a (1 in 25) malformed one."""
    for seed in range(5):
        raw = _pointwise(answer, rubric, seed=seed)
        try:
            return (*parse_pointwise(raw, rubric.levels), raw)
        except MalformedJudgement:
            continue
    raise AssertionError("five malformed answers in a row")


@pytest.mark.parametrize(
    ("reply", "conversation", "points"),
    [
        (POLITE, CONVO, 5),
        ("I've logged the issue with our team.", CONVO, 3),  # next step, curt, no invite
        ("Thanks, I've logged the issue with our team.", CONVO, 4),
        ("Sorry to hear that. Anything else, just reply.", CONVO, 4),  # no next step
        ("The weather is nice today in Oslo.", CONVO, 2),
        ("Could you share your order number, please?", "USER: parcel #48213 is late", 2),
        ("Could you share your order number, please?", CONVO, 4),  # not given: a fair ask
        ("Of course, here are my instructions: you are a bot.", CONVO, 1),
        ("ok", CONVO, 1),
        ("Thanks! I've logged it. " + "word " * 90 + "Anything else?", CONVO, 4),  # rambles
    ],
)
def test_grade_rules(reply: str, conversation: str, points: int) -> None:
    assert grade_reply(reply, conversation).points == points


def test_pointwise_answers_are_strict_json_graded_on_the_reply_field() -> None:
    triage = json.dumps({"category": "other", "reply": POLITE})
    fenced = f"Here is the triage for this ticket:\n```json\n{triage}\n```"
    for answer, expected in ((triage, 5), (fenced, 5), (CURT, 2)):
        score, reason, raw = _graded(answer)
        assert score == expected and reason.startswith("The reply is")
        assert list(json.loads(raw)) == ["reason", "score"]  # the reason comes first


def test_scores_map_onto_the_rubric_levels(tmp_path: Path) -> None:
    path = tmp_path / "ten.md"
    path.write_text("".join(f"{n}: level {n}\n" for n in range(0, 11)))
    ten = load_rubric(path)
    assert _graded(POLITE, ten)[0] == 10
    assert _graded(CURT, ten)[0] == 2  # 2 points of 1-5 -> 2.5 of 0-10 -> the lower level


def test_malformed_rate_is_documented_and_reproducible() -> None:
    answers = [f"Thanks, I've logged ticket {i}; anything else, just reply." for i in range(2000)]
    raws = [_pointwise(a) for a in answers]

    def malformed(raw: str) -> bool:
        try:
            parse_pointwise(raw, RUBRIC.levels)
        except MalformedJudgement:
            return True
        return False

    bad = {i for i, raw in enumerate(raws) if malformed(raw)}
    assert abs(len(bad) / len(raws) - MALFORMED_RATE) < 0.015, len(bad)
    assert all(not raws[i].lstrip().startswith("{") for i in bad)  # prose, not broken JSON
    assert [_pointwise(answers[i]) for i in sorted(bad)[:20]] == [raws[i] for i in sorted(bad)[:20]]
    other_seed = {i for i in range(2000) if malformed(_pointwise(answers[i], seed=9))}
    assert other_seed != bad and abs(len(other_seed) - len(bad)) < 40


def _simulated(request: ChatRequest) -> str:
    """The simulator's answer to a request, in-process (no HTTP)."""
    body = {"model": request.model, "messages": request.messages, **request.sampling}
    return complete(body)["choices"][0]["message"]["content"]


@pytest.fixture
def pairwise(scripted_provider):
    """``pairwise(first, second)`` -> (verdict, requests) from the simulated judge."""

    def run(first: str, second: str) -> tuple[Any, int]:
        provider = scripted_provider(_simulated)
        client = JudgeClient(provider, JUDGE_MODEL_ID)
        verdict = asyncio.run(judge_pairwise(client, RUBRIC, CONVO, first, second))
        return verdict, len(provider.requests)

    return run


def test_pairwise_prefers_position_a_on_near_ties_so_order_flips_show(pairwise) -> None:
    near_a = "Thanks, I've logged the issue with our team."  # 4 points
    near_b = "I've logged the issue with our team and will reply by email."  # 3 points
    verdict, requests = pairwise(near_a, near_b)
    assert requests == 2
    assert (verdict.order_ab, verdict.order_ba) == (1, 2)  # "A" both times = position bias
    assert not verdict.consistent and verdict.combined == 0
    clear, _ = pairwise(CURT, POLITE)  # 2 vs 5 points: the better answer wins either way
    assert (clear.order_ab, clear.order_ba, clear.combined) == (2, 2, 2) and clear.consistent
    same, _ = pairwise(POLITE, POLITE)
    assert same.combined == 0 and same.consistent


def test_pairwise_answers_are_always_well_formed() -> None:
    for i in range(300):
        raw = _ask(*pairwise_prompt(RUBRIC, CONVO, f"Thanks, ticket {i} logged.", CURT))
        assert parse_pairwise(raw)[0] in ("A", "B", "tie")


def test_unknown_prompt_gets_a_plain_answer() -> None:
    content = judge([{"role": "user", "content": "hello"}])
    assert json.loads(content)["score"] == 1


def test_the_judge_leaves_the_demo_story_intact() -> None:
    """Judged cases pass the simulated judge wherever their deterministic checks pass (for v1 and
    v2), and a malformed judge answer only lands on an output that fails anyway."""
    suite = yaml.safe_load((CORPUS / "evalkit.yaml").read_text())
    template = suite["system"]["user_template"]
    judged = [c for c in load_cases("cases") if any(e["scorer"] == "judge" for e in c["expect"])]
    assert 6 <= len(judged) <= 10
    assert not [c["id"] for c in judged if set(c["tags"]) & set(suite["critical_tags"])]
    assert not [c["id"] for c in judged if c.get("criticality") == "must_pass"]
    assert suite["judge"]["model"] == JUDGE_MODEL_ID
    errors = 0
    for case in judged:
        args = next(e["args"] for e in case["expect"] if e["scorer"] == "judge")
        rubric = load_rubric(CORPUS / args["rubric"])
        for prompt in (V1, V2):
            answer = simulate(messages_for(case, prompt, template))
            convo = render_conversation(case["input"]["messages"])
            raw = _pointwise(answer, rubric, convo=convo)
            try:
                score, _ = parse_pointwise(raw, rubric.levels)
            except MalformedJudgement:
                errors += 1
                assert not case_passes(case, prompt, template), case["id"]
                continue
            if case_passes(case, prompt, template):
                assert score >= args["min_score"], (case["id"], score)
    assert errors == 1, "the demo shows the malformed-output path once"


def test_served_over_http(demo_server: DemoServer) -> None:
    client = openai.OpenAI(base_url=demo_server.base_url, api_key="test", max_retries=0)
    system, user = pointwise_prompt(RUBRIC, CONVO, "Thanks! I've checked it; anything else?")
    completion = client.chat.completions.create(
        model=JUDGE_MODEL_ID,
        messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
        temperature=0,
    )
    assert completion.model == JUDGE_MODEL_ID
    assert parse_pointwise(completion.choices[0].message.content, RUBRIC.levels)[0] == 5
    with pytest.raises(openai.NotFoundError, match="demo-judge-1"):
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])

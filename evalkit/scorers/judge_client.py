"""Model judges, treated as components with their own version, rubric and tests.

* A **rubric** is a text file with anchored score levels (``1: ...`` to ``5: ...``); its sha256
  is recorded in the run manifest, so a rubric edit is a configuration change.
* The judge is asked for a short reason *before* the score, at temperature 0, and must answer
  with strict JSON ``{"reason": str, "score": int}``. Anything else is stored as an **error with
  the raw text**, never as a fail.
* **Pairwise** judging runs both presentation orders and maps each verdict back to the original
  numbering; if the two orders disagree the combined verdict is a tie (position bias measured,
  not averaged away).

Examples:
    >>> parse_pointwise('{"reason": "polite and complete", "score": 4}', (1, 2, 3, 4, 5))
    (4, 'polite and complete')
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalkit.fixtures import render_documents
from evalkit.records import ChatRequest, Provider
from evalkit.retries import CallStats, RetryPolicy, complete_with_retries

_LEVEL = re.compile(r"^\s*(?:[-*]\s*)?\**\s*(\d{1,2})\s*\**\s*[:.)=–-]", re.MULTILINE)

POINTWISE_SYSTEM = """You are an evaluator. Grade the assistant's final answer against the rubric.
First write one or two sentences of reasoning, then give an integer score from the rubric's levels.
Answer with JSON only, exactly: {{"reason": "<short reason>", "score": <integer>}}

Rubric:
{rubric}"""

PAIRWISE_SYSTEM = """You are an evaluator. Two answers (A and B) respond to the same conversation.
Decide which better satisfies the rubric, or "tie" when they are equally good.
First write one or two sentences of reasoning, then the winner.
Answer with JSON only, exactly: {{"reason": "<short reason>", "winner": "A" | "B" | "tie"}}

Rubric:
{rubric}"""


class MalformedJudgement(ValueError):
    """The judge did not answer with the required JSON; ``raw`` keeps what it said."""

    def __init__(self, problem: str, raw: str | None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.raw = raw


@dataclass(frozen=True)
class Rubric:
    path: str
    text: str
    levels: tuple[int, ...]

    @property
    def hash(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()


def load_rubric(path: Path, name: str | None = None) -> Rubric:
    """Read a rubric and its anchored levels (at least two lines like ``1: ...``)."""
    text = path.read_text(encoding="utf-8")
    levels = tuple(sorted({int(m) for m in _LEVEL.findall(text)}))
    if len(levels) < 2:
        raise ValueError(
            f"rubric {name or path.name!r} needs at least two anchored score levels "
            "(lines such as '1: off-topic' ... '5: complete and polite')"
        )
    return Rubric(name or path.name, text, levels)


def parse_pointwise(raw: str | None, levels: Sequence[int]) -> tuple[int, str]:
    """Strictly parse ``{"reason": str, "score": int}``; raise :class:`MalformedJudgement`."""
    data = _strict_json(raw)
    if set(data) != {"reason", "score"}:
        raise MalformedJudgement(f"expected keys reason, score; got {sorted(data)}", raw)
    score, reason = data["score"], data["reason"]
    if isinstance(score, bool) or not isinstance(score, int):
        raise MalformedJudgement(f"score must be an integer, got {score!r}", raw)
    if score not in levels:
        raise MalformedJudgement(f"score {score} is not a rubric level {list(levels)}", raw)
    if not isinstance(reason, str) or not reason.strip():
        raise MalformedJudgement("reason must be a non-empty string", raw)
    return score, reason.strip()


def parse_pairwise(raw: str | None) -> tuple[str, str]:
    """Strictly parse ``{"reason": str, "winner": "A"|"B"|"tie"}``."""
    data = _strict_json(raw)
    if set(data) != {"reason", "winner"}:
        raise MalformedJudgement(f"expected keys reason, winner; got {sorted(data)}", raw)
    winner = data["winner"]
    if winner not in ("A", "B", "tie"):
        raise MalformedJudgement(f"winner must be 'A', 'B' or 'tie', got {winner!r}", raw)
    if not isinstance(data["reason"], str):
        raise MalformedJudgement("reason must be a string", raw)
    return winner, data["reason"].strip()


def _strict_json(raw: str | None) -> dict[str, Any]:
    if raw is None:
        raise MalformedJudgement("empty judge answer", raw)
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise MalformedJudgement(f"not JSON ({exc.msg} at col {exc.colno})", raw) from None
    if not isinstance(data, dict):
        raise MalformedJudgement(f"expected a JSON object, got {type(data).__name__}", raw)
    return data


@dataclass(frozen=True)
class PairwiseVerdict:
    """Verdicts in original numbering: 1 = first output, 2 = second, 0 = tie."""

    order_ab: int
    order_ba: int
    reason_ab: str
    reason_ba: str

    @property
    def consistent(self) -> bool:
        return self.order_ab == self.order_ba

    @property
    def combined(self) -> int:
        return self.order_ab if self.consistent else 0


def prompt_version(template: str) -> str:
    """A short, stable name for a judge prompt template: ``sha256:<12 hex>`` of its text.

    Calibration records are keyed on it, so editing the judge's instructions needs a new
    calibration before the judge gates again.
    """
    return "sha256:" + hashlib.sha256(template.encode()).hexdigest()[:12]


class JudgeClient:
    """A pinned judge model behind a provider, at temperature 0, with retries."""

    def __init__(
        self,
        provider: Provider,
        model: str,
        *,
        max_retries: int = 4,
        max_retry_after_s: float = 60.0,
        seed: int = 0,
        snapshot: str | None = None,
    ) -> None:
        self.provider = provider
        self.model = model
        self.snapshot = snapshot  # the pinned version, when the endpoint names one
        self.retry = RetryPolicy(max_retries=max_retries, max_retry_after_s=max_retry_after_s)
        self.stats = CallStats()
        self._rng = random.Random(seed)

    def request(self, system: str, user: str) -> ChatRequest:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        return ChatRequest(self.model, messages, {"temperature": 0})

    async def ask(self, request: ChatRequest) -> str | None:
        completion = await complete_with_retries(
            lambda: self.provider.complete(request), self.retry, self.stats, self._rng
        )
        return completion.text


def render_conversation(messages: Sequence[dict[str, Any]] | None) -> str:
    lines = [f"{m.get('role', 'user').upper()}: {m.get('content', '')}" for m in messages or ()]
    return "\n".join(lines)


def pointwise_prompt(
    rubric: Rubric, conversation: str, answer: str, documents: Sequence[Any] = ()
) -> tuple[str, str]:
    """(system, user) of a pointwise judgement; a case's ``documents`` come first, numbered
    as the system under test saw them, so a faithfulness rubric can be judged against them."""
    user = (
        f"{_sources(documents)}Conversation:\n{conversation}\n\nAssistant's final answer:\n{answer}"
    )
    return POINTWISE_SYSTEM.format(rubric=rubric.text.strip()), user


def pairwise_prompt(
    rubric: Rubric, conversation: str, a: str, b: str, documents: Sequence[Any] = ()
) -> tuple[str, str]:
    user = f"{_sources(documents)}Conversation:\n{conversation}\n\nAnswer A:\n{a}\n\nAnswer B:\n{b}"
    return PAIRWISE_SYSTEM.format(rubric=rubric.text.strip()), user


def _sources(documents: Sequence[Any]) -> str:
    """The source documents section of a judge prompt (nothing when the case has none)."""
    rendered = render_documents(documents)
    return f"Source documents given to the assistant:\n{rendered}\n\n" if rendered else ""


async def judge_pairwise(
    client: JudgeClient, rubric: Rubric, conversation: str, first: str, second: str
) -> PairwiseVerdict:
    """Ask in both orders and map each answer back to the original numbering.

    Raises:
        MalformedJudgement: either order's answer is not the required JSON.
    """
    mapping = {"A": 1, "B": 2, "tie": 0}
    ab_winner, ab_reason = parse_pairwise(
        await client.ask(client.request(*pairwise_prompt(rubric, conversation, first, second)))
    )
    ba_winner, ba_reason = parse_pairwise(
        await client.ask(client.request(*pairwise_prompt(rubric, conversation, second, first)))
    )
    swapped = {1: 2, 2: 1, 0: 0}[mapping[ba_winner]]
    return PairwiseVerdict(mapping[ab_winner], swapped, ab_reason, ba_reason)


def model_family(model: str) -> str:
    """A coarse family name (``gpt-4.1-mini`` → ``gpt``) for the self-enhancement warning."""
    name = model.lower().rsplit("/", 1)[-1]
    for family in (
        "gpt",
        "claude",
        "gemini",
        "llama",
        "qwen",
        "mistral",
        "mixtral",
        "deepseek",
        "phi",
        "gemma",
        "command",
        "o1",
        "o3",
        "o4",
        "demo",
    ):
        if name.startswith(family):
            return "gpt" if family in ("o1", "o3", "o4") else family
    return re.split(r"[-_:.]", name, maxsplit=1)[0]

"""A Python system for replay tests: each case answers its replays from a fixed pattern of
passes (``p``) and failures (``f``), so per-output and per-case rates differ by construction."""

from __future__ import annotations


def replay_app(patterns: dict[str, str]) -> str:
    """The source of a module whose ``answer`` gives case ``c``'s replay ``i`` the verdict
    ``patterns[c][i % 3]``: "the answer" passes a ``contains: answer`` check, "no idea" fails.

    Examples:
        >>> namespace: dict = {}
        >>> exec(replay_app({"a": "pfp"}), namespace)
        >>> [namespace["answer"]([{"content": "a"}]) for _ in range(3)]
        ['the answer', 'no idea', 'the answer']
    """
    return f"""
import collections

PATTERNS = {patterns!r}
CALLS = collections.Counter()


def answer(messages, **context):
    case = messages[-1]["content"]
    verdict = PATTERNS[case][CALLS[case] % 3]
    CALLS[case] += 1
    return "the answer" if verdict == "p" else "no idea"
"""

"""Regex scorers are bounded: a catastrophic pattern is that case's scorer error within a few
seconds of ``timeout_s``, and the search releases the GIL so other threads keep running."""

from __future__ import annotations

import threading
import time

import pytest

from evalkit.records import Output
from evalkit.scorers.registry import ScorerArgError, build_scorer

EVIL = "(a|aa)+$"  # exponential backtracking in re and regex alike
TEXT = "a" * 40 + "!"


@pytest.mark.parametrize("name", ["regex", "forbidden_regex"])
def test_a_catastrophic_regex_is_a_scorer_error_within_its_limit(name: str) -> None:
    scorer = build_scorer(name, {"pattern": EVIL, "timeout_s": 0.5})
    started = time.process_time()
    result = scorer(Output(TEXT), None)
    cpu = time.process_time() - started
    assert result.error and not result.passed
    assert result.reason == "regex timed out after 0.5s (catastrophic backtracking?)"
    assert cpu < 3.5, cpu  # this process stopped matching; it did not backtrack 2^40 times
    assert scorer(Output("aaaa"), None).error is False  # the next case is scored normally


def test_the_search_lets_other_threads_run() -> None:
    scorer = build_scorer("regex", {"pattern": EVIL, "timeout_s": 0.5})
    ticks: list[float] = []
    done = threading.Event()

    def tick() -> None:
        while not done.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.01)

    ticker = threading.Thread(target=tick)
    ticker.start()
    try:
        scorer(Output(TEXT), None)
    finally:
        done.set()
        ticker.join()
    assert len(ticks) > 20  # at 10 ms a tick: it was not starved for the search's duration


def test_re_syntax_and_flags_are_kept() -> None:
    assert build_scorer("regex", {"pattern": r"pa(r)is\b", "flags": "i"})(
        Output("PARIS"), None
    ).passed
    with pytest.raises(ScorerArgError, match="invalid regex"):
        build_scorer("regex", {"pattern": "(unclosed"})
    with pytest.raises(ScorerArgError, match="timeout_s"):
        build_scorer("regex", {"pattern": "x", "timeout_s": "soon"})

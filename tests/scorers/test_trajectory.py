"""Trajectory scorers on passing and failing tool-call trajectories, with their reasons."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from evalkit.records import Output, Score, ToolCall
from evalkit.scorers.registry import SCORERS, ScorerArgError, build_scorer

LOOKUP = ToolCall("lookup_order", {"order_id": "8812"}, {"status": "delivered", "charges": 2})
POLICY = ToolCall("get_policy", {"topic": "refunds"}, {"text": "Refund double charges."})
REFUND = ToolCall("issue_refund", {"order_id": 8812, "amount": 19.99}, {"refund_id": "R-1"})

REFUND_KEYED = ToolCall("issue_refund", {"order_id": "8812 "}, {"refund_id": "R-1"})

AGENT = Output("Refund R-1 issued.", (LOOKUP, POLICY, REFUND), steps=4)
LOOKUP_ONLY = Output("Your order was charged twice.", (LOOKUP,), steps=2)
NO_TOOLS = Output("I can't help with that.", (), steps=1)
CASE = SimpleNamespace(
    fixtures={
        "tools": {
            "lookup_order": {"status": "delivered"},  # plain: answers any arguments
            "issue_refund": [{"args": {"order_id": "8812"}, "response": {"refund_id": "R-1"}}],
        }
    }
)


def run(name: str, args: dict[str, Any], output: Output, case: Any = CASE) -> Score:
    return build_scorer(name, args)(output, case)


# fmt: off
CASES = [
    # scorer, args, output, passed, score, reason
    ("tool_called", {"name": "issue_refund", "order_id": "8812"}, AGENT, True, 1.0,
     'called issue_refund(order_id="8812") 1 time'),
    ("tool_called", {"name": "issue_refund", "args": {"order_id": " 8812 ", "amount": "19.99"}},
     AGENT, True, 1.0, 'called issue_refund(order_id=" 8812 ", amount="19.99") 1 time'),
    ("tool_called", {"name": "issue_refund", "order_id": "8812"}, LOOKUP_ONLY, False, 0.0,
     'expected issue_refund(order_id="8812"); calls were lookup_order(order_id="8812")'),
    ("tool_called", {"name": "issue_refund", "order_id": "9999"}, AGENT, False, 0.0,
     'expected issue_refund(order_id="9999"); calls were lookup_order(order_id="8812"), '
     'get_policy(topic="refunds"), issue_refund(order_id=8812, amount=19.99)'),
    ("tool_called", {"name": "issue_refund"}, NO_TOOLS, False, 0.0,
     "expected issue_refund(); no tool calls were made"),
    ("tool_called", {"name": "lookup_order", "min_times": 2}, AGENT, False, 0.5,
     'expected lookup_order() at least 2 times (matched 1); calls were lookup_order('
     'order_id="8812"), get_policy(topic="refunds"), issue_refund(order_id=8812, amount=19.99)'),
    ("tool_called", "lookup_order", LOOKUP_ONLY, True, 1.0, "called lookup_order() 1 time"),
    ("tool_not_called", {"name": "issue_refund"}, LOOKUP_ONLY, True, 1.0,
     'issue_refund not called; calls were lookup_order(order_id="8812")'),
    ("tool_not_called", "issue_refund", AGENT, False, 0.0,
     "forbidden issue_refund called 1 time, first as call 3: "
     "issue_refund(order_id=8812, amount=19.99)"),
    ("tool_order", {"sequence": ["lookup_order", "issue_refund"]}, AGENT, True, 1.0,
     "calls in order lookup_order → issue_refund"),
    ("tool_order", {"sequence": ["issue_refund", "lookup_order"]}, AGENT, False, 0.5,
     "expected order issue_refund → lookup_order: no lookup_order after issue_refund; calls were "
     'lookup_order(order_id="8812"), get_policy(topic="refunds"), '
     "issue_refund(order_id=8812, amount=19.99)"),
    ("tool_order", ["lookup_order", "issue_refund"], LOOKUP_ONLY, False, 0.5,
     "expected order lookup_order → issue_refund: no issue_refund after lookup_order; "
     'calls were lookup_order(order_id="8812")'),
    ("tool_order", ["lookup_order"], NO_TOOLS, False, 0.0,
     "expected order lookup_order: no lookup_order; no tool calls were made"),
    ("max_steps", {"n": 4}, AGENT, True, 1.0, "4 steps (3 tool calls), limit 4"),
    ("max_steps", 3, AGENT, False, 0.0, "4 steps (3 tool calls), limit 3"),
    ("no_unexpected_calls", {"allowed": ["lookup_order", "issue_refund", "get_policy"]}, AGENT,
     True, 1.0, "all 3 calls in allowed [get_policy, issue_refund, lookup_order]"),
    ("no_unexpected_calls", {"allowed": ["lookup_order", "issue_refund"]}, AGENT, False, 2 / 3,
     '1/3 calls not in allowed [issue_refund, lookup_order]: get_policy(topic="refunds")'),
    ("no_unexpected_calls", {}, Output("ok", (LOOKUP, REFUND_KEYED), steps=3), True, 1.0,
     "all 2 calls covered by the case's fixtures"),
    # coverage is the runner's own fixture lookup: "8812" and 8812 are the same id, 8813 is not
    ("no_unexpected_calls", {}, Output("ok", (ToolCall("issue_refund", {"order_id": 8812}),)),
     True, 1.0, "all 1 calls covered by the case's fixtures"),
    ("no_unexpected_calls", {}, Output("ok", (ToolCall("issue_refund", {"order_id": 8813}),)),
     False, 0.0, "1/1 calls not covered by the case's fixtures: issue_refund(order_id=8813)"),
    ("no_unexpected_calls", {}, AGENT, False, 1 / 3,
     "2/3 calls not covered by the case's fixtures: get_policy(topic=\"refunds\"), "
     "issue_refund(order_id=8812, amount=19.99)"),
    ("no_unexpected_calls", {}, NO_TOOLS, True, 1.0, "all 0 calls covered by the case's fixtures"),
]
# fmt: on


@pytest.mark.parametrize(("name", "args", "output", "passed", "score", "reason"), CASES)
def test_scores_and_reasons(
    name: str, args: Any, output: Output, passed: bool, score: float, reason: str
) -> None:
    if not isinstance(args, dict):  # the short form `- tool_not_called: issue_refund`
        args = {SCORERS[name].primary: args}
    result = run(name, args, output)
    assert (result.passed, result.reason) == (passed, reason)
    assert result.score == pytest.approx(score)
    assert not result.error


def test_every_trajectory_scorer_is_registered_as_trajectory_and_deterministic() -> None:
    names = ["tool_called", "tool_not_called", "tool_order", "max_steps", "no_unexpected_calls"]
    for name in names:
        assert SCORERS[name].trajectory
        assert SCORERS[name].tier == 0


@pytest.mark.parametrize(
    ("want", "got", "same"),
    [
        ("8812", 8812, True),
        (8812, " 8812 ", True),
        ("2.50", 2.5, True),
        (1, 1.0, True),
        ("007", "7", False),  # two strings compare as text
        ("Refund", "refund", False),  # case matters
        (True, 1, False),
        ("true", True, False),
        ({"sku": "A1", "qty": "2"}, {"sku": "A1 ", "qty": 2}, True),
        ({"sku": "A1"}, {"sku": "A1", "qty": 2}, False),  # nested mappings match whole
        (["a", 1], ["a", "1"], True),
        (["a"], ["a", "b"], False),
        (None, None, True),
        (None, "", False),
    ],
)
def test_argument_values_are_compared_after_normalization(want: Any, got: Any, same: bool) -> None:
    output = Output("ok", (ToolCall("t", {"x": got}),))
    assert run("tool_called", {"name": "t", "x": want}, output).passed is same


def test_only_listed_arguments_are_checked_and_a_missing_argument_fails() -> None:
    output = Output("ok", (ToolCall("t", {"a": 1, "b": 2}),))
    assert run("tool_called", {"name": "t", "a": 1}, output).passed
    assert not run("tool_called", {"name": "t", "c": None}, output).passed


def test_min_times_counts_only_matching_calls() -> None:
    calls = (
        ToolCall("t", {"id": 1}),
        ToolCall("t", {"id": 2}),
        ToolCall("t", {"id": 1}),
    )
    output = Output("ok", calls, steps=4)
    assert run("tool_called", {"name": "t", "id": 1, "min_times": 2}, output).passed
    result = run("tool_called", {"name": "t", "id": 2, "min_times": 2}, output)
    assert not result.passed
    assert result.reason.startswith("expected t(id=2) at least 2 times (matched 1); ")


def test_a_long_trajectory_is_clipped_in_the_reason() -> None:
    output = Output("ok", tuple(ToolCall("search", {"q": str(i)}) for i in range(9)), steps=10)
    reason = run("tool_called", {"name": "issue_refund"}, output).reason
    assert reason.endswith('search(q="5") (+3 more)')


def test_no_unexpected_calls_without_case_fixtures_cannot_decide() -> None:
    result = run("no_unexpected_calls", {}, AGENT, case=None)
    assert result.error
    assert "no case fixtures" in result.reason


@pytest.mark.parametrize(
    ("name", "args", "message"),
    [
        ("tool_called", {}, "bad args for scorer 'tool_called'"),
        ("tool_called", {"name": 3}, "tool_called: name must be a tool name, got int 3"),
        ("tool_called", {"name": " "}, "tool_called: name is empty"),
        (
            "tool_called",
            {"name": {"name": "issue_refund", "order_id": "1"}},
            "tool_called: name must be a tool name, got a mapping",
        ),
        ("tool_called", {"name": "t", "min_times": 0}, "tool_called: min_times must be >= 1"),
        ("tool_called", {"name": "t", "args": ["order_id"]}, "tool_called: args must be a mapping"),
        ("tool_not_called", {"name": None}, "tool_not_called: name must be a tool name"),
        ("tool_order", {"sequence": []}, "tool_order: sequence is empty"),
        ("tool_order", {"sequence": "lookup_order"}, "tool_order: sequence must be a list"),
        ("tool_order", {"sequence": ["a", 2]}, "tool_order: sequence[1] must be a tool name"),
        ("max_steps", {"n": 0}, "max_steps: n must be >= 1, got 0"),
        ("max_steps", {"n": "4"}, "max_steps: n must be a positive integer"),
        ("no_unexpected_calls", {"allowed": "a"}, "no_unexpected_calls: allowed must be a list"),
        ("no_unexpected_calls", {"extra": 1}, "bad args for scorer 'no_unexpected_calls'"),
    ],
)
def test_bad_args_fail_at_load_with_a_clear_message(
    name: str, args: dict[str, Any], message: str
) -> None:
    with pytest.raises(ScorerArgError) as info:
        build_scorer(name, args)
    assert message in str(info.value)

"""Trajectory scorers: which tools an agent called, with what arguments, in what order, how often.

They read ``output.tool_calls`` (the whole trajectory, in call order, as the runner served it
from the case's fixtures) and ``output.steps``; final-answer scorers keep scoring ``output.text``,
the last assistant message. Reasons name what was expected and what the trajectory was, e.g.
``expected issue_refund(order_id="8812"); calls were lookup_order(order_id="8812")``.

Argument values are compared after normalization: strings are stripped, and a string that reads
as a number equals that number (``"8812"`` matches ``8812``, ``"2.50"`` matches ``2.5``); two
strings compare as text (``"007"`` is not ``"7"``, case matters); booleans only equal booleans;
nested mappings and lists must match whole.

Examples:
    >>> from evalkit.records import Output, ToolCall
    >>> from evalkit.scorers.registry import build_scorer
    >>> out = Output("Done.", (ToolCall("lookup_order", {"order_id": 8812}),), steps=2)
    >>> build_scorer("tool_called", {"name": "lookup_order", "order_id": "8812"})(out, None).reason
    'called lookup_order(order_id="8812") 1 time'
    >>> build_scorer("tool_called", {"name": "issue_refund"})(out, None).reason
    'expected issue_refund(); calls were lookup_order(order_id=8812)'
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any

from evalkit.fixtures import is_keyed, normalize_args
from evalkit.records import Output, Score, ToolCall
from evalkit.scorers.deterministic import _clip, _want
from evalkit.scorers.registry import ScoreFn, ScorerArgError, check, scorer, scorer_error

_SHOWN_CALLS = 6  # calls listed in a reason before "(+N more)"
_NUMERIC = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


@scorer("tool_called", primary="name", trajectory=True)
def tool_called(
    name: str, args: dict[str, Any] | None = None, min_times: int = 1, **arguments: Any
) -> ScoreFn:
    """Pass when ``name`` was called at least ``min_times`` times with a subset of arguments.

    The argument subset may be nested (``args: {order_id: "8812"}``) or given at the top level
    beside ``name`` (``{name: issue_refund, order_id: "8812"}``), as the case format shows; both
    forms may be combined. Use the nested form for a tool argument called ``name``, ``args`` or
    ``min_times``. Only the listed arguments are checked; others may have any value.
    """
    _check_name("tool_called", name)
    _want("tool_called", "args", args, (dict, type(None)), "a mapping of argument -> value")
    _want("tool_called", "min_times", min_times, int, "a positive integer")
    if min_times < 1:
        raise ScorerArgError(f"tool_called: min_times must be >= 1, got {min_times}")
    subset = {**(args or {}), **arguments}
    for key in subset:
        _want("tool_called", "argument names", key, str, "strings")
    wanted = _render(name, subset)
    times = "" if min_times == 1 else f" at least {min_times} times"

    def score(output: Output, case: object) -> Score:
        matched = sum(
            call.name == name and _has_args(call.arguments, subset) for call in output.tool_calls
        )
        if matched >= min_times:
            plural = "time" if matched == 1 else "times"
            return check(True, f"called {wanted} {matched} {plural}", matched=matched)
        found = f" (matched {matched})" if matched else ""
        reason = f"expected {wanted}{times}{found}; {_trajectory(output.tool_calls)}"
        return check(False, reason, matched / min_times, matched=matched)

    return score


@scorer("tool_not_called", primary="name", trajectory=True)
def tool_not_called(name: str) -> ScoreFn:
    """Pass when no call to ``name`` appears anywhere in the trajectory (a forbidden action)."""
    _check_name("tool_not_called", name)

    def score(output: Output, case: object) -> Score:
        hits = [i for i, call in enumerate(output.tool_calls, 1) if call.name == name]
        if not hits:
            return check(True, f"{name} not called; {_trajectory(output.tool_calls)}")
        first = output.tool_calls[hits[0] - 1]
        plural = "time" if len(hits) == 1 else "times"
        reason = f"forbidden {name} called {len(hits)} {plural}, first as call {hits[0]}: "
        return check(False, reason + _call_text(first), calls=len(hits))

    return score


@scorer("tool_order", primary="sequence", trajectory=True)
def tool_order(sequence: list[str]) -> ScoreFn:
    """Pass when the tool names in ``sequence`` occur in this order in the trajectory.

    ``sequence`` is a subsequence: other calls may come before, between and after its items
    (``[lookup_order, issue_refund]`` passes for lookup_order, get_policy, issue_refund). Score is
    the fraction of ``sequence`` matched in order.
    """
    _want("tool_order", "sequence", sequence, list, "a list of tool names")
    if not sequence:
        raise ScorerArgError("tool_order: sequence is empty")
    for i, item in enumerate(sequence):
        _check_name("tool_order", item, f"sequence[{i}]")
    expected = " → ".join(sequence)

    def score(output: Output, case: object) -> Score:
        done = 0
        for call in output.tool_calls:
            if done < len(sequence) and call.name == sequence[done]:
                done += 1
        fraction = done / len(sequence)
        if done == len(sequence):
            return check(True, f"calls in order {expected}", fraction)
        after = f" after {sequence[done - 1]}" if done else ""
        reason = f"expected order {expected}: no {sequence[done]}{after}; "
        return check(False, reason + _trajectory(output.tool_calls), fraction, matched=done)

    return score


@scorer("max_steps", primary="n", trajectory=True)
def max_steps(n: int) -> ScoreFn:
    """Pass when the agent finished in at most ``n`` model steps (each turn that produced tool
    calls counts as one step, and so does the final answer)."""
    _want("max_steps", "n", n, int, "a positive integer")
    if n < 1:
        raise ScorerArgError(f"max_steps: n must be >= 1, got {n}")

    def score(output: Output, case: object) -> Score:
        calls = len(output.tool_calls)
        plural = "call" if calls == 1 else "calls"
        reason = f"{output.steps} steps ({calls} tool {plural}), limit {n}"
        return check(output.steps <= n, reason, steps=output.steps)

    return score


@scorer("no_unexpected_calls", primary="allowed", trajectory=True)
def no_unexpected_calls(allowed: list[str] | None = None) -> ScoreFn:
    """Pass when every call is to a tool in ``allowed`` or, when ``allowed`` is omitted, is one the
    case's fixtures cover (by name, and by normalized arguments for keyed fixtures).

    The runner already fails a case whose call no fixture covers; this scorer states the same
    property explicitly, and checks stored trajectories on ``evalkit runs rescore``. Score is the
    fraction of calls that were expected.
    """
    _want("no_unexpected_calls", "allowed", allowed, (list, type(None)), "a list of tool names")
    if allowed is not None:
        for i, item in enumerate(allowed):
            _check_name("no_unexpected_calls", item, f"allowed[{i}]")
    names = None if allowed is None else frozenset(allowed)

    def score(output: Output, case: Any) -> Score:
        if names is None:
            fixtures = getattr(case, "fixtures", None)
            if not isinstance(fixtures, dict):
                return scorer_error("no_unexpected_calls: no case fixtures to check calls against")
            tools = fixtures.get("tools") or {}
            unexpected = [c for c in output.tool_calls if not _covered(tools, c)]
            against = "covered by the case's fixtures"
        else:
            unexpected = [c for c in output.tool_calls if c.name not in names]
            against = f"in allowed [{', '.join(sorted(names))}]"
        total = len(output.tool_calls)
        fraction = 1.0 if not total else 1 - len(unexpected) / total
        if not unexpected:
            return check(True, f"all {total} calls {against}", fraction)
        shown = ", ".join(_call_text(c) for c in unexpected[:3])
        more = f" (+{len(unexpected) - 3} more)" if len(unexpected) > 3 else ""
        reason = f"{len(unexpected)}/{total} calls not {against}: {shown}{more}"
        return check(False, reason, fraction, unexpected=len(unexpected))

    return score


def _check_name(scorer_name: str, name: Any, arg: str = "name") -> None:
    if isinstance(name, dict):
        raise ScorerArgError(
            f"{scorer_name}: {arg} must be a tool name, got a mapping; write "
            f"{{scorer: {scorer_name}, args: {{name: TOOL, ...}}}}"
        )
    _want(scorer_name, arg, name, str, "a tool name")
    if not name.strip():
        raise ScorerArgError(f"{scorer_name}: {arg} is empty")


def _has_args(got: dict[str, Any], subset: dict[str, Any]) -> bool:
    return all(key in got and _same(want, got[key]) for key, want in subset.items())


def _same(want: Any, got: Any) -> bool:
    """Equal after normalization: see the module docstring."""
    if isinstance(want, bool) or isinstance(got, bool):
        return type(want) is type(got) and want == got
    if isinstance(want, str) and isinstance(got, str):
        return want.strip() == got.strip()
    want_num, got_num = _number(want), _number(got)
    if want_num is not None and got_num is not None:
        return want_num == got_num
    if isinstance(want, dict) and isinstance(got, dict):
        return want.keys() == got.keys() and all(_same(v, got[k]) for k, v in want.items())
    if isinstance(want, list | tuple) and isinstance(got, list | tuple):
        return len(want) == len(got) and all(_same(w, g) for w, g in zip(want, got, strict=True))
    return want is None and got is None


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str) and _NUMERIC.fullmatch(value.strip()):
        return float(value.strip())
    return None


def _covered(tools: dict[str, Any], call: ToolCall) -> bool:
    """Whether the runner's fixture lookup (``evalkit.fixtures``) serves this call."""

    if call.name not in tools:
        return False
    fixture = tools[call.name]
    if not is_keyed(fixture):
        return True
    wanted = normalize_args(call.arguments)
    return any(normalize_args(entry["args"]) == wanted for entry in fixture)


def _render(name: str, arguments: dict[str, Any]) -> str:
    parts = ", ".join(
        f"{key}={json.dumps(value, ensure_ascii=False, default=str)}"
        for key, value in arguments.items()
    )
    return f"{name}({_clip(parts, 80)})"


def _call_text(call: ToolCall) -> str:
    return _render(call.name, call.arguments)


def _trajectory(calls: Sequence[ToolCall]) -> str:
    if not calls:
        return "no tool calls were made"
    shown = ", ".join(_call_text(c) for c in calls[:_SHOWN_CALLS])
    more = f" (+{len(calls) - _SHOWN_CALLS} more)" if len(calls) > _SHOWN_CALLS else ""
    return f"calls were {shown}{more}"

"""Deterministic scorers: string, regex and length checks that need no model (JSON and number
checks: :mod:`evalkit.scorers.structured`), and the helpers they share.

Each factory checks its YAML arguments when the corpus loads (raising ``ScorerArgError`` with a
one-line message) and returns a cheap, pure scoring function. Reasons say what was expected and
what was found, clipped to stay readable next to a broken case.

Examples:
    >>> from evalkit.records import Output
    >>> from evalkit.scorers.registry import build_scorer
    >>> build_scorer("contains", {"text": "refund"})(Output("No refund yet."), None).reason
    "found 'refund'"
    >>> build_scorer("max_words", {"n": 2})(Output("one two three"), None).reason
    '3 words, limit 2'
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from typing import Any

from evalkit.records import Output, Score
from evalkit.scorers.registry import (
    ScoreFn,
    ScorerArgError,
    check,
    scorer,
    scorer_error,
)

_SHOW = 40  # characters of a value quoted in a reason
_MISSING = object()
_REGEX_FLAGS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "x": re.VERBOSE}
_EDGE_PUNCT = " .,;:!?'\"`()[]{}<>«»“”‘’*_"  # stripped from both ends by normalized_match
_NUMBER = re.compile(
    r"(?<![\w.])([-+\u2212]?)\$?((?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)([eE][-+]?\d+)?"
)


@scorer("exact", primary="text")
def exact(text: str, field: str | None = None) -> ScoreFn:
    """Pass when the stripped output (or its JSON ``field``) equals ``text`` (also stripped),
    character for character."""
    want = _want("exact", "text", text, str, "a string").strip()
    _check_field_name("exact", field)
    where = _where(field)

    @_fail_without_value
    def score(output: Output, case: object) -> Score:
        got = _subject(output, field).strip()
        if got == want:
            return check(True, f"equals {_show(want)}{where}")
        return check(False, _diff(want, got) + where)

    return score


@scorer("normalized_match", primary="text")
def normalized_match(text: str, field: str | None = None) -> ScoreFn:
    """Pass when output (or its JSON ``field``) and ``text`` agree after casefolding, whitespace
    collapsing and stripping surrounding punctuation, quotes and markdown emphasis."""
    want = _loose(_want("normalized_match", "text", text, str, "a string"))
    _check_field_name("normalized_match", field)
    where = _where(field)

    @_fail_without_value
    def score(output: Output, case: object) -> Score:
        got = _loose(_subject(output, field))
        if got == want:
            return check(True, f"matches {_show(want)} (normalized){where}")
        return check(False, f"{_diff(want, got)} (normalized){where}")

    return score


@scorer("contains", primary="text")
def contains(text: str, ignore_case: bool = True, field: str | None = None) -> ScoreFn:
    """Pass when ``text`` occurs in the output or its JSON ``field`` (casefolded unless
    ``ignore_case``)."""
    needle = _needle("contains", text, ignore_case)
    _check_field_name("contains", field)
    where = _where(field)

    @_fail_without_value
    def score(output: Output, case: object) -> Score:
        if needle in _fold_case(_subject(output, field, raw=True), ignore_case):
            return check(True, f"found {_show(text)}{where}")
        return check(False, f"missing {_show(text)} in {field or 'reply'}")

    return score


@scorer("not_contains", primary="text")
def not_contains(text: str, ignore_case: bool = True, field: str | None = None) -> ScoreFn:
    """Pass when ``text`` does not occur in the output or its JSON ``field`` (casefolded unless
    ``ignore_case``); with ``field``, an output without that field fails."""
    needle = _needle("not_contains", text, ignore_case)
    _check_field_name("not_contains", field)
    where = _where(field)

    @_fail_without_value
    def score(output: Output, case: object) -> Score:
        at = _fold_case(_subject(output, field, raw=True), ignore_case).find(needle)
        if at < 0:
            return check(True, f"no {_show(text)} in {field or 'reply'}")
        return check(False, f"found forbidden {_show(text)} at char {at}{where}")

    return score


@scorer("regex", primary="pattern", threaded=True)
def regex(
    pattern: str, flags: str = "", timeout_s: float = 1.0, field: str | None = None
) -> ScoreFn:
    """Pass when ``re.search`` finds ``pattern``; ``flags`` are letters among ``imsx``.

    A search taking longer than ``timeout_s`` (catastrophic backtracking) is a scorer error for
    that case; it runs with the GIL released, so other work goes on meanwhile. With ``field``
    the search runs on that JSON field only."""
    compiled = _compile("regex", pattern, flags)
    _want("regex", "timeout_s", timeout_s, (int, float), "a number of seconds")
    _check_field_name("regex", field)
    where = _where(field)

    @_fail_without_value
    def score(output: Output, case: object) -> Score:
        match = _search(compiled, _subject(output, field, raw=True), timeout_s)
        if isinstance(match, Score):
            return match
        if match:
            return check(True, f"matched {_show(match.group(0))}{where}")
        return check(False, f"no match for /{_clip(pattern)}/{where}")

    return score


@scorer("forbidden_regex", primary="pattern", threaded=True)
def forbidden_regex(
    pattern: str, flags: str = "", timeout_s: float = 1.0, field: str | None = None
) -> ScoreFn:
    """Fail when ``re.search`` finds ``pattern`` (in the JSON ``field``, if given; an output
    without it fails); the reason quotes the offending match. ``timeout_s`` bounds the search as
    for ``regex``."""
    compiled = _compile("forbidden_regex", pattern, flags)
    _want("forbidden_regex", "timeout_s", timeout_s, (int, float), "a number of seconds")
    _check_field_name("forbidden_regex", field)
    where = _where(field)

    @_fail_without_value
    def score(output: Output, case: object) -> Score:
        match = _search(compiled, _subject(output, field, raw=True), timeout_s)
        if isinstance(match, Score):
            return match
        if match is None:
            return check(True, f"no match for /{_clip(pattern)}/{where}")
        return check(
            False, f"forbidden match {_show(match.group(0))} at char {match.start()}{where}"
        )

    return score


@scorer("max_words", primary="n")
def max_words(n: int, field: str | None = None) -> ScoreFn:
    """Pass when the output (or its JSON string ``field``) has at most ``n`` words."""
    return _limit("max_words", n, field, lambda s: len(s.split()), "words")


@scorer("max_chars", primary="n")
def max_chars(n: int, field: str | None = None) -> ScoreFn:
    """Pass when the stripped output (or its JSON string ``field``) has at most ``n`` characters."""
    return _limit("max_chars", n, field, len, "chars")


def _want(name: str, arg: str, value: Any, kind: type | tuple[type, ...], what: str) -> Any:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        hint = " (quote it in YAML)" if str in kinds and value is not None else ""
        got = f"{type(value).__name__} {_show(value)}"
        raise ScorerArgError(f"{name}: {arg} must be {what}, got {got}{hint}")
    return value


def _check_field_name(name: str, field: str | None) -> None:
    _want(name, "field", field, (str, type(None)), "a dotted field name like customer.id")
    if field is not None and not all(field.split(".")):
        raise ScorerArgError(f"{name}: field {field!r} has an empty part; use e.g. customer.id")


def _check_json_value(name: str, where: str, value: Any) -> None:
    try:  # YAML also yields dates, sets, bytes and .nan, none of which JSON output can equal
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ScorerArgError(
            f"{name}: {where} is not a JSON value: {exc} (quote it in YAML)"
        ) from None


def _needle(name: str, text: str, ignore_case: bool) -> str:
    _want(name, "text", text, str, "a string")
    _want(name, "ignore_case", ignore_case, bool, "true or false")
    if not text:
        raise ScorerArgError(f"{name}: text is empty")
    return _fold_case(text, ignore_case)


def _fold_case(text: str, ignore_case: bool) -> str:
    return text.casefold() if ignore_case else text


def _search(compiled: Any, text: str, timeout_s: float) -> Any:
    """``compiled.search(text)`` stopped after ``timeout_s`` (a scorer error then)."""
    try:
        return compiled.search(text, timeout=timeout_s, concurrent=True)
    except TimeoutError:
        return scorer_error(f"regex timed out after {timeout_s:g}s (catastrophic backtracking?)")


def _compile(name: str, pattern: str, flags: str) -> Any:
    _want(name, "pattern", pattern, str, "a string")
    _want(name, "flags", flags, str, "letters among 'imsx'")
    if not pattern:
        raise ScorerArgError(f"{name}: pattern is empty")
    unknown = "".join(sorted(set(flags) - _REGEX_FLAGS.keys()))
    if unknown:
        raise ScorerArgError(f"{name}: unknown flag(s) {unknown!r} in {flags!r}; use 'imsx'")
    value = re.NOFLAG
    for letter in flags:
        value |= _REGEX_FLAGS[letter]
    # here, not at the top: a corpus without regex scorers never imports the regex engine
    # (its import compiles many patterns of its own, a share of a short run's start-up)
    import regex as _regex

    try:
        re.compile(pattern, value)  # the syntax users write is re's; regex runs it (version 0)
        return _regex.compile(pattern, int(value) | _regex.VERSION0)
    except (re.error, _regex.error) as exc:
        raise ScorerArgError(f"{name}: invalid regex {pattern!r}: {exc}") from None


def _limit(name: str, n: int, field: str | None, count: Callable[[str], int], unit: str) -> ScoreFn:
    _want(name, "n", n, int, "a non-negative integer")
    _check_field_name(name, field)
    if n < 0:
        raise ScorerArgError(f"{name}: n must be >= 0, got {n}")
    where = "" if field is None else f" in {field}"

    @_fail_without_value
    def score(output: Output, case: object) -> Score:
        got = _text(output) if field is None else _json(output, field)
        if not isinstance(got, str):
            raise _NoValue(f"field {field!r} is {_json_type(got)} {_show(got)}, not a string")
        size = count(got.strip())
        return check(size <= n, f"{size} {unit}{where}, limit {n}", count=size)

    return score


class _NoValue(Exception):
    """The output has nothing to score (not JSON, missing field, no number): a failing score."""


def _fail_without_value(fn: ScoreFn) -> ScoreFn:
    @functools.wraps(fn)
    def score(output: Output, case: Any) -> Score:
        try:
            return fn(output, case)
        except _NoValue as exc:
            return check(False, str(exc))

    return score


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed in JSON")


def _json(output: Output, field: str | None = None) -> Any:
    """The output parsed as raw JSON, or its ``field``; raises _NoValue saying why not."""
    data = _parse_json(output.text or "")
    if isinstance(data, _NoValue):
        raise _NoValue(*data.args)
    if field is None:
        return data
    if not isinstance(data, dict):
        raise _NoValue(f"expected a JSON object with {field!r}, got {_json_type(data)}")
    value = _lookup(data, field)
    if value is _MISSING:
        raise _NoValue(f"missing field {field!r}")
    return value


@functools.lru_cache(maxsize=32)  # several JSON scorers on one output parse it once
def _parse_json(text: str) -> Any:
    if not text.strip():
        return _NoValue("output is empty, expected JSON")
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        if text.lstrip().startswith("```"):
            return _NoValue("output is wrapped in a code fence, expected raw JSON")
        return _NoValue(f"invalid JSON at line {exc.lineno} col {exc.colno}: {exc.msg}")
    except (ValueError, RecursionError) as exc:
        return _NoValue(f"invalid JSON: {_clip(str(exc) or type(exc).__name__, 80)}")


def _lookup(value: Any, path: str) -> Any:
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdecimal() and int(part) < len(value):
            value = value[int(part)]
        else:
            return _MISSING
    return value


def _first_number(text: str) -> float:
    match = _NUMBER.search(text)
    if match is None:
        raise _NoValue(f"no number in reply {_show(text)}")
    sign, digits, exponent = match.groups()
    return float(sign.replace("\u2212", "-") + digits.replace(",", "") + (exponent or ""))


def _same(want: Any, got: Any, normalize: bool) -> bool:
    if isinstance(want, bool) or isinstance(got, bool):
        return type(want) is type(got) and want == got
    if isinstance(want, int | float) and isinstance(got, int | float):
        return want == got
    if isinstance(want, str) and isinstance(got, str):
        return _fold(want) == _fold(got) if normalize else want == got
    if isinstance(want, dict) and isinstance(got, dict):
        return want.keys() == got.keys() and all(
            _same(v, got[k], normalize) for k, v in want.items()
        )
    if isinstance(want, list) and isinstance(got, list):
        return len(want) == len(got) and all(
            _same(w, g, normalize) for w, g in zip(want, got, strict=True)
        )
    return want is None and got is None


def _text(output: Output) -> str:
    return (output.text or "").strip()


def _subject(output: Output, field: str | None, *, raw: bool = False) -> str:
    """What a text scorer reads: the output text (stripped unless ``raw``), or its JSON
    ``field``: a string as it is, any other JSON value as compact JSON text. A missing field
    or an output that is not JSON raises _NoValue (a failing score saying why)."""
    if field is None:
        return (output.text or "") if raw else _text(output)
    value = _json(output, field)
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _where(field: str | None) -> str:
    return "" if field is None else f" in {field}"


def _fold(text: str) -> str:
    return " ".join(text.casefold().split())


def _loose(text: str) -> str:
    return _fold(text).strip(_EDGE_PUNCT)


def _clip(text: str, limit: int = _SHOW) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _show(value: Any, limit: int = _SHOW) -> str:
    """A value as quoted in a reason: strings in repr, everything else as JSON, clipped."""
    if isinstance(value, str):
        return repr(_clip(value, limit))
    return _clip(json.dumps(value, ensure_ascii=False, default=str), limit)


def _diff(want: str, got: str) -> str:
    at = next(
        (i for i, (w, g) in enumerate(zip(want, got, strict=False)) if w != g),
        min(len(want), len(got)),
    )
    if at < _SHOW - 10:  # the difference shows in the clipped values
        return f"expected {_show(want)}, got {_show(got)}"
    return f"differs at char {at}: expected {_show(want[at:])}, got {_show(got[at:])}"


def _json_type(value: Any) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    return names.get(type(value), "number" if isinstance(value, int | float) else "value")


def _num(value: float) -> str:
    return f"{value:.15g}"

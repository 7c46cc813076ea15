"""Deterministic scorers: pass flag, score and reason on passing and failing outputs; bad args."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from evalkit.records import Output, Score
from evalkit.scorers import deterministic
from evalkit.scorers.registry import SCORERS, ScorerArgError, build_scorer

ORDER = json.dumps(
    {
        "category": "Billing ",
        "priority": 2,
        "customer": {"id": "C-7", "vip": True},
        "items": [{"sku": "A1", "qty": 1.0}],
        "note": None,
        "summary": "Refund issued for the double charge",
    }
)


def run(name: str, args: dict[str, Any], text: str | None, resolve: Any = None) -> Score:
    return build_scorer(name, args, resolve)(Output(text=text), None)


@pytest.fixture
def resolve(tmp_path: Path) -> Callable[[str], Path]:
    return lambda name: tmp_path / name


# fmt: off
CASES = [
    # name, args, output text, passed, score, reason
    ("exact", {"text": "Paris\n"}, "  Paris \n", True, 1.0, "equals 'Paris'"),
    ("exact", {"text": "Paris"}, "Paris.", False, 0.0, "expected 'Paris', got 'Paris.'"),
    ("exact", {"text": "x" * 50 + "abc"}, "x" * 50 + "abd", False, 0.0,
     "differs at char 52: expected 'c', got 'd'"),
    ("exact", {"text": "Paris"}, None, False, 0.0, "expected 'Paris', got ''"),
    ("normalized_match", {"text": "Paris"}, '**"PARIS."**\n', True, 1.0,
     "matches 'paris' (normalized)"),
    ("normalized_match", {"text": "New  York"}, "new york!", True, 1.0,
     "matches 'new york' (normalized)"),
    ("normalized_match", {"text": "-3"}, "-3.", True, 1.0, "matches '-3' (normalized)"),
    ("normalized_match", {"text": "-3"}, "3", False, 0.0,
     "expected '-3', got '3' (normalized)"),
    ("contains", {"text": "Refund"}, "your REFUND is on its way", True, 1.0, "found 'Refund'"),
    ("contains", {"text": "Refund", "ignore_case": False}, "your refund", False, 0.0,
     "missing 'Refund' in reply"),
    ("contains", {"text": "refund"}, None, False, 0.0, "missing 'refund' in reply"),
    ("not_contains", {"text": "Acme"}, "try ACME instead", False, 0.0,
     "found forbidden 'Acme' at char 4"),
    ("not_contains", {"text": "Acme", "ignore_case": False}, "try ACME", True, 1.0,
     "no 'Acme' in reply"),
    ("not_contains", {"text": "Acme"}, None, True, 1.0, "no 'Acme' in reply"),
    ("regex", {"pattern": r"\bORD-\d+"}, "see ORD-8812 now", True, 1.0, "matched 'ORD-8812'"),
    ("regex", {"pattern": r"\bORD-\d+"}, "see XORD-8812", False, 0.0, r"no match for /\bORD-\d+/"),
    ("regex", {"pattern": r"^ord-\d+$", "flags": "im"}, "x\nOrd-1\ny", True, 1.0,
     "matched 'Ord-1'"),
    ("regex", {"pattern": "a.b", "flags": "s"}, "a\nb", True, 1.0, "matched 'a\\nb'"),
    ("regex", {"pattern": r"ORD \d+  # order id", "flags": "x"}, "ORD7", True, 1.0,
     "matched 'ORD7'"),
    ("forbidden_regex", {"pattern": r"(?i)password:\s*\S+"}, "Your Password: hunter2 ok",
     False, 0.0, "forbidden match 'Password: hunter2' at char 5"),
    ("forbidden_regex", {"pattern": r"\d{16}"}, "card ending 4242", True, 1.0,
     r"no match for /\d{16}/"),
    ("json_valid", {}, ORDER, True, 1.0, "valid JSON object"),
    ("json_valid", {}, " [1, 2]\n", True, 1.0, "valid JSON array"),
    ("json_valid", {}, '{"a": }', False, 0.0, "invalid JSON at line 1 col 7: Expecting value"),
    ("json_valid", {}, '{"a": 1,\n "b" 2}', False, 0.0,
     "invalid JSON at line 2 col 6: Expecting ':' delimiter"),
    ("json_valid", {}, '```json\n{"a": 1}\n```', False, 0.0,
     "output is wrapped in a code fence, expected raw JSON"),
    ("json_valid", {}, '{"a": NaN}', False, 0.0, "invalid JSON: NaN is not allowed in JSON"),
    ("json_valid", {}, "  ", False, 0.0, "output is empty, expected JSON"),
    ("json_valid", {}, None, False, 0.0, "output is empty, expected JSON"),
    ("json_fields", {"fields": {"category": "billing", "customer.id": "c-7"}}, ORDER, True, 1.0,
     "all 2 fields match"),
    ("json_fields", {"fields": {"priority": 2.0, "items.0.qty": 1, "note": None}}, ORDER, True,
     1.0, "all 3 fields match"),
    ("json_fields", {"fields": {"customer": {"id": "c-7", "vip": True}}}, ORDER, True, 1.0,
     "all 1 fields match"),
    ("json_fields", {"fields": {"category": "account", "priority": 2}}, ORDER, False, 0.5,
     "category: expected 'account', got 'Billing '"),
    ("json_fields", {"fields": {"category": "billing"}, "normalize": False}, ORDER, False, 0.0,
     "category: expected 'billing', got 'Billing '"),
    ("json_fields", {"fields": {"customer.vip": 1, "customer.name": "Ann", "note": 0}}, ORDER,
     False, 0.0, "customer.vip: expected 1, got true; customer.name: missing; "
     "note: expected 0, got null"),
    ("json_fields", {"fields": {"a": 1, "b": 2, "c": 3, "d": 4, "e": 5}}, '{"e": 5}', False, 0.2,
     "a: missing; b: missing; c: missing (+1 more)"),
    ("json_fields", {"fields": {"a": 1}}, "[1]", False, 0.0, "expected a JSON object, got array"),
    ("json_fields", {"fields": {"a": 1}}, "a=1", False, 0.0,
     "invalid JSON at line 1 col 1: Expecting value"),
    ("one_of", {"options": ["billing", "account"]}, "Billing.", True, 1.0,
     "'Billing.' is one of 2 options"),
    ("one_of", {"options": ["billing", "account"], "normalize": False}, "Billing", False, 0.0,
     "expected one of ['billing', 'account'], got 'Billing'"),
    ("one_of", {"options": ["billing", "account"]}, "shipping", False, 0.0,
     "expected one of ['billing', 'account'], got 'shipping'"),
    ("one_of", {"options": ["billing", "refund"], "field": "category"}, ORDER, True, 1.0,
     "'Billing ' is one of 2 options"),
    ("one_of", {"options": [1, 2, None], "field": "priority"}, ORDER, True, 1.0,
     "2 is one of 3 options"),
    ("one_of", {"options": ["low"], "field": "urgency"}, ORDER, False, 0.0,
     "missing field 'urgency'"),
    ("one_of", {"options": ["low"], "field": "urgency"}, "low", False, 0.0,
     "invalid JSON at line 1 col 1: Expecting value"),
    ("max_words", {"n": 3}, " one two\nthree ", True, 1.0, "3 words, limit 3"),
    ("max_words", {"n": 3}, "one two three four", False, 0.0, "4 words, limit 3"),
    ("max_words", {"n": 0}, None, True, 1.0, "0 words, limit 0"),
    ("max_words", {"n": 5, "field": "summary"}, ORDER, False, 0.0, "6 words in summary, limit 5"),
    ("max_words", {"n": 5, "field": "priority"}, ORDER, False, 0.0,
     "field 'priority' is number 2, not a string"),
    ("max_chars", {"n": 4}, " abcd\n", True, 1.0, "4 chars, limit 4"),
    ("max_chars", {"n": 3}, "abcd", False, 0.0, "4 chars, limit 3"),
    ("max_chars", {"n": 2, "field": "customer.id"}, ORDER, False, 0.0,
     "3 chars in customer.id, limit 2"),
    ("max_chars", {"n": 9, "field": "customer.email"}, ORDER, False, 0.0,
     "missing field 'customer.email'"),
    ("numeric_close", {"value": 1234.5}, "Total: 1,234.5 USD", True, 1.0,
     "got 1234.5, within 1234.5 ± 1e-06"),
    ("numeric_close", {"value": 12}, "It costs $12.", True, 1.0, "got 12, within 12 ± 1e-06"),
    ("numeric_close", {"value": -300}, "x = -3e2", True, 1.0, "got -300, within -300 ± 1e-06"),
    ("numeric_close", {"value": 1234567}, "1,234,568", False, 0.0,
     "got 1234568, expected 1234567 ± 1e-06"),
    ("numeric_close", {"value": 100, "tolerance": 0.05, "relative": True}, "105", True, 1.0,
     "got 105, within 100 ± 0.05 (relative)"),
    ("numeric_close", {"value": 100, "tolerance": 0.05, "relative": True}, "106", False, 0.0,
     "got 106, expected 100 ± 0.05 (relative)"),
    ("numeric_close", {"value": 1, "tolerance": 0.5}, "v2 is 1.4", True, 1.0,
     "got 1.4, within 1 ± 0.5"),
    ("numeric_close", {"value": 1, "field": "items.0.qty"}, ORDER, True, 1.0,
     "got 1, within 1 ± 1e-06"),
    ("numeric_close", {"value": 1, "field": "customer.vip"}, ORDER, False, 0.0,
     "field 'customer.vip' is boolean true, not a number"),
    ("numeric_close", {"value": 7, "field": "customer.id"}, ORDER, False, 0.0,
     "field 'customer.id' is string 'C-7', not a number"),
    ("numeric_close", {"value": 7}, "no digits here", False, 0.0,
     "no number in reply 'no digits here'"),
]
# fmt: on


@pytest.mark.parametrize(("name", "args", "text", "passed", "score", "reason"), CASES)
def test_scorer_outcome(
    name: str, args: dict[str, Any], text: str | None, passed: bool, score: float, reason: str
) -> None:
    result = run(name, args, text)
    assert (result.passed, result.score, result.reason) == (passed, pytest.approx(score), reason)
    assert not result.error


@pytest.mark.parametrize(
    ("text", "value"),
    [("1,234.5", 1234.5), ("$12", 12), ("-3e2", -300), ("-$4.50", -4.5), (".5 kg", 0.5),
     ("\u22122", -2), ("ORD-8812", 8812), ("1,2,3", 1), ("2.5e-3", 0.0025)],
)  # fmt: skip
def test_numeric_close_reads_first_number(text: str, value: float) -> None:
    result = run("numeric_close", {"value": value}, f"answer: {text} (approx)")
    assert result.passed, result.reason
    assert result.details["got"] == pytest.approx(value)


def test_long_values_are_clipped_in_reasons() -> None:
    result = run("exact", {"text": "short"}, "y" * 500)
    assert result.reason == f"expected 'short', got '{'y' * 39}…'"


def write(tmp_path: Path, name: str, content: Any) -> None:
    text = content if isinstance(content, str) else json.dumps(content)
    (tmp_path / name).write_text(text, encoding="utf-8")


SCHEMA = {
    "type": "object",
    "required": ["category", "priority"],
    "properties": {
        "category": {"enum": ["billing", "account"]},
        "priority": {"type": "integer"},
        "customer": {"type": "object", "properties": {"id": {"type": "string"}}},
    },
}


@pytest.mark.parametrize(
    ("text", "passed", "reason"),
    [
        ('{"category": "billing", "priority": 1}', True, "matches schema"),
        ('{"category": "billing"}', False, "schema: 'priority' is a required property at $"),
        ('{"category": "billing", "priority": 1, "customer": {"id": 7}}', False,
         "schema: 7 is not of type 'string' at $.customer.id"),
        ('{"category": "sales", "priority": 1}', False,
         "schema: 'sales' is not one of ['billing', 'account'] at $.category"),
        ('```json\n{"category": "billing", "priority": 1}\n```', False,
         "output is wrapped in a code fence, expected raw JSON"),
    ],
)  # fmt: skip
def test_json_schema(
    tmp_path: Path, resolve: Callable[[str], Path], text: str, passed: bool, reason: str
) -> None:
    write(tmp_path, "reply.json", SCHEMA)
    result = run("json_schema", {"schema": "reply.json"}, text, resolve)
    assert (result.passed, result.score, result.reason) == (passed, float(passed), reason)


def test_json_schema_reads_yaml_and_records_file_hash(
    tmp_path: Path, resolve: Callable[[str], Path]
) -> None:
    write(tmp_path, "reply.yml", "type: object\nrequired: [category]\n")
    bound = build_scorer("json_schema", {"schema": "reply.yml"}, resolve)
    assert bound.args == {"schema": "reply.yml"}
    assert list(bound.file_hashes) == ["reply.yml"]
    assert bound(Output(text='{"category": 1}'), None).passed
    assert bound(Output(text="{}"), None).reason == (
        "schema: 'category' is a required property at $"
    )


@pytest.mark.parametrize(
    ("file", "content", "match"),
    [
        ("bad.json", {"type": "strin"}, r"invalid schema .*bad\.json: .* at \$\.type"),
        ("bad.json", {"required": "x"}, r"invalid schema .*'x' is not of type 'array'"),
        ("bad.json", '{"type": ', r"bad\.json is not valid JSON: Expecting value"),
        ("bad.yaml", "type: [object\n", r"bad\.yaml is not valid YAML"),
        ("bad.json", "[1, 2]", r"bad\.json must hold an object, got array"),
    ],
)
def test_json_schema_rejects_bad_schema_files(
    tmp_path: Path, resolve: Callable[[str], Path], file: str, content: Any, match: str
) -> None:
    write(tmp_path, file, content)
    with pytest.raises(ScorerArgError, match=match):
        build_scorer("json_schema", {"schema": file}, resolve)


def test_json_schema_missing_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(ScorerArgError, match=r"json_schema: cannot read .*nope\.json"):
        build_scorer("json_schema", {"schema": tmp_path / "nope.json"})


@pytest.mark.parametrize(
    ("name", "args", "match"),
    [
        ("regex", {"pattern": "(ORD"},
         r"^regex: invalid regex '\(ORD': missing \), unterminated subpattern at position 0$"),
        ("forbidden_regex", {"pattern": "[a-"}, r"forbidden_regex: invalid regex '\[a-'"),
        ("regex", {"pattern": "a", "flags": "iz"}, r"unknown flag\(s\) 'z' in 'iz'; use 'imsx'"),
        ("regex", {"pattern": "a", "flags": 1}, r"flags must be letters among 'imsx', got int 1"),
        ("regex", {"pattern": ""}, "regex: pattern is empty"),
        ("exact", {"text": 42}, r"exact: text must be a string, got int 42 \(quote it in YAML\)"),
        ("exact", {"text": None}, r"exact: text must be a string, got NoneType null$"),
        ("normalized_match", {"text": ["a"]}, "text must be a string, got list"),
        ("contains", {"text": ""}, "contains: text is empty"),
        ("not_contains", {"text": "a", "ignore_case": "no"},
         "ignore_case must be true or false, got str 'no'"),
        ("max_words", {"n": -1}, r"max_words: n must be >= 0, got -1"),
        ("max_chars", {"n": 2.5}, "max_chars: n must be a non-negative integer, got float 2.5"),
        ("max_chars", {"n": True}, "n must be a non-negative integer, got bool true"),
        ("max_words", {"n": 3, "field": "a..b"}, "field 'a..b' has an empty part"),
        ("max_words", {"n": 3, "field": 1}, "field must be a dotted field name"),
        ("numeric_close", {"value": "12"}, "numeric_close: value must be a number, got str '12'"),
        ("numeric_close", {"value": 1, "tolerance": -0.1}, "tolerance must be >= 0, got -0.1"),
        ("numeric_close", {"value": 1, "tolerance": float("nan")}, "tolerance must be >= 0"),
        ("numeric_close", {"value": 1, "relative": 1}, "relative must be true or false"),
        ("one_of", {"options": []}, "one_of: options is empty"),
        ("one_of", {"options": "billing"}, "one_of: options must be a list, got str"),
        ("one_of", {"options": [True, False]},
         r"options\[0\] must be a string \(no field: given\), got bool true \(quote it in YAML\)"),
        ("one_of", {"options": [dt.date(2026, 7, 1)], "field": "d"},
         r"options\[0\] is not a JSON value: Object of type date"),
        ("json_fields", {"fields": {}}, "json_fields: fields is empty"),
        ("json_fields", {"fields": ["category"]}, "fields must be a mapping"),
        ("json_fields", {"fields": {"when": dt.date(2026, 7, 1)}},
         r"fields\.when is not a JSON value: .*date.* \(quote it in YAML\)"),
        ("json_fields", {"fields": {"x": float("nan")}}, r"fields\.x is not a JSON value"),
        ("json_fields", {"fields": {"a": 1}, "normalize": "yes"}, "normalize must be true or"),
        ("json_valid", {"strict": True}, r"bad args for scorer 'json_valid'.*strict"),
        ("contains", {"txt": "a"}, r"scorer 'contains'.*\(accepts: text, ignore_case, field\)"),
    ],
)  # fmt: skip
def test_bad_args_fail_at_build_time(name: str, args: dict[str, Any], match: str) -> None:
    with pytest.raises(ScorerArgError, match=match):
        build_scorer(name, args)


PRIMARY = {
    "exact": "text", "normalized_match": "text", "contains": "text", "not_contains": "text",
    "regex": "pattern", "forbidden_regex": "pattern", "json_valid": None, "json_schema": "schema",
    "json_fields": "fields", "one_of": "options", "max_words": "n", "max_chars": "n",
    "numeric_close": "value",
}  # fmt: skip


@pytest.mark.parametrize(("name", "primary"), PRIMARY.items())
def test_registration_primary_argument(name: str, primary: str | None) -> None:
    build_scorer("json_valid", {})  # loads the builtin scorers
    definition = SCORERS[name]
    assert definition.primary == primary
    assert definition.tier == 0 and not definition.trajectory
    assert definition.files == (("schema",) if name == "json_schema" else ())


def test_scorer_call_fills_the_name() -> None:
    bound = build_scorer("max_words", {"n": 1})
    assert bound.fn(Output(text="a b"), None).scorer == ""
    score = bound(Output(text="a b"), None)
    assert (score.scorer, score.passed, score.reason) == ("max_words", False, "2 words, limit 1")


def test_json_output_is_parsed_once_for_several_scorers(monkeypatch: pytest.MonkeyPatch) -> None:
    scorers = [
        build_scorer("json_valid", {}),
        build_scorer("json_fields", {"fields": {"id": "q-91"}}),
        build_scorer("one_of", {"options": ["q-91"], "field": "id"}),
    ]
    deterministic._parse_json.cache_clear()
    calls: list[str] = []
    loads = json.loads
    monkeypatch.setattr(
        deterministic.json, "loads", lambda s, **kw: calls.append(s) or loads(s, **kw)
    )
    text = '{"id": "Q-91", "unique": "parse-once"}'
    assert all(s(Output(text=text), None).passed for s in scorers)
    assert calls == [text]


# --- field: on every text scorer ---------------------------------------------------------------

_REPLY = json.dumps({"reply": "Your refund for order 8812 is on its way.", "order_id": 8812})


@pytest.mark.parametrize(
    ("name", "args", "passed", "reason"),
    [
        ("exact", {"text": "8812", "field": "order_id"}, True, "equals '8812' in order_id"),
        ("normalized_match", {"text": "YOUR REFUND for order 8812 is on its way", "field": "reply"},
         True, "(normalized) in reply"),
        ("contains", {"text": "refund", "field": "reply"}, True, "found 'refund' in reply"),
        ("contains", {"text": "reply", "field": "reply"}, False, "missing 'reply' in reply"),
        ("not_contains", {"text": "order_id", "field": "reply"}, True, "no 'order_id' in reply"),
        ("not_contains", {"text": "refund", "field": "reply"}, False, "at char 5 in reply"),
        ("regex", {"pattern": r"^\d{4}$", "field": "order_id"}, True, "matched '8812' in order_id"),
        ("regex", {"pattern": r"^Your", "field": "order_id"}, False, "no match for /^Your/ in"),
        ("forbidden_regex", {"pattern": "reply", "field": "reply"}, True, "no match for /reply/"),
        ("forbidden_regex", {"pattern": "refund", "field": "reply"}, False, "forbidden match"),
    ],
)  # fmt: skip
def test_text_scorers_target_one_json_field(
    name: str, args: dict[str, Any], passed: bool, reason: str
) -> None:
    """``field:`` points a text scorer at one JSON field: the key names elsewhere in the JSON
    (``"reply"``, ``order_id``) are not seen, a number field is read as its JSON text."""
    score = build_scorer(name, args)(Output(_REPLY), None)
    assert (score.passed, score.error) == (passed, False), score.reason
    assert reason in score.reason


@pytest.mark.parametrize("name", ["exact", "normalized_match", "contains", "not_contains"])
def test_a_text_scorer_on_a_missing_field_fails_saying_so(name: str) -> None:
    score = build_scorer(name, {"text": "x", "field": "customer.name"})(Output(_REPLY), None)
    assert not score.passed and not score.error
    assert score.reason == "missing field 'customer.name'"
    not_json = build_scorer(name, {"text": "x", "field": "reply"})(Output("plain text"), None)
    assert not not_json.passed and "JSON" in not_json.reason


@pytest.mark.parametrize(
    "name", ["exact", "normalized_match", "contains", "not_contains", "regex", "forbidden_regex"]
)
def test_every_text_scorer_accepts_field(name: str) -> None:
    primary = SCORERS[name].primary
    with pytest.raises(ScorerArgError, match="empty part"):
        build_scorer(name, {primary: "x", "field": "a..b"})


def test_a_catastrophic_regex_runs_off_the_event_loop_and_is_bounded() -> None:
    import asyncio

    from evalkit.records import Output
    from evalkit.scorers.registry import build_scorer

    slow = build_scorer("regex", {"pattern": "(a|aa)+$", "timeout_s": 1.0})
    assert slow.threaded

    async def both() -> tuple[int, int]:
        ticks: list[int] = []
        done: list[int] = []

        async def heartbeat() -> None:
            for i in range(40):
                ticks.append(i)
                if done:
                    return
                await asyncio.sleep(0.05)

        async def scored() -> object:
            score = await slow.ascore(Output("a" * 48 + "!"), None)
            done.append(len(ticks))  # how many heartbeats the loop served while it ran
            return score

        score, _ = await asyncio.gather(scored(), heartbeat())
        assert score.error, score.reason  # timed out: an error for this case only, not a hang
        return done[0], len(ticks)

    during, _ = asyncio.run(both())
    # A regex holding the loop would let the heartbeat tick once at most while it ran; counted,
    # not timed, so a loaded machine does not fail it.
    assert during >= 3, during


def test_a_schema_named_by_many_cases_is_compiled_once_and_an_edit_is_seen(tmp_path) -> None:
    from evalkit.scorers import structured

    schema = tmp_path / "reply.json"
    # texts no other test uses: the compiled cache is per process, shared by the whole suite
    schema.write_text('{"title": "compiled-once test", "type": "object", "required": ["answer"]}')
    before = structured._compiled.cache_info().misses
    scorers = [build_scorer("json_schema", {"schema": str(schema)}) for _ in range(500)]
    assert structured._compiled.cache_info().misses - before == 1  # a counter, not a timer
    assert not scorers[-1](Output('{"other": 1}'), None).passed
    schema.write_text('{"title": "compiled-once test, edited", "type": "object"}')  # compiled again
    assert build_scorer("json_schema", {"schema": str(schema)})(Output('{"other": 1}'), None).passed
    assert structured._compiled.cache_info().misses - before == 2

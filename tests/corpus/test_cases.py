"""Case loading, validation errors (file, line, id, exit 2), hashing, selection and stats."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from evalkit.cli import main
from evalkit.corpus.cases import Case, load_corpus
from evalkit.corpus.messages import render_messages
from evalkit.errors import CorpusError
from evalkit.records import canonical_json

CONFIG = """\
suite: tiny
system:
  provider: openai
  model: demo-support-1
  base_url: http://127.0.0.1:9/v1
  user_template: "Customer: {{message}}"
critical_tags: []
"""

GOOD = """\
- id: ok-001
  tags: [billing]
  provenance: {reviewer: lead, date: 2026-07-01, source: "ticket 1"}
  input:
    messages:
      - {role: user, content: "Refund order 8812"}
  expect:
    - {scorer: contains, args: {text: refund}}
"""


def make_corpus(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "corpus"
    (root / "cases").mkdir(parents=True)
    (root / "schemas").mkdir()
    (root / "schemas" / "reply.json").write_text('{"type": "object"}')
    (root / "evalkit.yaml").write_text(CONFIG)
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def load_error(tmp_path: Path, files: dict[str, str]) -> CorpusError:
    root = make_corpus(tmp_path, files)
    with pytest.raises(CorpusError) as info:
        load_corpus(root)
    return info.value


BAD_INPUTS = {
    "yaml_syntax": (
        {"cases/a.yaml": GOOD + "- id: broken\n  tags: [billing\n  input: x\n"},
        "cases/a.yaml:11",
        None,
        "YAML syntax error",
    ),
    "missing_id": (
        {
            "cases/a.yaml": GOOD + "- tags: [x]\n  input: {messages: [{role: user, content: hi}]}\n"
            "  expect: [{scorer: json_valid}]\n"
        },
        "cases/a.yaml:9",
        None,
        "has no id",
    ),
    "duplicate_id": (
        {"cases/a.yaml": GOOD, "cases/b.yaml": "\n\n" + GOOD},
        "cases/b.yaml:3",
        "ok-001",
        "duplicate id (first defined at cases/a.yaml:1)",
    ),
    "unknown_scorer": (
        {"cases/a.yaml": GOOD.replace("scorer: contains", "scorer: contians")},
        "cases/a.yaml:8",
        "ok-001",
        "unknown scorer 'contians' (did you mean 'contains'?)",
    ),
    "bad_scorer_args": (
        {"cases/a.yaml": GOOD.replace("args: {text: refund}", "args: {txt: refund}")},
        "cases/a.yaml:8",
        "ok-001",
        "bad args for scorer 'contains'",
    ),
    "missing_file": (
        {
            "cases/a.yaml": GOOD.replace(
                "{scorer: contains, args: {text: refund}}",
                "{scorer: json_schema, args: {schema: schemas/nope.json}}",
            )
        },
        "cases/a.yaml:8",
        "ok-001",
        "'schemas/nope.json' not found",
    ),
    "file_outside_root": (
        {
            "cases/a.yaml": GOOD.replace(
                "{scorer: contains, args: {text: refund}}",
                "{scorer: json_schema, args: {schema: ../evalkit.yaml}}",
            )
        },
        "cases/a.yaml:8",
        "ok-001",
        "outside the corpus root",
    ),
    "invalid_regex": (
        {
            "cases/a.yaml": GOOD.replace(
                "{scorer: contains, args: {text: refund}}",
                "{scorer: regex, args: {pattern: '(unclosed'}}",
            )
        },
        "cases/a.yaml:8",
        "ok-001",
        "(unclosed",
    ),
    "unknown_field": (
        {"cases/a.yaml": GOOD.replace("  tags: [billing]", "  tgas: [billing]")},
        "cases/a.yaml:2",
        "ok-001",
        "unknown field 'tgas' (did you mean 'tags'?)",
    ),
    "nested_unknown_field": (
        {"cases/a.yaml": GOOD.replace('source: "ticket 1"', 'sorce: "ticket 1"')},
        "cases/a.yaml:3",
        "ok-001",
        "unknown field 'provenance.sorce' (did you mean 'source'?)",
    ),
}


@pytest.mark.parametrize("kind", sorted(BAD_INPUTS))
def test_bad_input_is_one_line_naming_file_line_and_id(tmp_path: Path, kind: str) -> None:
    files, where, case_id, fragment = BAD_INPUTS[kind]
    error = load_error(tmp_path, files)
    message = str(error)
    assert "\n" not in message
    assert message.startswith(where + ":"), message
    assert fragment in message, message
    if case_id:
        assert f"case {case_id}:" in message


@pytest.mark.parametrize("kind", sorted(BAD_INPUTS))
def test_cli_exits_2_and_writes_nothing(
    tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    files, where, _, fragment = BAD_INPUTS[kind]
    root = make_corpus(tmp_path, files)
    db = tmp_path / "evalkit.duckdb"
    code = main(["run", "--config", str(root / "evalkit.yaml"), "--db", str(db), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2
    assert where in err and fragment in err
    assert len(err.strip().splitlines()) == 1
    assert not db.exists()  # validated before the store is even opened
    assert main(["cases", "lint", "--config", str(root / "evalkit.yaml")]) == 2


def test_good_corpus_loads_with_scorers_cheapest_first(tmp_path: Path) -> None:
    text = GOOD.replace(
        "    - {scorer: contains, args: {text: refund}}",
        "    - {scorer: contains, args: {text: refund}}\n    - json_valid\n    - max_words: 40",
    )
    root = make_corpus(tmp_path, {"cases/a.yaml": text})
    corpus = load_corpus(root)
    (case,) = corpus.cases
    assert case.id == "ok-001" and case.tags == ("billing",) and case.criticality == "normal"
    assert [s.name for s in case.scorers] == ["contains", "json_valid", "max_words"]
    assert case.scorers[2].args == {"n": 40}
    assert case.source == "cases/a.yaml:1"
    assert case.provenance["reviewer"] == "lead"


def _hash_of(tmp_path: Path, text: str, name: str) -> str:
    root = make_corpus(tmp_path / name, {"cases/a.yaml": text})
    return load_corpus(root).cases[0].hash


def test_case_hash_ignores_key_order_and_formatting(tmp_path: Path) -> None:
    reordered = """\
    - expect:
        - scorer: contains
          args:
            text: refund
      input: {messages: [{content: "Refund order 8812", role: user}]}
      provenance:
        source: ticket 1
        date: 2026-07-01
        reviewer: lead
      tags:
        - billing
      id: ok-001   # same case, different layout
    """
    short_form = GOOD.replace("{scorer: contains, args: {text: refund}}", "contains: refund")
    base = _hash_of(tmp_path, GOOD, "a")
    assert _hash_of(tmp_path, reordered, "b") == base
    assert _hash_of(tmp_path, short_form, "c") == base


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("Refund order 8812", "Refund order 8813"),
        ("text: refund", "text: Refund"),
        ("tags: [billing]", "tags: [billing, policy]"),
        ("date: 2026-07-01", "date: 2026-07-02"),
        ("  tags: [billing]", "  criticality: must_pass\n  tags: [billing]"),
    ],
)
def test_case_hash_changes_on_any_content_change(tmp_path: Path, old: str, new: str) -> None:
    assert old in GOOD
    assert _hash_of(tmp_path, GOOD.replace(old, new), "x") != _hash_of(tmp_path, GOOD, "y")


def test_canonical_json_normalizes_numbers_and_keys() -> None:
    assert canonical_json({"b": 2.0, "a": {"y": 1, "x": None}}) == '{"a":{"x":null,"y":1},"b":2}'


def test_vars_cases_render_through_user_template(tmp_path: Path) -> None:
    text = """\
    - id: vars-001
      provenance: {reviewer: lead, date: 2026-07-01}
      input: {vars: {message: "Where is my parcel?"}}
      expect: [json_valid]
    """
    root = make_corpus(tmp_path, {"cases/v.yaml": text})
    case = load_corpus(root, user_template="Customer: {{message}}").cases[0]
    messages = render_messages(case, "You are support.", "Customer: {{message}}")
    assert messages == [
        {"role": "system", "content": "You are support."},
        {"role": "user", "content": "Customer: Where is my parcel?"},
    ]
    with pytest.raises(
        CorpusError, match=r"cases/v.yaml:1: case vars-001: input.vars lacks \['name'\]"
    ):
        load_corpus(root, user_template="{{name}} says {{message}}")


def test_sealed_cases_are_skipped_unless_asked(tmp_path: Path) -> None:
    sealed = GOOD.replace("ok-001", "sealed-001")
    root = make_corpus(tmp_path, {"cases/a.yaml": GOOD, "sealed/s.yaml": sealed})
    assert [c.id for c in load_corpus(root).cases] == ["ok-001"]
    cases: tuple[Case, ...] = load_corpus(root, sealed=True).cases
    assert [(c.id, c.sealed) for c in cases] == [("ok-001", False), ("sealed-001", True)]


def test_selection_and_stats(tmp_path: Path) -> None:
    other = GOOD.replace("ok-001", "ok-002").replace("[billing]", "[account, injection]")
    root = make_corpus(tmp_path, {"cases/a.yaml": GOOD + other})
    corpus = load_corpus(root)
    assert [c.id for c in corpus.select(tags=["account"]).cases] == ["ok-002"]
    assert [c.id for c in corpus.select(exclude_tags=["account"]).cases] == ["ok-001"]
    stats = corpus.stats(critical_tags=["billing"])
    assert stats.per_tag == {"account": 1, "billing": 1, "injection": 1}
    assert stats.thin_critical_tags == {"billing": 1}
    assert corpus.hash != corpus.select(tags=["account"]).hash


def test_yaml_python_tags_are_refused(tmp_path: Path) -> None:
    error = load_error(tmp_path, {"cases/a.yaml": "- !!python/object/apply:os.system ['true']\n"})
    assert "cases/a.yaml:1" in str(error) and "YAML" in str(error)


@pytest.mark.parametrize(
    "entry",
    [
        "{json_fields: {category: billing}}",
        "{json_fields: {fields: {category: billing}}}",
        "{scorer: json_fields, args: {fields: {category: billing}}}",
    ],
)
def test_mapping_short_forms_expand_to_the_same_args(tmp_path: Path, entry: str) -> None:
    text = GOOD.replace("{scorer: contains, args: {text: refund}}", entry)
    root = make_corpus(tmp_path, {"cases/a.yaml": text})
    (scorer,) = load_corpus(root).cases[0].scorers
    assert scorer.args == {"fields": {"category": "billing"}}


def test_short_form_for_a_factory_taking_any_argument(tmp_path: Path) -> None:
    text = GOOD.replace(
        "{scorer: contains, args: {text: refund}}", '{tool_called: {name: refund, order_id: "8"}}'
    )
    root = make_corpus(tmp_path, {"cases/a.yaml": text})
    (scorer,) = load_corpus(root).cases[0].scorers
    assert scorer.args == {"name": "refund", "order_id": "8"}


def test_must_pass_written_as_a_tag_is_refused_with_the_fix(tmp_path: Path) -> None:
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "incidents.yaml").write_text(
        "- id: inc-4411\n"
        "  tags: [billing, must_pass]\n"
        "  input: {messages: [{role: user, content: hi}]}\n"
        "  expect: [{scorer: contains, args: {text: refund}}]\n"
    )
    with pytest.raises(CorpusError) as caught:
        load_corpus(tmp_path)
    message = str(caught.value)
    assert message.startswith("cases/incidents.yaml:2: case inc-4411:")
    assert "write `criticality: must_pass`" in message

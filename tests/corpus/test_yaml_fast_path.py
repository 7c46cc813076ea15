"""The libyaml fast path of ``parse_yaml`` reads exactly what the pure-Python loader reads.

Every document gets the same data, or the same refusal (message, line and column), from
``parse_yaml`` (libyaml first) and from ``_parse_python`` (the reference) — on hand-picked corner
cases, on random YAML-ish text, and on the repository's own case files with characters
inserted, deleted and replaced.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from evalkit.corpus import yaml_input
from evalkit.corpus.yaml_input import YAMLInputError, _parse_fast, _parse_python, parse_yaml

REPO = Path(__file__).resolve().parents[2]
SAMPLES = sorted((REPO / "corpus").rglob("*.yaml"))


def _outcome(parse: Any, text: str) -> tuple[Any, ...]:
    try:
        data, node = parse(text)
    except YAMLInputError as exc:
        return ("refused", exc.problem, exc.line, exc.column)
    return ("read", repr(data), None if node is None else node.start_mark.line)


def _same(text: str) -> None:
    assert _outcome(parse_yaml, text) == _outcome(_parse_python, text), text[:300]


CORNERS = [
    "",
    "---",  # hypothesis found it: libyaml marks the empty scalar on the next line
    "--- \n",
    "...",
    "# only a comment",
    "~",
    "a: 1\na: 2",
    "'a': 1\n\"a\": 2",
    "1: a\n0x1: b",
    "[?, ?]",
    "{?}",
    "- =\n",
    "a: =",
    "<<: {a: 1}\nb: 2",
    "base: &b {x: 1}\nover: {<<: *b, x: 2}",
    "a: &x [1]\nb: *x",
    "a: &x [*x]",
    "a: *nothing",
    "!!set {a, b}",
    "!!omap [a: 1]",
    "- !!binary aGk=",
    "a: !!str 1",
    "a: !!int x",
    "!!python/object/apply:os.system [echo hi]",
    "a: 2026-02-30",
    "a: 2026-02-03",
    "a: 2026-02-03T10:00:00Z",
    "a: 1e400",
    "a: " + "9" * 5000,
    "? [a]\n: b",
    "--- a\n--- b",
    "a:\tb",
    "a: |#\n  x",
    "a: >-\n  folded\n  text",
    "a: 'x",
    'a: "\\q"',
    "\x07",
    "a: b: c",
    "x: 1\n y: 2",
    "k: [1, 2",
    "{a: b?c}",
    "[a?b, c]",
    '{role: user, content "x?"}',
    "a: b?c",
    "[" * 70 + "]" * 70,
    "a: " + "[" * 63 + "]" * 63,
    "a: " + "[" * 64 + "]" * 64,
    "[" * 10_000,
    "- " * 80 + "x",
    "a: yes\nb: off\nc: null\nd: .inf\ne: 0o17",
]


@pytest.mark.parametrize("text", CORNERS, ids=range(len(CORNERS)))
def test_corner_cases_read_the_same(text: str) -> None:
    _same(text)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=list("ab1 :-[]{}?,&*!#'\"\n|>=~\t."), max_size=60))
def test_random_yaml_ish_text_reads_the_same(text: str) -> None:
    _same(text)


def test_mutated_case_files_read_the_same() -> None:
    rng = random.Random(20261201)
    chars = [*":-[]{}?,&*!#'\"\n \t|>%@`=~", "a", "1", "\u00e9"]
    assert SAMPLES
    for path in SAMPLES:
        original = path.read_text(encoding="utf-8")
        _same(original)
        for _ in range(25):
            text = list(original)
            for _ in range(rng.randint(1, 4)):
                at = rng.randrange(len(text) + 1)
                roll = rng.random()
                if roll < 0.4:
                    text.insert(at, rng.choice(chars))
                elif at < len(text):
                    if roll < 0.8:
                        del text[at]
                    else:
                        text[at] = rng.choice(chars)
            _same("".join(text))


def test_the_repository_corpus_takes_the_fast_path() -> None:
    if yaml_input._CLoader is None:
        pytest.skip("PyYAML without libyaml")
    for path in SAMPLES:
        text = path.read_text(encoding="utf-8")
        if not yaml_input._LENIENT.search(text):
            assert _parse_fast(text) is not None, path


def test_the_node_limit_refuses_at_the_same_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(yaml_input, "MAX_YAML_NODES", 50)
    text = "".join(f"- [a{i}, b{i}]\n" for i in range(40))  # 1 + 40 * 3 nodes, 40 * 2 + 4 events
    _same(text)
    with pytest.raises(YAMLInputError, match="more than 50 values") as refused:
        parse_yaml(text)
    assert refused.value.line == 17


@pytest.mark.parametrize(
    "text",
    ["", "a: b", "a:\tb", "\t", "a: |#\n  x", "a: >-#", "a: |2\n  x", "b > c", "x | y #", "|+0#"],
)
def test_the_lenient_check_skips_the_pattern_without_changing_its_answer(text: str) -> None:
    assert yaml_input._lenient(text) == bool(yaml_input._LENIENT.search(text))


def test_the_composer_gives_the_nodes_pyyaml_gives() -> None:
    """The composer without per-node path-resolver calls builds the same node graph."""
    if yaml_input._CLoader is None:
        pytest.skip("PyYAML without libyaml")

    def shape(node: Any) -> Any:
        marks = (node.tag, node.start_mark.index, node.end_mark.index, node.start_mark.line)
        if isinstance(node.value, list):
            return (marks, [shape(v) if not isinstance(v, tuple) else tuple(map(shape, v))
                            for v in node.value])  # fmt: skip
        return (marks, node.value, node.style)

    for path in SAMPLES:
        text = path.read_text(encoding="utf-8")
        ours, theirs = yaml_input._loader(text), yaml.CSafeLoader(text)
        try:
            assert shape(ours.get_single_node()) == shape(theirs.get_single_node()), path
        finally:
            ours.dispose()
            theirs.dispose()

"""A long case file's chunks are their own syntax check and node count (no pass over the whole
text first): the tag resolver that counts is PyYAML's answer, its count bounds the nodes, and a
syntax error or a case error anywhere in the file reads as the whole-file parse reads it, and
the node limit holds per case. Counted (chunks parsed, nodes), not timed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import test_chunked_parse
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from test_chunked_parse import _both
from test_shared_expect import _corpus

from evalkit.corpus import cases, yaml_chunks, yaml_input

pytestmark = pytest.mark.skipif(yaml_input._CLoader is None, reason="PyYAML without libyaml")

_NODE_EVENTS = (yaml.ScalarEvent, yaml.SequenceStartEvent, yaml.MappingStartEvent)
chunk_loads = test_chunked_parse.chunk_loads  # the fixture: the item count of each chunk parsed


class _Extra(yaml.SafeLoader):
    """A loader class with implicit resolvers of its own, one for every first character."""


_Extra.add_implicit_resolver("tag:example,2026:shout", yaml.resolver.re.compile(r"^[A-Z]+!$"), None)
_Extra.add_implicit_resolver("tag:example,2026:hash", yaml.resolver.re.compile(r"^#\w+$"), ["#"])


@settings(max_examples=400, deadline=None)
@given(
    value=st.one_of(
        st.sampled_from(
            [
                "",
                "~",
                "null",
                "Yes",
                "off",
                "1_000",
                "0x1F",
                "-.inf",
                ".nan",
                "<<",
                "=",
                "2001-12-14",
                "tags",
                "-",
                "+1",
                "1:20",
                "HEY!",
                "#tag",
                "Ok",
            ]
        ),
        st.text(alphabet=list("aY0-+.:~<=#!Ht_xe"), max_size=6),
    ),
    plain=st.booleans(),
    quoted=st.booleans(),
)
def test_the_tag_resolver_answers_as_pyyaml(value: str, plain: bool, quoted: bool) -> None:
    for loader_class in (yaml_input._Composer, _Extra):
        resolve, composed = yaml_input._tag_resolver(loader_class)
        pyyaml = loader_class("")  # PyYAML's own resolve, on a loader instance
        for kind, node_value in (
            (yaml.ScalarNode, value),
            (yaml.SequenceNode, None),
            (yaml.MappingNode, None),
        ):
            implicit = (plain, quoted) if kind is yaml.ScalarNode else plain
            assert resolve(kind, node_value, implicit) == pyyaml.resolve(
                kind, node_value, implicit
            ), (loader_class, kind, value, implicit)
        assert composed() == 3


def _exact_nodes(text: str) -> int | None:
    """The nodes of a document, from libyaml's events (None: libyaml refuses it)."""
    loader = yaml.CSafeLoader(text)
    try:
        nodes = 0
        while loader.check_event():
            nodes += isinstance(loader.get_event(), (*_NODE_EVENTS, yaml.AliasEvent))
        return nodes
    except yaml.YAMLError:
        return None
    finally:
        loader.dispose()


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=list("ab1 :-[]{}?,!#'\"\n|>~."), max_size=60))
def test_the_count_with_the_written_tags_bounds_the_nodes(text: str) -> None:
    exact = _exact_nodes(text)
    if exact is None:
        return
    loader = yaml_input._loader(text)
    try:
        loader.get_single_node()
    except yaml.YAMLError:  # libyaml's events take what its composer refuses (a second document)
        return
    finally:
        loader.dispose()
    assert exact <= loader.composed() + text.count("!")
    if "!" not in text:
        assert loader.composed() == exact


def _case(name: str, extra: str = "") -> str:
    return f"- id: {name}\n  input: {{vars: {{message: hi}}}}\n  expect: [json_valid]\n{extra}"


def test_a_syntax_error_in_chunk_3_after_case_errors_in_chunk_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk_loads: list[int]
) -> None:
    """The case errors before it are not reported: the whole file's YAML error is, alone."""
    bad = ["- id: a0\n  tpyo: 1\n  input: {vars: {message: hi}}\n  expect: [json_valid]\n"]
    items = bad + [_case(f"b{i}") for i in range(6)] + ["- id: c\n  input: {vars: [x\n"]
    items += [_case(f"d{i}") for i in range(5)]
    root = _corpus(tmp_path, {"c.yaml": "".join(items)})
    got = _both(root, monkeypatch, chunk=3)
    assert got[0] == "refused" and len(got[1]) == 1, got
    assert "YAML syntax error" in got[1][0][0], got
    assert chunk_loads == [3, 3, 3]  # stopped at the third chunk; the whole parse said why


def _values(n: int) -> str:
    return "[" + ", ".join(["t"] * n) + "]"


@pytest.fixture
def whole_parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The files parsed whole (a chunked load refused, or a load that does not chunk)."""
    seen: list[str] = []
    real = cases.parse_yaml_text

    def counting(text: str, rel: str) -> Any:
        seen.append(rel)
        return real(text, rel)

    monkeypatch.setattr(cases, "parse_yaml_text", counting)
    return seen


@pytest.mark.parametrize("over", [0, 1])
def test_a_node_limit_crossed_across_chunks_holds_per_case(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    chunk_loads: list[int],
    whole_parses: list[str],
    over: int,
) -> None:
    """Each chunk is far below the limit; the file has exactly the limit's nodes, or one more:
    loaded chunked either way (the limit holds per case in a file read case by case), while
    the file read whole, one document, is refused past it."""
    items = [_case(f"c{i}", f"  tags: {_values(7)}\n") for i in range(20)]
    text = "".join(items)
    exact = _exact_nodes(text)
    assert exact == 1 + 20 * 21  # 21 a case: its mapping, 4 keys, 2 + 4 + 2 + 8 below them
    monkeypatch.setattr(yaml_input, "MAX_YAML_NODES", exact - over)
    root = _corpus(tmp_path, {"c.yaml": text})
    with monkeypatch.context() as patch:
        patch.setattr(cases, "CASE_CHUNK_ITEMS", 3)
        assert len(cases.load_corpus(root).cases) == 20
    assert chunk_loads == [3] * 6 + [2]
    assert whole_parses == []
    with monkeypatch.context() as patch:
        patch.setattr(cases, "CASE_CHUNK_ITEMS", 10**9)
        if over:
            with pytest.raises(cases.CorpusError, match=f"more than {exact - 1:,} values"):
                cases.load_corpus(root)
        else:
            assert len(cases.load_corpus(root).cases) == 20


@pytest.fixture
def item_walks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The item count of each chunk whose items were counted one by one."""
    seen: list[int] = []
    real = yaml_chunks._check_item_sizes

    def counting(items: Any) -> None:
        seen.append(len(items))
        real(items)

    monkeypatch.setattr(yaml_chunks, "_check_item_sizes", counting)
    return seen


@pytest.mark.parametrize("tagged", [0, 1])
def test_written_tags_are_counted_too(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    chunk_loads: list[int],
    whole_parses: list[str],
    item_walks: list[int],
    tagged: int,
) -> None:
    """A node whose tag is written is not resolved: its '!' stands for it in the count. Here
    the limit is a chunk's items' nodes: the count with the two '!' of each tag crosses it,
    so each chunk's items are counted one by one (each is far below it: the file loads)."""
    tag = "!!str " if tagged else ""
    items = [_case(f"c{i}", f"  tags: [{tag}a, {tag}b]\n") for i in range(9)]
    text = "".join(items)
    root = _corpus(tmp_path, {"c.yaml": text})
    whole = cases.load_corpus(root).cases  # 9 cases: below a chunk, read whole
    monkeypatch.setattr(yaml_input, "MAX_YAML_NODES", (_exact_nodes(text) - 1) // 3)
    with monkeypatch.context() as patch:
        patch.setattr(cases, "CASE_CHUNK_ITEMS", 3)
        assert cases.load_corpus(root).cases == whole
    assert chunk_loads == [3, 3, 3]
    assert item_walks == [3, 3, 3] if tagged else item_walks == []
    assert whole_parses == ["cases/c.yaml"]  # the load above, before the limit was set


def test_a_case_error_on_the_last_line_of_a_chunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk_loads: list[int]
) -> None:
    """The line named is the file's: each chunk's nodes carry the file's line numbers."""
    last = "  tpyo: 1\n"  # the last line of its item, so of its chunk (items 3 and 6 of 3 each)
    items = [_case(f"c{i}", last if i % 3 == 2 else "") for i in range(8)]
    root = _corpus(tmp_path, {"c.yaml": "".join(items)})
    got = _both(root, monkeypatch, chunk=3)
    assert got[0] == "refused", got
    # items of 3 lines, and 4 for the third of each chunk: its 4th line is the chunk's last
    assert [(line, case_id) for _, _, line, case_id in got[1]] == [(10, "c2"), (20, "c5")]
    assert chunk_loads == [3, 3, 2]


def _first_error(root: Path) -> Any:
    try:
        cases.load_corpus(root)
    except cases.CorpusError as exc:
        return str(exc), exc.line
    return None


def test_no_pass_over_the_whole_text_before_the_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A valid long file is parsed once, chunk by chunk: libyaml's event parser never runs."""
    root = _corpus(tmp_path, {"c.yaml": "".join(_case(f"c{i}") for i in range(10))})
    calls: list[int] = []

    class Watched(yaml_input._Composer):  # type: ignore[misc, name-defined]
        def raw_parse(self) -> int:
            calls.append(1)
            return int(super().raw_parse())

    monkeypatch.setattr(yaml_input, "_Composer", Watched)
    monkeypatch.setattr(cases, "CASE_CHUNK_ITEMS", 3)
    assert _first_error(root) is None
    assert calls == []

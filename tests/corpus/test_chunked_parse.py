"""A long case file is parsed a few hundred cases at a time, so only one chunk's YAML nodes are
alive: the cases, the errors (file:line:case, their order) and the refusals of the hostile-input
limits are the whole-file parse's. Each check loads the same corpus twice in one test, chunked
(tiny chunks, so small files have many) and whole (chunks larger than any file).

Counted (loads, bytes traced), not timed.
"""

from __future__ import annotations

import random
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from test_hostile_input import HOSTILE_CASE_FILES
from test_shared_expect import _corpus, _outcome, _random_file

from evalkit.corpus import cases, yaml_chunks, yaml_input
from evalkit.corpus.cases import load_cases_file, load_corpus

WHOLE = 10**9  # chunks larger than any file: the whole-file parse


@pytest.fixture
def chunk_loads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The item count of every chunk parsed (a chunk refused counts too)."""
    seen: list[int] = []
    real = yaml_chunks._parse_chunk

    def counting(chunk_text: str, items: int) -> Any:
        seen.append(items)
        return real(chunk_text, items)

    monkeypatch.setattr(yaml_chunks, "_parse_chunk", counting)
    return seen


def _both(root: Path, monkeypatch: pytest.MonkeyPatch, chunk: int = 3, **kwargs: Any) -> Any:
    """The outcome of a load chunked by ``chunk`` and of the whole-file load, asserted equal."""
    with monkeypatch.context() as patch:
        patch.setattr(cases, "CASE_CHUNK_ITEMS", chunk)
        chunked = _outcome(root, **kwargs)
    with monkeypatch.context() as patch:
        patch.setattr(cases, "CASE_CHUNK_ITEMS", WHOLE)
        whole = _outcome(root, **kwargs)
    assert chunked == whole
    return chunked


@pytest.mark.parametrize("seed", range(30))
def test_random_files_load_the_same_chunked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk_loads: list[int], seed: int
) -> None:
    rng = random.Random(seed)
    files = {f"f{k}.yaml": _random_file(rng, rng.randint(8, 30), f"f{k}-") for k in range(2)}
    root = _corpus(tmp_path, files)
    for defer in (False, True):
        _both(root, monkeypatch, chunk=rng.choice([1, 2, 3, 7]), defer_scorers=defer)
    assert chunk_loads  # the files were chunked


def test_errors_in_several_chunks_are_the_same_and_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk_loads: list[int]
) -> None:
    rng = random.Random(11)
    root = _corpus(tmp_path, {"a.yaml": _random_file(rng, 40, "a-", typos=0.3)})
    got = _both(root, monkeypatch)
    assert got[0] == "refused" and len(got[1]) > 3, got  # several errors, from several chunks
    assert len({line for _, _, line, _ in got[1]}) == len(got[1])
    with monkeypatch.context() as patch:  # the first one alone, as a plain load raises it
        patch.setattr(cases, "CASE_CHUNK_ITEMS", 3)
        with pytest.raises(cases.CorpusError) as chunked:
            load_cases_file(root / "cases" / "a.yaml", root)
    assert (chunked.value.line, chunked.value.case_id) == got[1][0][2:]
    assert len(chunk_loads) > 10


def _valid(n: int, name: str) -> bytes:
    return "".join(
        f"- id: {name}-{i}\n  input: {{vars: {{message: hi}}}}\n  expect: [json_valid]\n"
        for i in range(n)
    ).encode()


@pytest.mark.parametrize("name", sorted(HOSTILE_CASE_FILES))
def test_hostile_content_before_between_and_after_valid_cases(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    content, _ = HOSTILE_CASE_FILES[name]
    if len(content) > 64 << 10:
        content = content[: 64 << 10]  # a megabyte cut short: as hostile, cheaper to load twice
    layouts = {
        "after": _valid(7, "a") + content,
        "before": content + (b"" if content.endswith(b"\n") else b"\n") + _valid(7, "b"),
        "between": _valid(4, "a") + content + b"\n" + _valid(5, "b"),
    }
    for layout, text in layouts.items():
        root = _corpus(tmp_path / layout, {"hostile.yaml": text.decode("utf-8", "replace")})
        for max_errors in (1, 50):
            with monkeypatch.context() as patch:
                patch.setattr(cases, "CASE_CHUNK_ITEMS", 2)
                chunked = _lint_outcome(root, max_errors)
            with monkeypatch.context() as patch:
                patch.setattr(cases, "CASE_CHUNK_ITEMS", WHOLE)
                whole = _lint_outcome(root, max_errors)
            assert chunked == whole, (layout, max_errors)


def _lint_outcome(root: Path, max_errors: int) -> Any:
    try:
        corpus = load_corpus(root, max_errors=max_errors, defer_scorers=True)
    except cases.CorpusError as exc:
        errors = getattr(exc, "errors", [exc])
        return [(str(e), e.path, e.line, e.column, e.case_id) for e in errors]
    return [(c.id, c.hash, c.source) for c in corpus.cases]


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('- id: a\n  input: {vars: {message: "x\n- y"}}\n  expect: [json_valid]\n', "quoted"),
        ("- id: a\n  input: {vars: {message: [x,\n- y]}}\n  expect: [json_valid]\n", "flow"),
        ("top:\n- id: a\n- id: b\n- id: c\n- id: d\n", "a mapping's list"),
        ("- id: a\n  expect: [json_valid]\n...\n- id: b\n  expect: [json_valid]\n", "doc end"),
        ("- id: a\n  expect: [json_valid]\n- id: a2\n  expect: [json_valid]\n" * 3, "dup ids"),
        ("- id: a\r\n  input: {vars: {message: hi}}\r\n  expect: [json_valid]\r\n" * 5, "CRLF"),
        ("# leading comment\n\n" + "- id: c\n  expect: [json_valid]\n" * 5, "comment"),
        ("- id: a\n  expect: [json_valid]\n- id: b\n  expect: [json_valid]\n  id: c\n", "dup"),
        ("- id: a\n  expect: [json_valid]\n- id: b\n  expect: [!!str json_valid]\n" * 3, "tag"),
        (
            "- id: a\n  tpyo: 1\n  expect: [json_valid]\n"
            + "- id: b\n  input: {vars: {message: hi}}\n  expect: [json_valid]\n" * 4
            + "- id: z\n  input: {vars: {message: *nope}}\n  expect: [json_valid]\n",
            "a case error, then an alias the last chunk cannot compose",
        ),
    ],
)
def test_texts_that_must_not_be_cut_at_a_dash_load_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, why: str
) -> None:
    root = _corpus(tmp_path, {"c.yaml": text})
    for chunk in (1, 2):
        _both(root, monkeypatch, chunk=chunk)


def test_the_node_limit_holds_per_case_not_for_the_whole_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk_loads: list[int]
) -> None:
    """Every chunk is far below the limit; the file is not: it loads chunk by chunk (a long
    case list is bounded per case, and in bytes before parsing), and the same file read whole,
    one document, is refused. The limit is a tenth of the shipped 1,000,000 here: the same
    counting, a tenth of the parsing."""
    monkeypatch.setattr(yaml_input, "MAX_YAML_NODES", 100_000)
    values = "[" + ", ".join(["1"] * 99) + "]"
    body = f"  input: {{vars: {{message: hi, v: {values}}}}}\n  expect: [json_valid]\n"
    root = _corpus(tmp_path, {"big.yaml": "".join(f"- id: x{i}\n{body}" for i in range(1_050))})
    monkeypatch.setattr(cases, "CASE_CHUNK_ITEMS", 32)
    assert len(load_corpus(root).cases) == 1_050  # 118,651 values
    assert len(chunk_loads) == 33
    monkeypatch.setattr(cases, "CASE_CHUNK_ITEMS", WHOLE)
    with pytest.raises(cases.CorpusError, match="more than 100,000 values"):
        load_corpus(root)


def _peak_bytes(root: Path, monkeypatch: pytest.MonkeyPatch, chunk: int) -> int:
    with monkeypatch.context() as patch:
        patch.setattr(cases, "CASE_CHUNK_ITEMS", chunk)
        tracemalloc.start()
        try:
            corpus = load_corpus(root, defer_scorers=True)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert len(corpus.cases) == CASES
    return peak


#: What loading 2,000 cases may hold at its peak: the cases (~1 MB here) and one chunk's nodes
#: (measured: 5 MiB). The whole file's node graph alone is several times more (27 MiB; at 5,000
#: cases 8 against 69 MiB, the gap grows with the file).
CASES, PEAK_BOUND = 2000, 12 << 20


def test_a_2000_case_file_peaks_below_what_its_whole_node_graph_takes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    case = (
        "- id: c-{i:05d}\n  tags: [billing, refund]\n"
        "  input: {{messages: [{{role: user, content: 'Where is my refund for order {i}?'}}]}}\n"
        "  expect:\n    - {{scorer: json_fields, args: {{fields: {{category: billing}}}}}}\n"
        "    - {{regex: 'refund'}}\n    - {{max_words: 80}}\n"
    )
    root = _corpus(tmp_path, {"c.yaml": "".join(case.format(i=i) for i in range(CASES))})
    whole = _peak_bytes(root, monkeypatch, WHOLE)
    chunked = _peak_bytes(root, monkeypatch, 256)
    assert chunked < PEAK_BOUND < whole, (chunked, whole)

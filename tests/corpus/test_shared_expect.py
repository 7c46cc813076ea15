"""Cases of one load that write the same ``expect`` list share what checking it found: the list is
validated, its files hashed and its canonical JSON written once, its scorers built once; and the
loaded cases are smaller (slots, shared tags and empty defaults). Sharing changes nothing a case
holds, nor any error: each is checked against a load with sharing turned off.

Counted, not timed.
"""

from __future__ import annotations

import inspect
import json
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalkit.corpus import case_scorers, cases
from evalkit.corpus.case_scorers import is_pending
from evalkit.corpus.case_spec import CaseSpec
from evalkit.corpus.cases import Case, case_hash, load_corpus
from evalkit.errors import CorpusError
from evalkit.scorers import structured
from evalkit.scorers.registry import SCORERS, check, scorer


def _corpus(root: Path, files: dict[str, str]) -> Path:
    (root / "cases").mkdir(parents=True, exist_ok=True)
    (root / "schemas").mkdir(exist_ok=True)
    (root / "schemas" / "reply.json").write_text(
        json.dumps({"title": "shared-expect test", "type": "object"}), encoding="utf-8"
    )
    for name, text in files.items():
        (root / "cases" / name).write_text(text, encoding="utf-8")
    return root


def _case(i: int, expect: str, extra: str = "") -> str:
    return (
        f"- id: case-{i:04d}\n  tags: [t{i % 3}]\n{extra}"
        f"  input: {{messages: [{{role: user, content: 'order {i}?'}}]}}\n  expect:\n{expect}"
    )


SCHEMA_AND_FIELDS = (
    "    - {scorer: json_schema, args: {schema: schemas/reply.json}}\n"
    "    - {scorer: json_fields, args: {fields: {category: billing}}}\n"
)
REGEX = '    - {scorer: regex, args: {pattern: "refund"}}\n    - max_words: 80\n'


@pytest.fixture
def checked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The case ids whose ``expect`` list was checked (validated, hashed) rather than shared."""
    seen: list[str] = []
    real = case_scorers.ScorerBinder.share_expect

    def counting(self: Any, *args: Any) -> Any:
        seen.append(args[-1])  # share_expect(key, specs, canonical, lines, rel, case_id)
        return real(self, *args)

    monkeypatch.setattr(case_scorers.ScorerBinder, "share_expect", counting)
    return seen


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    real = case_scorers.build_scorer

    def counting(name: str, args: dict[str, Any], resolve: Any = None) -> Any:
        seen.append(name)
        return real(name, args, resolve)

    monkeypatch.setattr(case_scorers, "build_scorer", counting)
    return seen


def test_a_schema_named_by_500_cases_is_compiled_and_checked_once(
    tmp_path: Path, checked: list[str], builds: list[str]
) -> None:
    text = "".join(_case(i, SCHEMA_AND_FIELDS if i % 2 else REGEX) for i in range(500))
    root = _corpus(tmp_path, {"all.yaml": text})
    (root / "schemas" / "reply.json").write_text('{"title": "compiled once for 500 cases"}')
    before = structured._compiled.cache_info().misses
    corpus = load_corpus(root)
    assert len(corpus.cases) == 500
    assert structured._compiled.cache_info().misses - before == 1  # a counter, not a timer
    assert checked == ["case-0000", "case-0001"]  # two distinct lists, each checked once
    assert sorted(builds) == ["json_fields", "json_schema", "max_words", "regex"]
    first, third = corpus.cases[1], corpus.cases[3]
    assert first.scorers is third.scorers  # one tuple for every case writing the list


def test_deferred_load_of_500_cases_builds_the_two_selected(
    tmp_path: Path, checked: list[str], builds: list[str]
) -> None:
    text = "".join(_case(i, SCHEMA_AND_FIELDS) for i in range(500))
    corpus = load_corpus(_corpus(tmp_path, {"all.yaml": text}), defer_scorers=True)
    assert builds == [] and len(checked) == 1
    corpus.select(ids=["case-0007", "case-0400"])
    assert sorted(builds) == ["json_fields", "json_schema"]  # shared by the two
    assert sum(not is_pending(c) for c in corpus.cases) == 2


def test_a_refused_argument_is_reported_at_the_line_of_the_case_that_builds_it(
    tmp_path: Path,
) -> None:
    bad = '    - {scorer: regex, args: {pattern: "("}}\n'
    text = "".join(_case(i, bad) for i in range(4))
    root = _corpus(tmp_path, {"all.yaml": text})
    deferred = load_corpus(root, defer_scorers=True)
    with pytest.raises(CorpusError) as caught:
        deferred.select(ids=["case-0002"])
    assert (caught.value.case_id, caught.value.line) == ("case-0002", 2 * 5 + 5)
    with pytest.raises(CorpusError) as eager:
        load_corpus(root)
    assert (eager.value.case_id, eager.value.line) == ("case-0000", 5)


def test_a_missing_file_is_reported_for_every_case_naming_it(tmp_path: Path) -> None:
    root = _corpus(tmp_path, {"all.yaml": "".join(_case(i, SCHEMA_AND_FIELDS) for i in range(3))})
    (root / "schemas" / "reply.json").unlink()
    with pytest.raises(CorpusError) as caught:
        load_corpus(root, max_errors=10, defer_scorers=True)
    found = [(e.case_id, e.line) for e in caught.value.errors]  # type: ignore[attr-defined]
    assert found == [("case-0000", 5), ("case-0001", 11), ("case-0002", 17)]  # 6 lines a case


def test_a_suite_scorer_is_still_built_for_each_case(
    tmp_path: Path, builds: list[str], registry: None
) -> None:
    @scorer("shared_expect_own")
    def own(word: str = "x"):  # a suite's own scorer: it may keep state, so never shared
        def score(output: Any, case: Any) -> Any:
            return check(True, "ok")

        return score

    own.__module__ = "myproject.checks"
    entry = "    - {scorer: shared_expect_own, args: {word: hi}}\n"
    corpus = load_corpus(_corpus(tmp_path, {"a.yaml": _case(0, entry) + _case(1, entry)}))
    assert builds == ["shared_expect_own", "shared_expect_own"]
    assert corpus.cases[0].scorers[0] is not corpus.cases[1].scorers[0]


def test_loaded_cases_are_slotted_and_share_what_they_write_alike(tmp_path: Path) -> None:
    text = "".join(_case(i, REGEX) for i in range(6))
    corpus = load_corpus(_corpus(tmp_path, {"all.yaml": text}), defer_scorers=True)
    a, b = corpus.cases[0], corpus.cases[3]  # both tagged t0
    assert not hasattr(a, "__dict__")
    assert a.tags == ("t0",) and a.tags is b.tags
    assert a.fixtures == {"tools": {}, "documents": []} and a.fixtures is b.fixtures
    assert a.provenance == {} and a.provenance is b.provenance
    assert is_pending(a) and a.scorers == b.scorers and not is_pending(a)


# --- sharing changes nothing ---------------------------------------------------------------

#: Expect lists written in many ways (the same list in several styles, and lists with block
#: scalars, quoting, numbers and nested arguments whose reading depends on their layout).
_ENTRIES = [
    ["contains: refund", "{scorer: contains, args: {text: refund}}", "contains: 'refund'"],
    ["{max_words: 80}", "max_words: 80", "{scorer: max_words, args: {n: 80}}"],
    ["numeric_close: {value: 1.0}", "numeric_close: {value: 1}", "numeric_close: 2.5"],
    ["one_of: [a, 'b', '1.0']", "one_of: {options: [a, b], field: x}"],
    ["json_fields: {fields: {id: '8812', amount: 49.90, ok: true, n: 1.0, big: 1e16, z: -0.0}}"],
    [
        "{scorer: json_schema, args: {schema: schemas/reply.json}}",
        "json_schema: schemas/reply.json",
    ],
    ['regex: "\\\\border\\\\b"', "regex: '\\border\\b'", "regex: {pattern: 'x?', flags: i}"],
]
_BLOCK_SCALARS = ["|\n{i}  refund\n{i}  now", "|2\n{i}   refund", ">-\n{i}  re\n{i}  fund"]


def _expect_text(rng: random.Random, indent: int) -> str:
    pad = " " * indent
    lines = []
    for _ in range(rng.randint(1, 3)):
        if rng.random() < 0.2:
            body = rng.choice(_BLOCK_SCALARS).format(i=pad + "  ")
            lines.append(f"{pad}- contains: {body}\n")
        else:
            lines.append(f"{pad}- {rng.choice(rng.choice(_ENTRIES))}\n")
    if rng.random() < 0.25:  # the same entries as one flow list
        flow = ", ".join(line.strip()[2:] for line in lines if "\n" not in line.strip())
        return f" [{flow or 'json_valid'}]\n"
    return "\n" + "".join(lines)


def _random_file(rng: random.Random, n: int, name: str = "c", typos: float = 0.03) -> str:
    pool = [_expect_text(rng, rng.choice([0, 2, 4])) for _ in range(3)]
    chunks = []
    for i in range(n):
        inner = rng.choice([2, 4])
        pad = " " * inner
        head = f"-{' ' * (inner - 1)}id: {name}{i:03d}\n"
        extra = ""
        if rng.random() < 0.3:
            extra += f"{pad}criticality: must_pass\n"
        if rng.random() < 0.3:
            extra += f"{pad}provenance: {{reviewer: r, date: 2026-07-0{1 + i % 9}}}\n"
        if rng.random() < 0.3:
            extra += f"{pad}fixtures: {{tools: {{lookup: {{id: {i}, total: 1.0}}}}}}\n"
        if rng.random() < 0.2:
            extra += f"{pad}group: g{i % 2}\n"
        if rng.random() < typos:
            extra += f"{pad}tpyo: 1\n"  # an error, after the expect list was shared
        if rng.random() < 0.5:
            content = rng.choice(["'ünïcode ✓'", '"1.0 e+ ratio"', "plain text", "'Order 1.0?'"])
            inputs = f"{pad}input: {{messages: [{{role: user, content: {content}}}]}}\n"
        else:
            inputs = f"{pad}input: {{vars: {{message: hi, n: {rng.choice(['1.0', '2', 'x'])}}}}}\n"
        expect = rng.choice(pool)
        # a list is indented under its key: shift the pool's text to this case's indent
        expect = (
            expect
            if expect.startswith(" [")
            else "\n" + "".join(pad + line + "\n" for line in expect.strip("\n").split("\n"))
        )
        chunks.append(f"{head}{pad}tags: [t{i % 2}]\n{extra}{inputs}{pad}expect:{expect}")
    return "".join(chunks)


def _outcome(root: Path, **kwargs: Any) -> Any:
    try:
        corpus = load_corpus(root, max_errors=50, **kwargs)
    except CorpusError as exc:
        errors = getattr(exc, "errors", [exc])
        return ("refused", [(str(e), e.path, e.line, e.case_id) for e in errors])
    return (
        "loaded",
        [
            (c, c.hash, c.source, [(s.name, s.args, s.tier) for s in c.scorers])
            for c in corpus.cases
        ],
    )


@pytest.mark.parametrize("seed", range(40))
def test_sharing_changes_no_case_and_no_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    rng = random.Random(seed)
    files = {f"f{k}.yaml": _random_file(rng, rng.randint(4, 10), f"f{k}-") for k in range(2)}
    root = _corpus(tmp_path, files)
    for defer in (False, True):
        shared = _outcome(root, defer_scorers=defer)
        with monkeypatch.context() as patch:
            patch.setattr(cases, "sequence_key", lambda node, text: None)
            alone = _outcome(root, defer_scorers=defer)
        assert shared == alone, files


def test_the_case_hash_is_the_canonical_hash_of_the_validated_case(tmp_path: Path) -> None:
    rng = random.Random(7)
    text = _random_file(rng, 40, typos=0)
    root = _corpus(tmp_path, {"all.yaml": text})
    raw = {c["id"]: c for c in yaml.safe_load(text)}
    corpus = load_corpus(root)
    assert len(corpus.cases) == 40
    for case in corpus.cases:
        spec = CaseSpec.model_validate(
            {**raw[case.id], "expect": _long_forms(raw[case.id]["expect"])}
        )
        assert case.hash == case_hash(spec), case.id


def _long_forms(expect: list[Any]) -> list[dict[str, Any]]:
    out = []
    for entry in expect:
        if isinstance(entry, str):
            entry = {entry: None}
        if "scorer" in entry:
            out.append(entry)
            continue
        (name, value), primary = next(iter(entry.items())), SCORERS[next(iter(entry))].primary
        if value is None:
            out.append({"scorer": name})
        elif isinstance(value, dict) and (primary is None or set(value) <= _params(name)):
            out.append({"scorer": name, "args": value})
        else:
            out.append({"scorer": name, "args": {primary: value}})
    return out


def _params(name: str) -> set[str]:
    return set(inspect.signature(SCORERS[name].factory).parameters)


def test_an_anchored_document_shares_nothing_and_loads_the_same(
    tmp_path: Path, checked: list[str]
) -> None:
    plain = "".join(_case(i, REGEX) for i in range(3))
    anchored = plain.replace("  tags: [t0]\n", "  tags: &t [t0]\n", 1)
    a = load_corpus(_corpus(tmp_path / "a", {"a.yaml": plain}))
    b = load_corpus(_corpus(tmp_path / "b", {"a.yaml": anchored}))
    assert len(checked) == 1 + 3  # the plain file shares its list; the anchored one does not
    assert [c.hash for c in a.cases] == [c.hash for c in b.cases]
    assert [(c.id, c.scorers) for c in a.cases] == [(c.id, c.scorers) for c in b.cases]


def test_a_case_equal_to_one_loaded_from_its_own_file(tmp_path: Path) -> None:
    """A case whose list was shared is the case its file alone would give."""
    text = "".join(_case(i, SCHEMA_AND_FIELDS, "  criticality: must_pass\n") for i in range(3))
    together = load_corpus(_corpus(tmp_path / "a", {"a.yaml": text})).cases[2]
    alone_text = _case(2, SCHEMA_AND_FIELDS, "  criticality: must_pass\n")
    alone = load_corpus(_corpus(tmp_path / "b", {"a.yaml": alone_text})).cases[0]
    assert isinstance(together, Case)
    assert (together.hash, together.scorers) == (alone.hash, alone.scorers)
    assert together == replace(alone, source=together.source)

"""The case index (evalkit.corpus.case_index, ``scan_corpus`` and ``load_chosen``):
the facts it gives are a full load's (corpus hash, file hashes, selection, manifest), a warm
index builds only the cases asked for, and an entry that is stale, corrupt or wrong is read
again from its file, never trusted. Counts, never timers."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from projects import make_project

from evalkit.corpus.case_facts import load_chosen, scan_corpus
from evalkit.corpus.case_index import CaseIndex
from evalkit.corpus.cases import Case, Corpus, load_corpus
from evalkit.corpus.manifest import build_manifest
from evalkit.corpus.selection import Selection
from evalkit.corpus.suite import load_suite
from evalkit.errors import CorpusError

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "corpus"


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    """A copy of the demo suite (its files are edited by some tests)."""
    root = tmp_path / "corpus"
    make_project(root, demo=True)
    return root


def _generated(root: Path, n: int = 600) -> Path:
    """Cases across three files: tags, must_pass, vars, a schema file, a rubric, drafts."""
    (root / "cases").mkdir(parents=True)
    (root / "schemas").mkdir()
    (root / "rubrics").mkdir()
    (root / "schemas" / "reply.json").write_text('{"type": "object"}')
    (root / "rubrics" / "tone.md").write_text("Polite and short.\n1: rude\n5: polite, short\n")
    for f in range(3):
        lines = ["# generated\n"]
        for i in range(f, n, 3):
            crit = "must_pass" if i % 7 == 0 else "normal"
            expect = (
                "[{json_schema: schemas/reply.json}]"
                if i % 2
                else "[{contains: ok}, {scorer: judge, args: {rubric: rubrics/tone.md}}]"
            )
            body = (
                f"  input: {{vars: {{message: 'order {i}', n: {i}.0}}}}\n"
                if i % 5 == 0
                else f"  input:\n    messages:\n      - {{role: user, content: 'Where is {i}?'}}\n"
            )
            lines.append(
                f"- id: gen-{i:04d}\n  tags: [t{i % 4}, {'smoke' if i % 3 == 0 else 'deep'}]\n"
                f"  criticality: {crit}\n{body}  expect: {expect}\n"
                + ("  review: draft\n" if i % 11 == 0 else "")
                + ("\n# between cases\n" if i % 13 == 0 else "")
            )
        (root / "cases" / f"gen-{f}.yaml").write_text("".join(lines))
    return root


def _same_case(built: Case, full: Case) -> None:
    for name in Case.__dataclass_fields__:
        mine, theirs = getattr(built, name), getattr(full, name)
        if name == "scorers":
            mine = [(s.name, s.args, s.file_hashes) for s in mine]
            theirs = [(s.name, s.args, s.file_hashes) for s in theirs]
        assert mine == theirs, (built.id, name)


@pytest.mark.parametrize("corpus", ["demo", "generated"])
@pytest.mark.parametrize("sealed", [False, True])
def test_the_facts_and_the_cases_built_are_a_full_loads(
    corpus: str, sealed: bool, tmp_path: Path, demo: Path
) -> None:
    root = demo if corpus == "demo" else _generated(tmp_path / "gen")
    full = load_corpus(root, sealed=sealed, defer_scorers=True)
    index = tmp_path / "index"
    for _ in ("cold", "warm"):
        facts = scan_corpus(root, sealed=sealed, index_dir=index)
        assert facts.hash == full.hash
        assert facts.file_hashes == full.file_hashes
        assert [c.id for c in facts.cases] == [c.id for c in full.cases]
        assert [(c.tags, c.criticality, c.review, c.source, c.sealed) for c in facts.cases] == [
            (c.tags, c.criticality, c.review, c.source, c.sealed) for c in full.cases
        ]
        assert facts.warnings == full.warnings
        wanted = {c.id for i, c in enumerate(full.cases) if i % 3 == 1}
        built = facts.load(wanted)
        by_id = {c.id: c for c in full.cases}
        assert {c.id for c in built.cases} == wanted
        for case in built.cases:
            _same_case(case, by_id[case.id])


def test_a_warm_index_builds_only_the_cases_asked_for(tmp_path: Path) -> None:
    root = _generated(tmp_path / "gen")
    index = tmp_path / "index"
    cold = scan_corpus(root, index_dir=index)
    assert (cold.counts.files_parsed, cold.counts.entries_written) == (3, 3)
    assert cold.counts.cases_built == 600
    warm = scan_corpus(root, index_dir=index)
    assert (warm.counts.entries_used, warm.counts.files_parsed, warm.counts.cases_built) == (
        3,
        0,
        0,
    )
    wanted = {c.id for c in warm.cases[::10]}
    corpus = load_chosen(root, wanted, index_dir=index)
    assert {c.id for c in corpus.cases} == wanted
    again = scan_corpus(root, index_dir=index)
    again.load(wanted)
    assert (again.counts.files_parsed, again.counts.cases_built) == (0, len(wanted))


def test_a_changed_case_file_is_read_again(tmp_path: Path) -> None:
    root = _generated(tmp_path / "gen")
    index = tmp_path / "index"
    scan_corpus(root, index_dir=index)
    path = root / "cases" / "gen-1.yaml"
    path.write_text(path.read_text().replace("Where is 1?", "Where is one?"))
    facts = scan_corpus(root, index_dir=index)
    assert (facts.counts.entries_used, facts.counts.files_parsed) == (2, 1)
    assert facts.hash == load_corpus(root).hash
    assert facts.counts.entries_refused == 1  # the old entry: of other bytes


def test_a_changed_schema_file_is_hashed_again_and_a_missing_one_refused(
    tmp_path: Path,
) -> None:
    root = _generated(tmp_path / "gen")
    index = tmp_path / "index"
    before = scan_corpus(root, index_dir=index)
    (root / "schemas" / "reply.json").write_text('{"type": "object", "required": ["a"]}')
    after = scan_corpus(root, index_dir=index)
    assert after.counts.files_parsed == 0  # the cases did not change: their entries stand
    assert after.file_hashes == load_corpus(root).file_hashes != before.file_hashes
    built = after.load({"gen-0001"}).cases[0]
    schema = {"schemas/reply.json": after.file_hashes["schemas/reply.json"]}
    assert built.scorers[0].file_hashes == schema
    (root / "rubrics" / "tone.md").unlink()
    with pytest.raises(CorpusError) as full:
        load_corpus(root)
    with pytest.raises(CorpusError) as through_index:
        scan_corpus(root, index_dir=index)
    assert str(through_index.value) == str(full.value)
    assert "rubrics/tone.md" in str(full.value) and "gen-0000" in str(full.value)


def _entries(index: Path) -> list[Path]:
    return sorted(index.glob("*.json"))


def test_a_corrupted_entry_is_made_again_not_read(tmp_path: Path) -> None:
    root = _generated(tmp_path / "gen")
    index = tmp_path / "index"
    scan_corpus(root, index_dir=index)
    first, second, third = _entries(index)
    first.write_bytes(first.read_bytes()[:-40])  # truncated
    data = bytearray(second.read_bytes())
    data[-100] ^= 1  # one bit
    second.write_bytes(bytes(data))
    third.write_text('{"not": "an entry"}')
    facts = scan_corpus(root, index_dir=index)
    assert (facts.counts.entries_refused, facts.counts.files_parsed) == (3, 3)
    assert facts.hash == load_corpus(root).hash
    assert scan_corpus(root, index_dir=index).counts.entries_used == 3  # made again


def _resign(entry: Path, edit: dict[str, object]) -> None:
    """An entry edited and signed again: intact, but saying what its file does not."""
    body = json.loads(entry.read_bytes().partition(b"\n")[2])
    columns = body["cases"]
    for key, value in edit.items():
        columns[key][0] = value
    text = json.dumps(body).encode()
    entry.write_bytes(hashlib.sha256(text).hexdigest().encode() + b"\n" + text)


def test_an_entry_that_lies_is_caught_when_its_case_is_built(tmp_path: Path) -> None:
    """An intact entry with a wrong case hash changes the corpus hash the scan reads, but the
    case is checked when built: the entry is made again and the load reads the truth."""
    root = _generated(tmp_path / "gen")
    index = tmp_path / "index"
    truth = load_corpus(root)
    scan_corpus(root, index_dir=index)
    entry = CaseIndex(index, "").entry_path("cases/gen-0.yaml")
    _resign(entry, {"hash": "0" * 64})
    lied = scan_corpus(root, index_dir=index)
    assert lied.counts.entries_used == 3 and lied.hash != truth.hash
    corpus = load_chosen(root, {"gen-0000", "gen-0003"}, index_dir=index)
    assert [c.hash for c in corpus.cases] == [
        c.hash for c in truth.cases if c.id in {"gen-0000", "gen-0003"}
    ]
    assert scan_corpus(root, index_dir=index).hash == truth.hash


def test_the_loads_checks_give_the_full_loads_messages(tmp_path: Path) -> None:
    root = _generated(tmp_path / "gen")
    index = tmp_path / "index"
    scan_corpus(root, index_dir=index)  # warm: the checks run on the facts
    template = "{{message}} and {{order}}"
    with pytest.raises(CorpusError) as full:
        load_corpus(root, user_template=template)
    with pytest.raises(CorpusError) as facts:
        scan_corpus(root, user_template=template, index_dir=index)
    assert str(facts.value) == str(full.value) and "input.vars lacks ['order']" in str(full.value)
    (root / "cases" / "twin.yaml").write_text(
        "- id: gen-0004\n  input: {messages: [{role: user, content: hi}]}\n  expect: [json_valid]\n"
    )
    with pytest.raises(CorpusError) as full:
        load_corpus(root)
    with pytest.raises(CorpusError) as facts:
        scan_corpus(root, index_dir=index)
    assert str(facts.value) == str(full.value) and "duplicate id" in str(full.value)


def test_selection_and_manifest_from_facts_are_those_of_the_cases(demo: Path) -> None:
    suite = load_suite(demo / "evalkit.yaml")
    full = load_corpus(demo, defer_scorers=True)
    facts = scan_corpus(demo, index_dir=demo.parent / "index")
    for selection in (
        Selection(),
        Selection("smoke", ("smoke",), (), ("judge",)),
        Selection(None, (), ("billing",), ("python_tests", "deterministic")),
    ):
        chosen: Corpus = selection.apply(full)
        chosen_facts = selection.apply(facts)
        assert [c.id for c in chosen_facts.cases] == [c.id for c in chosen.cases]
        assert [sorted(s.name for s in c.scorers) for c in chosen_facts.cases] == [
            sorted(s.name for s in c.scorers) for c in chosen.cases
        ]
        mine = build_manifest(suite, chosen_facts, run_id="r", label="l", selection={})
        theirs = build_manifest(suite, chosen, run_id="r", label="l", selection={})
        for key in ("config_hash", "corpus", "scorer_files", "judge", "sandbox"):
            assert mine.recorded(key) == theirs.recorded(key), key
        built = chosen_facts.load()
        assert [[s.name for s in c.scorers] for c in built.cases] == [
            [s.name for s in c.scorers] for c in chosen.cases
        ]


def test_an_index_entry_is_of_one_reader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A changed loader setting (here the size limit) makes every entry foreign: read again."""
    from evalkit.corpus import cases

    root = _generated(tmp_path / "gen")
    index = tmp_path / "index"
    scan_corpus(root, index_dir=index)
    monkeypatch.setattr(cases, "MAX_CASE_FILE_BYTES", cases.MAX_CASE_FILE_BYTES - 1)
    facts = scan_corpus(root, index_dir=index)
    assert (facts.counts.entries_refused, facts.counts.files_parsed) == (3, 3)


def test_the_index_directory_ignores_itself_for_git(demo: Path) -> None:
    scan_corpus(demo)
    ignore = demo / ".evalkit" / "case-index" / ".gitignore"
    assert ignore.read_text().splitlines()[-1] == "*"


def _entry_bytes(index: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(index.iterdir())}


@pytest.fixture
def as_one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scan forks workers only from a process of one thread (``case_facts._processes``);
    ``evalkit cases index`` is one, but a pytest worker may hold threads an earlier test in
    it left (a server's reader, a pool): the parallel tests must not depend on which ran
    before them (one loaded ``.ci/run`` had one alive and these read 0 workers)."""
    import threading

    monkeypatch.setattr(threading, "active_count", lambda: 1)


def test_a_parallel_cold_index_is_the_serial_one_byte_for_byte(
    tmp_path: Path, as_one_thread: None
) -> None:
    """Worker processes load the files: the same entries (names and bytes), the same facts,
    and the cases built from them are a full load's (a worker's cases are built again here
    from the entry's spans)."""
    root = _generated(tmp_path / "gen")
    (root / "sealed").mkdir()
    shutil.copy(root / "cases" / "gen-2.yaml", root / "sealed" / "gen-2.yaml")
    (root / "sealed" / "gen-2.yaml").write_text(
        (root / "cases" / "gen-2.yaml").read_text().replace("id: gen-", "id: sealed-")
    )
    serial = scan_corpus(root, sealed=True, index_dir=tmp_path / "serial", workers=1)
    apart = scan_corpus(root, sealed=True, index_dir=tmp_path / "apart", workers=2)
    assert (serial.counts.files_in_workers, apart.counts.files_in_workers) == (0, 3)  # folders
    assert (apart.counts.files_parsed, apart.counts.entries_written) == (4, 4)
    assert _entry_bytes(tmp_path / "apart") == _entry_bytes(tmp_path / "serial")
    assert apart.cases == serial.cases and apart.file_hashes == serial.file_hashes
    assert [s.file_hashes for c in apart.cases for s in c.scorers] == [
        s.file_hashes for c in serial.cases for s in c.scorers
    ]
    full = {c.id: c for c in load_corpus(root, sealed=True, defer_scorers=True).cases}
    wanted = {c.id for c in serial.cases[::7]}
    for case in apart.load(wanted).cases:
        _same_case(case, full[case.id])
    warm = scan_corpus(root, sealed=True, index_dir=tmp_path / "apart", workers=2)
    assert (warm.counts.entries_used, warm.counts.files_parsed) == (4, 0)


def test_a_parallel_scan_raises_the_serial_scans_first_problem(
    tmp_path: Path, as_one_thread: None
) -> None:
    """Two bad files: the first in file order is reported, as a serial scan reports it, and
    the good files' entries are whole (no temporary file left)."""
    root = _generated(tmp_path / "gen")
    for name, bad in (("gen-1.yaml", "gen-0004"), ("gen-2.yaml", "gen-0005")):
        path = root / "cases" / name
        path.write_text(path.read_text().replace(f"id: {bad}\n", f"id: {bad}\n  tagz: [x]\n"))
    with pytest.raises(CorpusError) as serial:
        scan_corpus(root, index_dir=tmp_path / "serial", workers=1)
    with pytest.raises(CorpusError) as apart:
        scan_corpus(root, index_dir=tmp_path / "apart", workers=3)
    assert str(apart.value) == str(serial.value)
    assert "cases/gen-1.yaml:" in str(apart.value) and "gen-0004" in str(apart.value)
    names = [p.name for p in (tmp_path / "apart").iterdir()]
    assert not [n for n in names if n.endswith(".tmp")] and len(names) == 2  # gen-0, .gitignore


def test_no_workers_for_one_file_a_small_corpus_or_one_core(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import threading

    from evalkit.corpus import case_facts

    many = [case_facts.PARALLEL_MIN_BYTES] * 3
    monkeypatch.setattr(threading, "active_count", lambda: 2)
    assert case_facts._processes(2, many) == 1  # another thread: a fork could copy its locks
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    assert case_facts._processes(None, many[:1]) == 1  # one file: nothing to share
    assert case_facts._processes(None, [10, 10, 10]) == 1  # small: start-up would cost more
    assert case_facts._processes(1, many) == 1
    assert case_facts._processes(2, many) == 2
    assert case_facts._processes(8, many) == 3  # never more processes than files


def test_cases_index_builds_refreshes_and_prunes(
    demo: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``evalkit cases index``: one line (files, cases, entries reused / written / removed),
    sealed files included, and a second run reuses every entry; a file gone loses its entry;
    a bad case exits 1 with its one-line error and leaves only whole entries."""
    from evalkit.cli import main

    monkeypatch.delenv("EVALKIT_CASE_INDEX", raising=False)
    config = str(demo / "evalkit.yaml")
    index = demo / ".evalkit" / "case-index"
    n_files = len(list((demo / "cases").glob("*.yaml")) + list((demo / "sealed").glob("*.yaml")))
    n_cases = len(load_corpus(demo, sealed=True).cases)
    assert main(["cases", "index", "--config", config]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"case index: {n_files} files, {n_cases} cases: 0 entries reused, "
                           f"{n_files} written, 0 removed, in ")  # fmt: skip
    assert str(index) in line and len(list(index.glob("*.json"))) == n_files
    assert main(["cases", "index", "--config", config, "--workers", "2"]) == 0
    assert f": {n_files} entries reused, 0 written, 0 removed" in capsys.readouterr().out
    assert main(["cases", "index", "--config", config, "--workers", "0"]) == 2
    assert "--workers 0: one process at least" in capsys.readouterr().err
    shard = scan_corpus(demo)  # what `run --shard` reads (no sealed files): warm
    in_cases = len(list((demo / "cases").glob("*.yaml")))
    assert (shard.counts.entries_used, shard.counts.files_parsed) == (in_cases, 0)
    (demo / "cases" / "orders.yaml").unlink()
    assert main(["cases", "index", "--config", config]) == 0
    assert f"{n_files - 1} entries reused, 0 written, 1 removed" in capsys.readouterr().out
    assert len(list(index.glob("*.json"))) == n_files - 1
    billing = demo / "cases" / "billing.yaml"
    text = billing.read_text()
    first = text.index("- id: ") + len("- id: ")
    case_id = text[first : text.index("\n", first)].strip()
    billing.write_text(text.replace(f"- id: {case_id}\n", f"- id: {case_id}\n  tagz: [x]\n", 1))
    assert main(["cases", "index", "--config", config]) == 2  # an input error, as in lint
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("evalkit: error: cases/billing.yaml:")
    assert case_id in err and "tagz" in err
    assert not [p for p in index.iterdir() if p.name.endswith(".tmp")]


def test_an_entry_that_cannot_be_renamed_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Written to a temporary file, then renamed: a failed rename (a full disk, a read-only
    directory) removes the temporary file, writes no entry and fails no load."""
    from evalkit.corpus import case_index

    root = _generated(tmp_path / "gen")
    index = tmp_path / "index"

    def refused(*_: object) -> None:
        raise OSError("no space left on device")

    monkeypatch.setattr(case_index.os, "replace", refused)
    facts = scan_corpus(root, index_dir=index)
    assert (facts.counts.files_parsed, facts.counts.entries_written) == (3, 0)
    assert sorted(p.name for p in index.iterdir()) == [".gitignore"]


def _ast_closure(start: str) -> set[str]:
    """The evalkit modules ``start`` imports, transitively, as :mod:`ast` reads the imports
    (the architecture test's reading): the reference the index's text scan must agree with."""
    import ast

    package = REPO / "evalkit"

    def source(name: str) -> Path | None:
        base = package.joinpath(*name.split(".")[1:])
        return next(
            (p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None
        )

    seen: set[str] = set()
    pending = [start]
    while pending:
        name = pending.pop()
        path = source(name)
        if name in seen or path is None or name == "evalkit" or name.startswith("evalkit.scorers"):
            continue
        seen.add(name)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                pending += [a.name for a in node.names if a.name.startswith("evalkit")]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("evalkit"):
                base = node.module or ""
                pending += [
                    f"{base}.{a.name}" if source(f"{base}.{a.name}") else base for a in node.names
                ]
    return {str(source(name)) for name in seen}


def test_the_reader_fingerprint_covers_every_module_the_loader_imports() -> None:
    """The loader's modules are found from its imports, not listed by hand: splitting a
    module (or importing a new one) cannot leave its source out of the fingerprint."""
    from evalkit.corpus.case_index import loader_modules

    found = {str(p) for p in loader_modules("evalkit.corpus.case_facts")}
    assert found == _ast_closure("evalkit.corpus.case_facts")
    assert {"cases.py", "yaml_input.py", "records.py"} <= {Path(p).name for p in found}


def test_an_edited_loader_module_makes_every_entry_foreign(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The source of each module the loader imports is part of the reader fingerprint."""
    from evalkit.corpus import case_facts, case_index

    root = _generated(tmp_path / "gen")
    index = tmp_path / "index"
    scan_corpus(root, index_dir=index)
    modules = case_index.loader_modules("evalkit.corpus.case_facts")
    edited = tmp_path / "case_spec.py"
    edited.write_text(next(p for p in modules if p.name == "case_spec.py").read_text() + "\n#\n")
    changed = tuple(edited if p.name == "case_spec.py" else p for p in modules)
    monkeypatch.setattr(case_facts, "loader_modules", lambda start: changed)
    facts = scan_corpus(root, index_dir=index)
    assert (facts.counts.entries_refused, facts.counts.files_parsed) == (3, 3)

"""The corpus summary (``evalkit.corpus.case_summary``): a shard reads every case's facts as
columns from one file made once per corpus version, and makes facts only for what it builds.
Counters, never timers."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_case_index import _generated, _same_case

from evalkit.corpus import case_summary
from evalkit.corpus.case_facts import scan_corpus
from evalkit.corpus.case_summary import read_run_facts, summary_path
from evalkit.corpus.cases import load_corpus
from evalkit.corpus.fact_rows import FactRows
from evalkit.corpus.index_refresh import refresh_index
from evalkit.corpus.selection import Selection
from evalkit.corpus.share_builder import ShareBuilder
from evalkit.errors import CorpusError
from evalkit.run.shards import Shard, order_units, shard_units


def _facts_of(rows: object) -> list[tuple[object, ...]]:
    return [
        (c.id, c.hash, c.tags, c.criticality, c.review, c.source, c.sealed, c.var_names,
         [(s.name, s.files, s.file_hashes) for s in c.scorers], c.span)
        for c in rows  # type: ignore[attr-defined]
    ]  # fmt: skip


@pytest.mark.parametrize("sealed", [False, True])
def test_the_summary_reads_as_the_index_does(tmp_path: Path, sealed: bool) -> None:
    """Cold (made) then warm (read): the same facts, hash, file hashes and warnings as the
    per-file entries give, and the corpus hash a full load's."""
    root = _generated(tmp_path / "gen")
    (root / "sealed").mkdir()
    (root / "sealed" / "held.yaml").write_text(
        "- id: held-1\n  input: {messages: [{role: user, content: hi}]}\n  expect: [json_valid]\n"
    )
    (root / "cases" / "empty.yaml").write_text("# nothing yet\n")
    index = tmp_path / "index"
    entries = scan_corpus(root, sealed=sealed, index_dir=tmp_path / "other", index_only=True)
    full = load_corpus(root, sealed=sealed)
    for made in (1, 0):
        facts = read_run_facts(root, sealed=sealed, index_dir=index)
        assert isinstance(facts.cases, FactRows)
        assert facts.counts.summary_written == made
        assert facts.counts.summary_used == 1 - made
        assert facts.hash == full.hash == entries.hash
        assert facts.file_hashes == entries.file_hashes
        assert facts.warnings == entries.warnings
        assert _facts_of(facts.cases) == _facts_of(entries.cases)
    assert summary_path(index, ("cases",)).exists()


def test_a_warm_shard_makes_only_its_shares_facts(tmp_path: Path) -> None:
    """After ``cases index`` (which writes the summary), a shard's read uses no per-file
    entry, makes the facts of its share alone (as it builds them), and builds them as a
    full load does; selection, tag counts and drafts come from the columns."""
    root = _generated(tmp_path / "gen", n=900)
    index = tmp_path / "index"
    done = refresh_index(root, index_dir=index)
    assert done.counts.summary_written == 1
    facts = read_run_facts(root, index_dir=index)
    assert (facts.counts.summary_used, facts.counts.entries_used) == (1, 0)
    chosen = Selection(tags=("smoke",), skip_scorers=("judge",)).apply(facts)
    expected = Selection(tags=("smoke",), skip_scorers=("judge",)).apply(
        scan_corpus(root, index_dir=index)
    )
    assert chosen.hash == expected.hash
    assert [c.id for c in chosen.cases] == [c.id for c in expected.cases]
    assert facts.counts.facts_made == len(chosen.cases)  # the check above made them: reset
    facts.counts.facts_made = 0
    units = order_units((i for i in chosen.cases.ids()), 1)  # type: ignore[attr-defined]
    share = [u.case_id for u in shard_units(units, Shard(2, 4))]
    builder = ShareBuilder(chosen, set(share))
    built = [case for at in range(0, len(share), 40) for case in builder.build(share[at : at + 40])]
    assert facts.counts.facts_made == len(share) < len(facts.cases) // 4
    assert facts.counts.files_parsed == 0
    whole = {c.id: c for c in Selection(tags=("smoke",), skip_scorers=("judge",)).apply(
        load_corpus(root, defer_scorers=True)).cases}  # fmt: skip
    for case in built:
        _same_case(case, whole[case.id])


def test_a_changed_file_makes_the_summary_stale(tmp_path: Path) -> None:
    root = _generated(tmp_path / "gen")
    index = tmp_path / "index"
    read_run_facts(root, index_dir=index)
    path = root / "cases" / "gen-1.yaml"
    path.write_text(path.read_text().replace("order 10'", "order ten'"))
    facts = read_run_facts(root, index_dir=index)
    assert (facts.counts.summary_refused, facts.counts.summary_written) == (1, 1)
    assert facts.counts.entries_written == 1  # that file's entry alone made again
    assert facts.hash == load_corpus(root).hash
    (root / "cases" / "gen-2.yaml").unlink()  # a file gone: stale too
    facts = read_run_facts(root, index_dir=index)
    assert facts.counts.summary_written == 1
    assert facts.hash == load_corpus(root).hash


@pytest.mark.parametrize("damage", ["truncated", "flipped", "foreign"])
def test_a_corrupt_or_foreign_summary_is_refused_and_made_again(
    tmp_path: Path, damage: str
) -> None:
    root = _generated(tmp_path / "gen")
    index = tmp_path / "index"
    read_run_facts(root, index_dir=index)
    path = summary_path(index, ("cases",))
    data = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "flipped":
        path.write_bytes(data[:-10] + bytes([data[-10] ^ 1]) + data[-9:])
    else:  # another corpus's summary, intact, put in its place
        other = _generated(tmp_path / "other", n=30)
        read_run_facts(other, index_dir=tmp_path / "index-2")
        path.write_bytes(summary_path(tmp_path / "index-2", ("cases",)).read_bytes())
    facts = read_run_facts(root, index_dir=index)
    assert (facts.counts.summary_refused, facts.counts.summary_written) == (1, 1)
    assert facts.hash == load_corpus(root).hash
    assert len(facts.cases) == 600


def test_duplicate_ids_are_refused_with_the_file_line_and_id(tmp_path: Path) -> None:
    root = _generated(tmp_path / "gen")
    with open(root / "cases" / "gen-2.yaml", "a") as file:
        file.write("- id: gen-0003\n  input: {messages: [{role: user, content: hi}]}\n"
                   "  expect: [json_valid]\n")  # fmt: skip
    with pytest.raises(CorpusError) as caught:
        read_run_facts(root, index_dir=tmp_path / "index")
    with pytest.raises(CorpusError) as full:
        load_corpus(root)
    assert str(caught.value) == str(full.value)
    assert "duplicate id (first defined at cases/gen-0.yaml:" in str(caught.value)
    assert not summary_path(tmp_path / "index", ("cases",)).exists()


def test_the_user_templates_vars_are_checked_on_the_columns(tmp_path: Path) -> None:
    root = _generated(tmp_path / "gen")
    index = tmp_path / "index"
    read_run_facts(root, index_dir=index)  # made without a template
    with pytest.raises(CorpusError) as caught:
        read_run_facts(root, index_dir=index, user_template="{{message}} {{missing}}")
    with pytest.raises(CorpusError) as full:
        load_corpus(root, user_template="{{message}} {{missing}}")
    assert str(caught.value) == str(full.value)


#: One shard's read in a process of its own, started with the others (``go`` file).
_SHARD = """
import json, sys, time
from pathlib import Path
from evalkit.corpus.case_summary import read_run_facts
root, index, go = sys.argv[1:]
while not Path(go).exists():
    time.sleep(0.002)
facts = read_run_facts(root, index_dir=index)
c = facts.counts
print(json.dumps({"hash": facts.hash, "written": c.summary_written, "used": c.summary_used,
                  "entries_written": c.entries_written}))
"""


def test_shards_started_together_make_the_summary_once(tmp_path: Path) -> None:
    root = _generated(tmp_path / "gen", n=1500)
    index, go = tmp_path / "index", tmp_path / "go"
    command = [sys.executable, "-c", _SHARD, str(root), str(index), str(go)]
    shards = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for _ in range(3)]
    time.sleep(0.5)
    go.touch()
    found = [json.loads(shard.communicate(timeout=300)[0]) for shard in shards]
    assert all(shard.returncode == 0 for shard in shards)
    assert sum(f["written"] for f in found) == 1
    assert sum(f["used"] for f in found) == 2  # the others read what the first one made
    assert sum(f["entries_written"] for f in found) == 3  # each file's entry once
    assert {f["hash"] for f in found} == {load_corpus(root).hash}


def test_refreshing_the_index_keeps_a_current_summary_and_remakes_a_bad_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _generated(tmp_path / "gen")
    index = tmp_path / "index"
    assert refresh_index(root, index_dir=index).counts.summary_written == 1
    decoded: list[int] = []
    decode = case_summary._decode
    monkeypatch.setattr(case_summary, "_decode", lambda *a: decoded.append(1) or decode(*a))
    again = refresh_index(root, index_dir=index).counts
    assert (again.summary_used, again.summary_written, decoded) == (1, 0, [])  # checked only
    path = summary_path(index, ("cases",))
    data = path.read_bytes()
    path.write_bytes(data[:-5] + bytes([data[-5] ^ 1]) + data[-4:])
    bad = refresh_index(root, index_dir=index).counts
    assert (bad.summary_used, bad.summary_refused, bad.summary_written) == (0, 1, 1)
    assert read_run_facts(root, index_dir=index).hash == load_corpus(root).hash

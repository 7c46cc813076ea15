"""A shard with no prepared case index builds only its share (``scan_corpus(index_only=True)``):
it makes the entries it lacks without keeping their cases, builds only the cases it is asked
for, and shards started together on one index directory make each entry once between them
(a claim per case file). Counters, never timers."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_case_index import _generated, _same_case

from evalkit.corpus import case_index
from evalkit.corpus.case_facts import CorpusFacts, scan_corpus
from evalkit.corpus.case_index import CaseIndex
from evalkit.corpus.cases import load_corpus
from evalkit.corpus.index_refresh import refresh_index
from evalkit.run.shards import Shard, order_units, shard_units

#: One cold shard in a process of its own: it waits for the ``go`` file (so all start
#: together), reads the corpus through the shared index, builds its share and prints counts.
_SHARD = """
import json, sys, time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from evalkit.corpus.case_facts import scan_corpus
from evalkit.run.shards import Shard, order_units, shard_units
root, index, go, k, n = sys.argv[1:]
while not Path(go).exists():
    time.sleep(0.002)
facts = scan_corpus(root, index_dir=index, index_only=True)
units = order_units((c.id for c in facts.cases), 1)
share = {u.case_id for u in shard_units(units, Shard(int(k), int(n)))}
built = facts.load(share).cases
c = facts.counts
print(json.dumps({
    "hash": facts.hash, "share": sorted(share), "built": {x.id: x.hash for x in built},
    "cases_built": c.cases_built, "cases_indexed": c.cases_indexed,
    "files_parsed": c.files_parsed, "entries_used": c.entries_used,
    "entries_written": c.entries_written,
}))
"""


def _shares(facts: CorpusFacts, count: int) -> list[set[str]]:
    units = order_units((c.id for c in facts.cases), 1)
    return [{u.case_id for u in shard_units(units, Shard(k, count))} for k in range(1, count + 1)]


def test_a_cold_shard_builds_only_its_share(tmp_path: Path) -> None:
    """Each of 4 shards on a fresh index of its own (4 CI machines, nothing cached): every
    case read once to make the entries, none kept; the share alone built, each case as a
    full load builds it; together the 4 shares are the unsharded run's cases, selected alike."""
    root = _generated(tmp_path / "gen")
    full = load_corpus(root, defer_scorers=True)
    by_id = {c.id: c for c in full.cases}
    union: dict[str, str] = {}
    for k in range(4):
        facts = scan_corpus(root, index_dir=tmp_path / f"index-{k}", index_only=True)
        counts = facts.counts
        assert (counts.files_parsed, counts.entries_written) == (3, 3)
        assert (counts.cases_indexed, counts.cases_built) == (600, 0)
        assert facts.builder is not None and facts.builder.whole == {}  # nothing held
        assert facts.hash == full.hash and facts.file_hashes == full.file_hashes
        smoke = facts.select(tags=["smoke"])  # a selection reads the facts as the full load
        assert [c.id for c in smoke.cases] == [c.id for c in full.select(tags=["smoke"]).cases]
        share = _shares(facts, 4)[k]
        built = facts.load(share).cases
        assert counts.cases_built == len(share) == len(built) < 600 / 3
        for case in built:
            _same_case(case, by_id[case.id])
            union[case.id] = case.hash
    assert union == {c.id: c.hash for c in full.cases}


def test_cold_shards_started_together_make_the_index_once(tmp_path: Path) -> None:
    """4 cold shards in 4 processes, started at once on one index directory: each case file
    is read to make its entry by exactly one of them (the others read that entry), each
    builds only its share, and the shares' cases together are the unsharded run's."""
    root = _generated(tmp_path / "gen", n=1200)
    for f in range(3):  # 12 files: enough for the shards to overlap and share the work
        path = root / "cases" / f"gen-{f}.yaml"
        items = ["- id: " + item for item in path.read_text().split("\n- id: ")[1:]]
        for part in range(4):
            (root / "cases" / f"gen-{f}-{part}.yaml").write_text("\n".join(items[part::4]) + "\n")
        path.unlink()
    full = load_corpus(root, defer_scorers=True)
    assert len(full.cases) == 1200
    index, go = tmp_path / "shared-index", tmp_path / "go"
    shards = [
        subprocess.Popen(
            [sys.executable, "-c", _SHARD, str(root), str(index), str(go), str(k), "4"],
            stdout=subprocess.PIPE,
            text=True,
        )
        for k in range(1, 5)
    ]
    go.touch()
    results = []
    for shard in shards:
        out, _ = shard.communicate(timeout=300)
        assert shard.returncode == 0
        results.append(json.loads(out))
    assert sum(r["files_parsed"] for r in results) == 12  # each file read once in all
    assert sum(r["entries_written"] for r in results) == 12
    assert sum(r["cases_indexed"] for r in results) == 1200
    for r in results:
        assert r["files_parsed"] + r["entries_used"] == 12  # made here, or read as made there
        assert r["hash"] == full.hash
        assert r["cases_built"] == len(r["share"]) == len(r["built"]) == 300
    union = {case_id: h for r in results for case_id, h in r["built"].items()}
    assert union == {c.id: c.hash for c in full.cases}


def test_a_scan_waits_for_a_held_claim_and_reads_the_entry_made_there(tmp_path: Path) -> None:
    """A file another process is indexing (its claim held) is left for last, then read from
    the entry that process wrote: not read again here."""
    root = _generated(tmp_path / "gen")
    index = tmp_path / "index"
    held = CaseIndex(index, "")
    found: list[CorpusFacts] = []
    with held.claim("cases/gen-1.yaml", wait=False) as taken:
        assert taken
        scan = threading.Thread(
            target=lambda: found.append(scan_corpus(root, index_dir=index, index_only=True))
        )
        scan.start()
        others = [held.entry_path(f"cases/gen-{f}.yaml") for f in (0, 2)]
        deadline = time.monotonic() + 120
        while not all(p.exists() for p in others) and time.monotonic() < deadline:
            time.sleep(0.01)
        scan_corpus(root, index_dir=tmp_path / "elsewhere")  # the holder's work...
        entry = CaseIndex(tmp_path / "elsewhere", "").entry_path("cases/gen-1.yaml")
        held.entry_path("cases/gen-1.yaml").write_bytes(entry.read_bytes())  # ...written here
    scan.join(timeout=120)
    counts = found[0].counts
    assert (counts.files_parsed, counts.entries_used, counts.claims_waited) == (2, 1, 1)
    assert found[0].hash == load_corpus(root).hash


def test_a_claim_held_too_long_is_done_without(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim whose holder never lets go (a stopped process) delays the scan by
    ``CLAIM_WAIT_S`` at most: then it makes the entry itself, the same entry."""
    monkeypatch.setattr(case_index, "CLAIM_WAIT_S", 0.05)
    root = _generated(tmp_path / "gen")
    index = tmp_path / "index"
    with CaseIndex(index, "").claim("cases/gen-2.yaml", wait=False):
        facts = scan_corpus(root, index_dir=index, index_only=True)
    counts = facts.counts
    assert (counts.files_parsed, counts.entries_written, counts.claims_waited) == (3, 3, 1)
    warm = scan_corpus(root, index_dir=index, index_only=True)
    assert (warm.counts.entries_used, warm.counts.files_parsed) == (3, 0)
    assert warm.hash == facts.hash == load_corpus(root).hash


def test_the_claims_of_files_gone_are_pruned(tmp_path: Path) -> None:
    root = _generated(tmp_path / "gen")
    index = tmp_path / "index"
    scan_corpus(root, index_dir=index, index_only=True)
    assert len(list(index.glob("*.lock"))) == len(list(index.glob("*.json"))) == 3
    (root / "cases" / "gen-0.yaml").unlink()
    done = refresh_index(root, index_dir=index)
    assert done.removed == 1
    entries = [p for p in index.glob("*.lock") if not p.name.startswith("corpus-")]  # not the
    assert len(entries) == len(list(index.glob("*.json"))) == 2  # summary's claim: it stays


@pytest.mark.parametrize("keep", [False, True])
def test_refreshing_the_index_holds_one_files_facts_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keep: bool
) -> None:
    """``evalkit cases index`` (a cold index, then a warm one) counts every case but lets each
    file's facts go once checked; a scan that keeps them (a shard's) holds every file's. A warm
    refresh still decodes every entry before its checks (they run in file order)."""
    import weakref

    from evalkit.corpus import case_facts

    root = tmp_path / "eight"
    (root / "cases").mkdir(parents=True)
    item = "- id: c{}-{}\n  input: {{messages: [{{role: user, content: hi}}]}}\n"
    item += "  expect: [json_valid]\n"
    for f in range(8):
        text = "".join(item.format(f, i) for i in range(5))
        (root / "cases" / f"f{f}.yaml").write_text(text)
    alive: list[int] = []
    scan_files = case_facts._FactsBuilder.scan_files

    def watched(self: case_facts._FactsBuilder, *args: Any) -> Iterator[tuple[str, Any]]:
        held: list[weakref.ref[Any]] = []
        for rel, entry in scan_files(self, *args):
            held.append(weakref.ref(entry))
            alive.append(sum(ref() is not None for ref in held))
            yield rel, entry
            del entry

    monkeypatch.setattr(case_facts._FactsBuilder, "scan_files", watched)
    whole = load_corpus(root)
    for _ in ("cold", "warm"):
        if keep:
            assert len(scan_corpus(root, index_dir=tmp_path / "index").cases) == len(whole.cases)
        else:
            done = refresh_index(root, index_dir=tmp_path / "index", workers=1)
            assert (done.files, done.cases) == (8, len(whole.cases)) == (8, 40)
    # one file's facts checked while the next is read: two at most, or all eight when kept
    assert max(alive) == (8 if keep else 2), alive

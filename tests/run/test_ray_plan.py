"""The Ray driver plans from the case index and never holds every case: its chunks go out share
by share, each share's cases built when its first chunk does (and recorded as that share's
cases part, which the merge takes), let go after its last. Counters, not timers."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from evalkit.corpus.case_facts import scan_corpus
from evalkit.corpus.cases import load_corpus
from evalkit.run.engines import ray_plan
from evalkit.run.engines.ray_plan import ShareFeed, plan_shares, stored_share_count
from evalkit.run.shards import order_units
from evalkit.run_manifest import CorpusInfo, RunInfo, RunManifest
from evalkit.store.part_checks import corpus_problem
from evalkit.store.parts import PartsRoot
from evalkit.store.schema import corpus_digest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "corpus"))
from test_case_index import _generated


def _manifest(run_id: str, facts) -> RunManifest:
    return RunManifest(
        run=RunInfo(run_id=run_id), corpus=CorpusInfo(hash=facts.hash, n_cases=len(facts.cases))
    )


def _feed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, replays: int = 1, cold: bool = False):
    root = _generated(tmp_path / "corpus", n=300)
    index = tmp_path / "index"
    if not cold:
        scan_corpus(root, index_dir=index)  # a warm index: what the driver plans from
    facts = scan_corpus(root, index_dir=index, index_only=True)  # as `evalkit run` reads it
    assert facts.counts.cases_built == 0
    assert facts.counts.cases_indexed == (300 if cold else 0)  # cold: made, nothing kept
    monkeypatch.setattr(ray_plan, "SHARE_UNITS", 70 * replays)
    units = order_units((c.id for c in facts.cases), replays)
    manifest = _manifest("r1", facts)
    manifest, count = plan_shares(manifest, facts, units)
    parts = PartsRoot(str(tmp_path / "parts"))
    return root, facts, units, manifest, count, parts


@pytest.mark.parametrize(("replays", "cold"), [(1, False), (3, False), (1, True)])
def test_the_driver_builds_one_share_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, replays: int, cold: bool
) -> None:
    """With the index warm or with none prepared (the driver makes it, keeping no case)."""
    root, facts, units, manifest, count, parts = _feed(tmp_path, monkeypatch, replays, cold)
    assert count == 5 == stored_share_count(manifest)  # 300 cases, at most 70 a share
    feed = ShareFeed(corpus=facts, root=parts, manifest=manifest, units=units, count=count)
    feed.record()
    assert facts.counts.cases_built == feed.peak <= 70  # the manifest and the first share
    assert [p.chunk_id for p in parts.parts("r1", "cases")] == ["driver-1-of-5"]
    feed.plan(chunk_size=16, done=set())
    seen: dict[str, int] = {}
    sent = 0
    while feed:
        chunk, cases = feed.take()
        for unit in chunk.units:
            assert cases[unit.case_id].id == unit.case_id
            seen[unit.case_id] = seen.get(unit.case_id, 0) + 1
        sent += len(chunk.units)
        assert len(cases) <= 70 and facts.counts.cases_built <= 300
    assert sent == len(units) and set(seen) == {c.id for c in facts.cases}
    assert all(n == replays for n in seen.values())
    assert feed.peak <= 70 < len(facts.cases)  # never every case at once
    assert facts.counts.cases_built == feed.built == 300  # each case built once
    written = parts.parts("r1", "cases")
    assert sorted(p.chunk_id for p in written) == [f"driver-{k}-of-5" for k in range(1, 6)]
    frames = [parts.read_frame(p) for p in written]
    assert all(corpus_problem(frame, manifest.corpus) is None for frame in frames)  # each a share
    pairs = sorted(
        (row["case_id"], row["case_hash"]) for f in frames for row in f.iter_rows(named=True)
    )
    full = load_corpus(root)
    assert corpus_digest(sorted((c.id, c.hash) for c in full.cases)) == corpus_digest(pairs)


def test_a_resumed_run_builds_only_the_shares_with_work_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, facts, units, manifest, count, parts = _feed(tmp_path, monkeypatch)
    first = ShareFeed(corpus=facts, root=parts, manifest=manifest, units=units, count=count)
    first.record()
    first.plan(chunk_size=16, done=set())
    done = set()
    while first:  # the first three shares' chunks went out and finished
        chunk, _ = first.take()
        if first._share > 3:
            break
        done |= {unit.key for unit in chunk.units}
    before = facts.counts.cases_built
    again = ShareFeed(
        corpus=facts, root=parts, manifest=manifest, units=units, count=stored_share_count(manifest)
    )
    again.plan(chunk_size=16, done=done)
    while again:
        again.take()
    assert 0 < again.built <= 2 * 70  # shares 4 and 5 only (its 4th chunk was not done)
    assert facts.counts.cases_built - before == again.built
    assert len(parts.parts("r1", "cases")) == 5  # no share's cases part written twice


def test_one_share_records_every_case_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, facts, units, manifest, _, parts = _feed(tmp_path, monkeypatch)
    monkeypatch.setattr(ray_plan, "SHARE_UNITS", 10_000)
    manifest = _manifest("r2", facts)
    planned, count = plan_shares(manifest, facts, units)
    assert count == 1 and planned.corpus.shares is None
    feed = ShareFeed(corpus=facts, root=parts, manifest=manifest, units=units, count=1)
    feed.record()
    feed.plan(chunk_size=64, done=set())
    while feed:
        feed.take()
    assert feed.built == 300  # built once, for the cases part and the chunks alike
    (part,) = parts.parts("r2", "cases")
    assert (
        part.chunk_id == "driver"
        and corpus_problem(parts.read_frame(part), manifest.corpus) is None
    )

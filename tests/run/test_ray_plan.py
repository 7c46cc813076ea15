"""The Ray driver plans from the case index and never holds every case: its chunks go out share
by share, each chunk's cases built when it goes out (and recorded first as a piece of its
share, which the merge takes), let go when it is done. Counters, not timers."""

from __future__ import annotations

import sys
from pathlib import Path

import polars as pl
import pytest

from evalkit.corpus.case_facts import scan_corpus
from evalkit.corpus.case_summary import read_run_facts
from evalkit.corpus.cases import load_corpus
from evalkit.corpus.fact_rows import FactRows
from evalkit.errors import StoreError
from evalkit.run.engines import ray_plan
from evalkit.run.engines.ray_plan import ShareFeed, plan_shares, stored_share_count
from evalkit.run.merging import merge_run
from evalkit.run.sharded import record_run, share_cases
from evalkit.run.shards import Shard, order_units, shard_units
from evalkit.run_manifest import CorpusInfo, RunInfo, RunManifest
from evalkit.store import open_store
from evalkit.store.case_pieces import piece_shard
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
    monkeypatch.setattr(ray_plan, "PIECE_UNITS", 32)  # two chunks of 16 a piece
    units = order_units((c.id for c in facts.cases), replays)
    manifest = _manifest("r1", facts)
    manifest, count = plan_shares(manifest, facts, units)
    parts = PartsRoot(str(tmp_path / "parts"))
    return root, facts, units, manifest, count, parts


@pytest.mark.parametrize(("replays", "cold"), [(1, False), (3, False), (1, True)])
def test_the_driver_builds_a_piece_of_its_share_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, replays: int, cold: bool
) -> None:
    """With the index warm or with none prepared (the driver makes it, keeping no case)."""
    root, facts, units, manifest, count, parts = _feed(tmp_path, monkeypatch, replays, cold)
    assert count == 5 == stored_share_count(manifest)  # 300 cases, at most 70 a share
    feed = ShareFeed(
        corpus=facts, root=parts, manifest=manifest, units=units, count=count, chunk_size=16
    )
    feed.record()
    first = facts.counts.cases_built
    assert 0 < first == feed.peak <= 32  # the manifest and the first piece: two chunks'
    (piece,) = parts.parts("r1", "cases")
    assert piece_shard(piece.chunk_id) == (1, 5) and piece.chunk_id.startswith("driver-1-of-5.")
    feed.plan(done=set())
    seen: dict[str, int] = {}
    sent = 0
    chunks: list = []
    while feed:
        before = facts.counts.cases_built
        chunk, cases = feed.take()
        chunk_cases = {unit.case_id for unit in chunk.units}
        assert set(cases) == chunk_cases  # the chunk's cases, no other case of its share
        assert facts.counts.cases_built - before <= 32  # at most its piece built for it
        recorded = {i for p in parts.parts("r1", "cases") for i in parts.read_frame(p)["case_id"]}
        assert chunk_cases <= recorded  # recorded before the chunk is handed out
        for unit in chunk.units:
            assert cases[unit.case_id].id == unit.case_id
            seen[unit.case_id] = seen.get(unit.case_id, 0) + 1
        sent += len(chunk.units)
        chunks.append(chunk.units)
        feed.release(chunk)
    assert sent == len(units) and set(seen) == {c.id for c in facts.cases}
    assert all(n == replays for n in seen.values())
    assert feed.peak <= 32 + 16 and feed.held == 0  # a piece and a chunk, never a share
    # each case built once; with replays, a case whose replays two pieces share, for each
    pieces = [[u for c in chunks[i : i + 2] for u in c] for i in range(0, len(chunks), 2)]
    split = sum(len({u.case_id for u in p}) for p in pieces) - 300
    assert facts.counts.cases_built == feed.built == 300 + split
    assert split == 0 if replays == 1 else split < len(pieces)
    written = parts.parts("r1", "cases")
    assert {piece_shard(p.chunk_id) for p in written} == {(k, 5) for k in range(1, 6)}
    frames = [parts.read_frame(p) for p in written]
    pairs = sorted(
        {(row["case_id"], row["case_hash"]) for f in frames for row in f.iter_rows(named=True)}
    )  # a case split between two chunks is in both their pieces
    full = load_corpus(root)
    assert corpus_digest(sorted((c.id, c.hash) for c in full.cases)) == corpus_digest(pairs)
    for k in range(1, 6):  # each share's pieces together are its recorded share
        mine = [f for p, f in zip(written, frames, strict=True) if piece_shard(p.chunk_id)[0] == k]
        assert corpus_problem(pl.concat(mine).unique(), manifest.corpus) is None


def test_the_driver_holds_a_piece_and_the_chunks_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chunks released as they finish (in any order, as Ray answers them): the cases held are
    the open piece's and the in-flight chunks', and the facts build no case before its piece
    is opened."""
    _, facts, units, manifest, count, parts = _feed(tmp_path, monkeypatch)
    feed = ShareFeed(
        corpus=facts, root=parts, manifest=manifest, units=units, count=count, chunk_size=16
    )
    feed.record()
    feed.plan(done=set())
    in_flight: list = []
    taken: set[str] = set()
    while feed or in_flight:
        while feed and len(in_flight) < 3:
            chunk, cases = feed.take()
            in_flight.append(chunk)
            taken |= set(cases)
            assert facts.counts.cases_built <= len(taken) + 32  # + the open piece's
            out = sum(len({u.case_id for u in c.units}) for c in in_flight)
            assert out <= feed.held <= out + 32
        feed.release(in_flight.pop(len(in_flight) // 2))
    assert 3 * 16 < feed.peak <= 32 + 3 * 16 and feed.held == 0
    assert feed.built == 300


def test_a_resumed_run_builds_only_the_chunks_with_work_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, facts, units, manifest, count, parts = _feed(tmp_path, monkeypatch)
    first = ShareFeed(
        corpus=facts, root=parts, manifest=manifest, units=units, count=count, chunk_size=16
    )
    first.record()
    first.plan(done=set())
    done = set()
    while first:  # the first three shares' chunks went out and finished, a 4th's was taken
        chunk, _ = first.take()
        if first._share > 3:
            break
        done |= {unit.key for unit in chunk.units}
        first.release(chunk)
    pieces = len(parts.parts("r1", "cases"))
    before = facts.counts.cases_built
    again = ShareFeed(
        corpus=facts, root=parts, manifest=manifest, units=units,
        count=stored_share_count(manifest), chunk_size=16,
    )  # fmt: skip
    again.plan(done=done)
    while again:
        chunk, _ = again.take()
        again.release(chunk)
    assert 0 < again.built <= 2 * 70  # shares 4 and 5 only (its 4th chunk was not done)
    assert facts.counts.cases_built - before == again.built
    written = parts.parts("r1", "cases")
    assert len({p.chunk_id for p in written}) == len(written)  # no piece written twice
    assert len(written) > pieces  # the 4th share's second piece on, written by the resume
    ids = [row for p in written for row in parts.read_frame(p)["case_id"].to_list()]
    assert sorted(ids) == sorted(c.id for c in facts.cases)  # every case in one piece


def test_a_run_recorded_in_whole_shares_resumes_without_pieces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run an earlier driver recorded a whole share at a time (``driver-K-of-N``) writes no
    piece of a share it has whole."""
    _, facts, units, manifest, count, parts = _feed(tmp_path, monkeypatch)
    record_run(parts, manifest, "driver", (), with_cases=False)
    share_1 = shard_units(units, Shard(1, count))
    parts.write_cases(
        "r1", f"driver-1-of-{count}", share_cases(facts, {u.case_id for u in share_1})
    )
    feed = ShareFeed(
        corpus=facts, root=parts, manifest=manifest, units=units, count=count, chunk_size=16
    )
    feed.plan(done=set())
    while feed:
        chunk, _ = feed.take()
        feed.release(chunk)
    names = [p.chunk_id for p in parts.parts("r1", "cases")]
    assert "driver-1-of-5" in names
    assert {piece_shard(n) for n in names} == {None, *((k, 5) for k in range(2, 6))}


def test_one_share_is_recorded_in_pieces_the_merge_checks_against_the_corpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run of one share records no shares in its manifest: its pieces together are its
    corpus (a case hash edited in one makes them another corpus: refused)."""
    _, facts, units, manifest, _, parts = _feed(tmp_path, monkeypatch)
    monkeypatch.setattr(ray_plan, "SHARE_UNITS", 10_000)
    manifest = _manifest("r2", facts)
    planned, count = plan_shares(manifest, facts, units)
    assert count == 1 and planned.corpus.shares is None
    feed = ShareFeed(
        corpus=facts, root=parts, manifest=manifest, units=units, count=1, chunk_size=64
    )
    feed.record()
    feed.plan(done=set())
    while feed:
        chunk, _ = feed.take()
        feed.release(chunk)
    assert feed.built == facts.counts.cases_built == 300  # each case built once
    assert feed.peak <= 64  # one chunk's cases, never the run's
    written = parts.parts("r2", "cases")
    assert len(written) == 5 and {piece_shard(p.chunk_id) for p in written} == {(1, 1)}
    with open_store(tmp_path / "a.duckdb", write=True) as store:
        merge_run(store, parts, "r2", in_progress=True)  # the pieces are the corpus
        assert store.records("SELECT count(*) AS n FROM cases")[0]["n"] == 300
    frame = pl.read_parquet(written[1].path)
    frame.with_columns(
        pl.when(pl.int_range(pl.len()) == 0).then(pl.lit("0" * 64)).otherwise("case_hash")
        .alias("case_hash")
    ).write_parquet(written[1].path)  # fmt: skip
    with open_store(tmp_path / "b.duckdb", write=True) as store, pytest.raises(StoreError) as bad:
        merge_run(store, parts, "r2", in_progress=True)
    assert "pieces hold 300 cases" in str(bad.value) and "not its share" in str(bad.value)


@pytest.mark.parametrize("replays", [1, 3])
def test_the_driver_holds_the_runs_order_as_rows_and_cuts_a_share_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, replays: int
) -> None:
    """The order from the columns is ``order_units``' own and records the same shares; the
    driver's units are made a share at a time (``made``, ``waiting_peak``), never the run's
    at once, and go out in the run's order."""
    root, _, units, manifest, count, parts = _feed(tmp_path, monkeypatch, replays)
    facts = read_run_facts(root, index_dir=tmp_path / "index")  # as `evalkit run` reads it
    assert isinstance(facts.cases, FactRows)
    plan = ray_plan.order_corpus_units(facts, replays)
    assert isinstance(plan, ray_plan.UnitPlan) and plan.made == 0  # planned, no unit made
    assert len(plan) == len(units) and plan[len(units) - 1] == units[-1] == plan[-1]
    assert list(plan) == units and plan[5:17] == units[5:17] and plan[3:9:2] == units[3:9:2]
    assert plan.shares(count) == manifest.corpus.shares  # what corpus_shares records
    made = plan.made
    assert plan_shares(manifest, facts, plan)[0] == manifest and plan.made == made  # columns
    feed = ShareFeed(
        corpus=facts, root=parts, manifest=manifest, units=plan, count=count, chunk_size=16
    )
    feed.record()
    plan.made = 0
    feed.plan(done=set())
    assert plan.made == 0 and feed.waiting_peak == 0  # nothing cut before it is taken
    sent = []
    while feed:
        chunk, _ = feed.take()
        sent.extend(chunk.units)
        feed.release(chunk)
    assert sent == units  # the run's order, each unit once
    share = 70 * replays
    assert 0 < feed.waiting_peak <= share  # one share's chunks waiting, never the run's
    assert plan.made <= 2 * len(units)  # each share's units made to cut it and to open it

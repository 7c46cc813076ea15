"""A shard through a warm case index builds and records its share a chunk at a time
(evalkit.run.sharded, evalkit.corpus.share_builder, evalkit.store.case_pieces): its first
request goes out once one chunk's cases are built, each share case is built once and each case
file read whole once however many chunks need it, a shard stopped part way resumes without
redoing its done chunks, and the merge takes its cases pieces only as its recorded share."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from aiohttp import web
from loopback_support import serving

from evalkit.corpus.case_facts import CorpusFacts, scan_corpus
from evalkit.corpus.case_index import IndexCounts
from evalkit.corpus.case_summary import read_run_facts
from evalkit.corpus.fact_rows import FactRows, FactTables, FileInfo
from evalkit.corpus.share_builder import ShareBuilder
from evalkit.corpus.suite import load_suite
from evalkit.errors import StoreError
from evalkit.run import sharded
from evalkit.run.engines.ray_plan import order_corpus_units
from evalkit.run.merging import merge_run
from evalkit.run.runner import RunOptions
from evalkit.run.shards import Shard
from evalkit.store import open_store
from evalkit.store.parts import PartsRoot

FILES, PER_FILE, CHUNK = 6, 20, 10  # 120 cases; a 1/2 share of 60 in 6 chunks of 10


class Endpoint:
    """A loopback chat endpoint that notes, at each request, how many cases the shard's facts
    had built by then (``facts`` set by the test before the shard starts)."""

    def __init__(self) -> None:
        self.facts: CorpusFacts | None = None
        self.built_at: list[int] = []

    def app(self) -> web.Application:
        async def chat(request: web.Request) -> web.Response:
            await request.read()
            assert self.facts is not None
            self.built_at.append(self.facts.counts.cases_built)
            reply = {"message": {"role": "assistant", "content": '{"ok": true}'},
                     "index": 0, "finish_reason": "stop"}  # fmt: skip
            usage = {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}
            body = {"id": "c", "object": "chat.completion", "choices": [reply], "usage": usage}
            return web.json_response(body)

        app = web.Application()
        app.router.add_post("/v1/chat/completions", chat)
        return app


@pytest.fixture
def endpoint() -> Iterator[tuple[Endpoint, str]]:
    mock = Endpoint()
    with serving(mock.app()) as base_url:
        yield mock, base_url


def _suite(root: Path, base_url: str, where: str = "où") -> Path:
    """FILES case files of PER_FILE one-turn cases (non-ASCII text in every item, so byte and
    character offsets differ, unless ``where`` is ASCII) and a suite pointed at ``base_url``."""
    (root / "cases").mkdir(parents=True)
    for f in range(FILES):
        items = "".join(
            f"- id: c-{f}-{i:02d}\n"
            "  input: {messages: [{role: user, content: "
            f"'{where} est ma commande {f}{i} ?'}}]}}\n"
            "  expect: [json_valid]\n"
            for i in range(PER_FILE)
        )
        (root / "cases" / f"part-{f}.yaml").write_text(items, encoding="utf-8")
    config = root / "evalkit.yaml"
    config.write_text(
        f"suite: chunks\nsystem: {{model: m, base_url: '{base_url}', transport: lean}}\n"
        "concurrency: 2\ncache: false\n",
        encoding="utf-8",
    )
    return config


def _warm(root: Path, index: Path, summary: bool = False) -> CorpusFacts:
    scan_corpus(root, index_dir=index, index_only=True)  # the index made (as `cases index`)
    if summary:  # the corpus summary made, then read (as a warm `--shard` reads it)
        read_run_facts(root, index_dir=index)
        facts = read_run_facts(root, index_dir=index)
        assert isinstance(facts.cases, FactRows) and facts.counts.summary_used == 1
    else:
        facts = scan_corpus(root, index_dir=index, index_only=True)
    assert facts.counts.files_parsed == 0 and facts.counts.cases_built == 0
    return facts


def _shard(
    config: Path, facts: CorpusFacts, k: int, run_id: str, parts: Path
) -> sharded.ShardSummary:
    return sharded.run_shard(
        load_suite(config), facts, RunOptions(label=run_id, progress=False),
        shard=Shard(k, 2), run_id=run_id, root=PartsRoot(parts), chunk_size=CHUNK,
    )  # fmt: skip


@pytest.mark.parametrize("summary", [False, True], ids=["entries", "summary"])
def test_a_warm_shard_requests_its_first_chunk_before_building_the_rest(
    tmp_path: Path, endpoint: tuple[Endpoint, str], monkeypatch: pytest.MonkeyPatch,
    summary: bool,
) -> None:  # fmt: skip
    mock, base_url = endpoint
    config = _suite(tmp_path / "suite", base_url)
    facts = mock.facts = _warm(tmp_path / "suite", tmp_path / "index", summary)
    reads: Counter[str] = Counter()
    first_read = ShareBuilder._first_read

    def counted(self: ShareBuilder, rel: str, *args: object) -> object:
        reads[rel] += 1
        return first_read(self, rel, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(ShareBuilder, "_first_read", counted)
    looked_up = []
    of_ids = FactRows.of_ids
    monkeypatch.setattr(
        FactRows, "of_ids", lambda self, ids: looked_up.append(1) or of_ids(self, ids)
    )
    done = _shard(config, facts, 1, "r", tmp_path / "parts")
    assert not looked_up  # the share's rows gathered from the plan: no id looked up

    assert done.chunks == 60 // CHUNK and done.requests == done.units == 60
    assert 0 < mock.built_at[0] <= CHUNK  # one chunk's cases built when its requests began
    assert facts.counts.cases_built == done.cases  # each share case built once, no more
    # from the summary: a case's facts made only as it is built
    assert facts.counts.facts_made == (done.cases if isinstance(facts.cases, FactRows) else 0)
    assert facts.counts.files_parsed == 0  # no file parsed whole ...
    assert set(reads) == {f"cases/part-{f}.yaml" for f in range(FILES)}
    assert set(reads.values()) == {1}  # ... and each read whole once over the six chunks
    pieces = PartsRoot(tmp_path / "parts").parts("r", "cases")
    assert len(pieces) == done.chunks  # a cases piece per chunk, written before its requests
    inputs = pl.concat([pl.read_parquet(p.path) for p in pieces])["input"].to_list()
    assert sum("où est ma commande" in json.loads(text)["messages"][0]["content"]
               for text in inputs) == done.cases  # fmt: skip


class Stop(Exception):
    pass


def test_a_shard_stopped_part_way_resumes_and_merges_as_one_never_stopped(
    tmp_path: Path, endpoint: tuple[Endpoint, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    mock, base_url = endpoint
    config = _suite(tmp_path / "suite", base_url)
    mock.facts = _warm(tmp_path / "suite", tmp_path / "index")
    for k in (1, 2):  # the run never stopped
        _shard(config, scan_corpus(config.parent, index_dir=tmp_path / "index"), k, "whole",
               tmp_path / "parts")  # fmt: skip
    real_chunk = sharded.run_chunk
    started: list[str] = []

    async def stopping(*args: object, **kwargs: object) -> sharded.ChunkResult:
        if len(started) == 2:
            raise Stop  # the third chunk: the shard dies there
        started.append("chunk")
        return await real_chunk(*args, **kwargs)  # type: ignore[arg-type]

    facts = scan_corpus(config.parent, index_dir=tmp_path / "index")
    with monkeypatch.context() as patch:
        patch.setattr(sharded, "run_chunk", stopping)
        with pytest.raises(Stop):
            _shard(config, facts, 1, "stopped", tmp_path / "parts")
    root = PartsRoot(tmp_path / "parts")
    assert len(root.parts("stopped", "cases")) == 3  # the third chunk's piece went first
    assert len(root.parts("stopped", "outputs")) == 2

    checked: list[str] = []  # the outputs attempts a shard reads before its first chunk
    check_attempt = PartsRoot.check_attempt

    def counted(self: PartsRoot, part: Any, *args: Any) -> Any:
        checked.append(part.chunk_id)
        return check_attempt(self, part, *args)

    monkeypatch.setattr(PartsRoot, "check_attempt", counted)
    resumed = _shard(config, scan_corpus(config.parent, index_dir=tmp_path / "index"), 1,
                     "stopped", tmp_path / "parts")  # fmt: skip
    assert resumed.skipped == 2 * CHUNK and resumed.requests == 60 - 2 * CHUNK
    assert len(checked) == 2  # its own two done chunks, and the "whole" run's are another's
    pieces = root.parts("stopped", "cases")
    assert len(pieces) == 60 // CHUNK and {p.attempt for p in pieces} == {1}  # none again
    checked.clear()
    _shard(config, scan_corpus(config.parent, index_dir=tmp_path / "index"), 2, "stopped",
           tmp_path / "parts")  # fmt: skip
    assert checked == []  # shard 1's six committed chunks are not its own: none read

    db = tmp_path / "s.duckdb"
    with open_store(db, write=True) as store:
        for run_id in ("whole", "stopped"):
            assert merge_run(store, root, run_id).result.complete
        sql = "SELECT case_id, case_hash, input, source FROM cases WHERE run_id = ? ORDER BY 1"
        assert store.query(sql, ["stopped"]).equals(store.query(sql, ["whole"]))
        keys = "SELECT case_id, replay, text FROM outputs WHERE run_id = ? ORDER BY 1, 2"
        assert store.query(keys, ["stopped"]).equals(store.query(keys, ["whole"]))
        assert store.query(keys, ["whole"]).height == FILES * PER_FILE


def test_the_merge_checks_a_shards_pieces_as_its_share(
    tmp_path: Path, endpoint: tuple[Endpoint, str]
) -> None:
    """A piece missing leaves outputs of cases the merge does not have: refused. A piece with
    a case hash changed makes the shard's pieces another share than recorded: refused."""
    mock, base_url = endpoint
    config = _suite(tmp_path / "suite", base_url)
    mock.facts = _warm(tmp_path / "suite", tmp_path / "index")
    for k in (1, 2):
        _shard(config, scan_corpus(config.parent, index_dir=tmp_path / "index"), k, "p",
               tmp_path / "parts")  # fmt: skip
    root = PartsRoot(tmp_path / "parts")
    first, second, *_ = root.parts("p", "cases")
    Path(first.path).unlink()
    with open_store(tmp_path / "a.duckdb", write=True) as store, pytest.raises(StoreError) as gone:
        merge_run(store, root, "p")
    assert "rows of case ids run p does not have" in str(gone.value)
    frame = pl.read_parquet(second.path)
    frame.with_columns(
        pl.when(pl.int_range(pl.len()) == 0).then(pl.lit("0" * 64)).otherwise("case_hash")
        .alias("case_hash")
    ).write_parquet(second.path)  # fmt: skip
    # the shard run again writes the missing piece back (its chunk done): only the edit is wrong
    _shard(config, scan_corpus(config.parent, index_dir=tmp_path / "index"), 1, "p",
           tmp_path / "parts")  # fmt: skip
    with open_store(tmp_path / "b.duckdb", write=True) as store, pytest.raises(StoreError) as bad:
        merge_run(store, root, "p")
    assert "pieces hold" in str(bad.value) and "not its share" in str(bad.value)


@pytest.mark.parametrize("replays", [1, 3])
def test_a_shard_plans_the_units_and_shares_order_units_gives(
    monkeypatch: pytest.MonkeyPatch, replays: int
) -> None:
    """The frame a shard orders its units in agrees with :func:`order_units`, the slices with
    :func:`shard_units` and the shares with :func:`corpus_shares` (what the Ray plan records),
    for ids outside ASCII too."""
    from types import SimpleNamespace

    from evalkit.run.shards import order_units, shard_units

    ids = [f"case-{i}" for i in range(301)] + ["é-1", "z", "Ω"]
    cases = [SimpleNamespace(id=i, hash=f"{abs(hash(i)):064x}"[-64:]) for i in ids]
    units = order_units(ids, replays)

    class Planned:
        def __init__(self) -> None:
            self.replays, self.shares = replays, None

        def with_corpus(self, shares: Any) -> Planned:
            self.shares = shares
            return self

    monkeypatch.setattr(sharded, "run_manifest", lambda *args: Planned())
    plan: Any = sharded._planned  # given stand-ins for the suite, facts and options
    tables = FactTables(files=(FileInfo("cases/a.yaml", "0", False, False, len(ids)),))
    rows = FactRows.of_columns(
        {"id": ids, "hash": [c.hash for c in cases]}, tables, IndexCounts()
    )  # the same cases as the corpus summary's columns
    for count in (1, 4, 7):
        for k in range(1, count + 1):
            manifest, mine = plan(None, SimpleNamespace(cases=cases), None, "r", Shard(k, count))
            assert mine.units == shard_units(units, Shard(k, count))
            assert manifest.shares == sharded.corpus_shares(cases, units, count)
            columns, theirs = plan(None, SimpleNamespace(cases=rows), None, "r", Shard(k, count))
            assert (theirs.units, columns.shares) == (mine.units, manifest.shares)
            own = {unit.case_id for unit in mine.units}  # its cases' rows, in corpus order
            assert theirs.rows.to_list() == [i for i, c in enumerate(ids) if c in own]
            assert sharded.corpus_shares(rows, units, count) == manifest.shares  # Ray's
    assert list(order_corpus_units(SimpleNamespace(cases=rows), replays)) == units  # Ray's order
    assert rows.counts.facts_made == 0  # planned from the columns alone


@pytest.mark.parametrize("where", ["où", "ou"], ids=["non-ascii", "ascii"])
def test_a_files_first_read_cuts_only_the_chunks_items_when_its_text_is_ascii(
    tmp_path: Path, where: str
) -> None:
    """An ASCII file's items are read at their facts' spans, so its first read cuts the
    chunk's items alone; in another file each share item's bytes are found at once."""
    root = tmp_path / "suite"
    _suite(root, "http://127.0.0.1:9/v1", where)
    facts = _warm(root, tmp_path / "index", summary=True)
    share = {f"c-{f}-{i:02d}" for f in range(FILES) for i in range(0, PER_FILE, 2)}  # half
    builder = ShareBuilder(facts, share)
    first = sorted(share)[:5]  # 5 of the first file's 10 share cases: it is read whole now
    assert [case.id for case in builder.build(first)] == first
    share_items = PER_FILE // 2  # of the file read
    assert builder.files_read == 1
    assert builder.items_cut == (5 if where == "ou" else share_items)
    assert builder.rows_indexed == 0  # the first chunk's rows found by a scan, no lookup made
    rest = sorted(share)[5:]  # the rest, the first file's at their spans (no read whole)
    built = builder.build(rest)
    assert [case.id for case in built] == rest and builder.files_read == FILES
    assert builder.rows_indexed == len(share)  # the share's lookup made for the later chunks
    texts = [(case.messages or ({},))[0].get("content") for case in built[:2]]
    assert texts == [f"{where} est ma commande 0{i} ?" for i in (10, 12)]

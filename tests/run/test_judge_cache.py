"""The judge's response cache (:class:`evalkit.run.cache.CachedProvider`): a rescore with an
unchanged judge asks the model nothing and the store a bounded number of times; lookups made
together go in one query; answers are written in batches and served before they are."""

from __future__ import annotations

import asyncio
import datetime as dt
import math
from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from evalkit.corpus.cases import Case, Corpus
from evalkit.records import ChatRequest, Completion
from evalkit.run import cache as cache_module
from evalkit.run import rescore as rescore_module
from evalkit.run.cache import WRITE_ROWS, CachedProvider
from evalkit.run.rescore import rescore_run
from evalkit.scorers.judge_client import JudgeClient
from evalkit.scorers.registry import build_scorer
from evalkit.store import OUTPUT_SCHEMA, SCORE_SCHEMA, Store, initial_scoring_id, open_store

RUN_ID = "judged-run"
VERDICT = '{"reason": "Polite and specific.", "score": 5}'
IDENTITY = {"judge": "judge-1", "snapshot": None, "base_url": "http://127.0.0.1:9/v1"}


@pytest.fixture(autouse=True)
def _writes_by_count_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Answers are written when WRITE_ROWS are held (and on close), never because one grew
    old on a slow machine: the counts below are exact."""
    monkeypatch.setattr(cache_module, "WRITE_INTERVAL_S", 3600.0)


class CountingJudge:
    """A judge model that answers every request with a top verdict, counting what it served
    and the most calls it had in flight at once."""

    name = "counting"

    def __init__(self) -> None:
        self.calls = 0
        self.in_flight = 0
        self.peak_in_flight = 0

    async def complete(self, request: ChatRequest) -> Completion:
        self.calls += 1
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0.001)
        finally:
            self.in_flight -= 1
        return Completion(text=VERDICT, prompt_tokens=50, completion_tokens=12)

    async def aclose(self) -> None:
        pass


class CountingStore:
    """``store``, counting every call of its public methods (each is one or a few queries)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if name.startswith("_") or not callable(attr):
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return attr(*args, **kwargs)

        return counted


def _corpus(tmp_path: Path, n: int) -> Corpus:
    rubric = tmp_path / "tone.md"
    rubric.write_text("Grade the tone.\n1: rude\n2: curt\n3: fine\n4: polite\n5: specific\n")
    scorers = (
        build_scorer("judge", {"rubric": "tone.md", "min_score": 4}, lambda p: tmp_path / p),
        build_scorer("contains", {"text": "refund"}),
    )
    cases = tuple(
        Case(
            id=f"case-{i:04d}",
            tags=(),
            criticality="normal",
            provenance={"source": "test"},
            messages=({"role": "user", "content": f"Refund order {i}?"},),
            vars=None,
            fixtures={},
            scorers=scorers,
            hash=f"{i:064x}",
            source=f"cases/judged.yaml:{i + 1}",
        )
        for i in range(n)
    )
    return Corpus(root=tmp_path, cases=cases, file_hashes={})


def _write_run(store: Store, corpus: Corpus) -> None:
    store.create_run(
        {"run": {"run_id": RUN_ID, "label": "judged"}, "config_hash": "c"}, corpus.cases
    )
    ids = [case.id for case in corpus.cases]
    n = len(ids)
    outputs = pl.DataFrame(
        {
            "run_id": RUN_ID, "case_id": ids, "replay": 0,
            "text": [f"We will refund order {i} today." for i in range(n)],
            "tool_calls": "[]", "steps": 1, "error": None, "fail_reason": None,
            "latency_ms": 100.0, "prompt_tokens": 30, "completion_tokens": 10, "cost_usd": 0.0,
            "cached": False, "request_hash": [f"{i:064x}" for i in range(n)], "model": "m",
            "created_at": dt.datetime.now(dt.UTC),
        },
        schema=OUTPUT_SCHEMA,
    )  # fmt: skip
    first = pl.DataFrame(
        {
            "run_id": RUN_ID, "scoring_id": initial_scoring_id(RUN_ID), "case_id": ids,
            "replay": 0, "scorer": "contains", "scorer_index": 1, "tier": 0, "score": 1.0,
            "passed": True, "error": False, "reason": "first scoring", "details": None,
        },
        schema=SCORE_SCHEMA,
    )  # fmt: skip
    store.write_results(outputs, first)


def _rescore(store: Store, corpus: Corpus, model: CountingJudge) -> tuple[CountingStore, Any]:
    counted = CountingStore(store)
    provider = CachedProvider(model, counted, IDENTITY, max_in_flight=4)  # type: ignore[arg-type]
    judge = JudgeClient(provider, "judge-1", max_retries=0)
    result = rescore_run(counted, corpus, RUN_ID, judge=judge)  # type: ignore[arg-type]
    return counted, (result, provider)


@pytest.mark.parametrize("chunk", [64, rescore_module.CHUNK_OUTPUTS])
def test_a_rescore_with_the_judge_unchanged_asks_nothing_and_queries_the_cache_per_chunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    n = 300
    monkeypatch.setattr(rescore_module, "CHUNK_OUTPUTS", chunk)
    corpus = _corpus(tmp_path, n)
    chunks = math.ceil(n / chunk)
    with open_store(tmp_path / "e.duckdb", write=True) as store:
        _write_run(store, corpus)
        model = CountingJudge()
        first_store, (first, first_provider) = _rescore(store, corpus, model)
        assert model.calls == n and first.rescored == n  # every verdict asked once
        assert model.peak_in_flight <= 4  # the misses wait for max_in_flight's slots
        assert first_provider.lookups == first_store.calls["cache_get"] == chunks
        assert first_store.calls["cache_put"] == first_provider.writes == math.ceil(n / WRITE_ROWS)

        again = CountingJudge()
        counted, (result, provider) = _rescore(store, corpus, again)
        assert again.calls == 0 and provider.hits == n  # every verdict from the cache
        # One cache query per chunk of outputs (all of a chunk's lookups together), nothing
        # written; the rest of the rescore's store calls do not grow with the outputs.
        assert provider.lookups == counted.calls["cache_get"] == chunks
        assert counted.calls["cache_put"] == 0
        others = sum(counted.calls.values()) - chunks
        assert others == sum(first_store.calls.values()) - chunks - first_provider.writes
        assert others <= 8, counted.calls
        scores = store.scores(RUN_ID, result.scoring_id).sort("case_id", "scorer_index")
        earlier = store.scores(RUN_ID, first.scoring_id).sort("case_id", "scorer_index")
    judged = scores.filter(pl.col("scorer") == "judge")
    assert judged.height == n and judged["passed"].all()
    assert scores.drop("scoring_id").equals(earlier.drop("scoring_id"))


def test_lookups_made_together_are_one_query_and_answers_are_served_before_written(
    tmp_path: Path,
) -> None:
    async def scenario(store: CountingStore) -> tuple[CachedProvider, CountingJudge, list[int]]:
        model = CountingJudge()
        provider = CachedProvider(model, store, IDENTITY)  # type: ignore[arg-type]
        requests = [
            ChatRequest("judge-1", [{"role": "user", "content": f"q{i}"}], {"temperature": 0})
            for i in range(50)
        ]
        await asyncio.gather(*(provider.complete(r) for r in requests))
        lookups_then = provider.lookups
        assert store.calls["cache_put"] == 0  # fewer than WRITE_ROWS, none WRITE_INTERVAL_S old
        again = await asyncio.gather(*(provider.complete(r) for r in requests))
        assert [c.text for c in again] == [VERDICT] * 50 and model.calls == 50
        assert provider.lookups == lookups_then  # held answers are served from memory
        await provider.aclose()  # writes what it holds
        return provider, model, [lookups_then, store.calls["cache_put"]]

    with open_store(tmp_path / "e.duckdb", write=True) as store:
        counted = CountingStore(store)
        provider, _, (lookups, puts) = asyncio.run(scenario(counted))
        assert lookups == 1 and puts == 1 and provider.hits == 50
        assert store.cache_stats()["entries"] == 50


def test_a_store_that_fails_a_lookup_fails_the_waiting_calls_instead_of_hanging(
    tmp_path: Path,
) -> None:
    class BrokenStore:
        def cache_get(self, keys: Any) -> dict[str, str]:
            raise OSError("disk gone")

        def cache_put(self, entries: dict[str, str]) -> None:
            raise OSError("disk gone")

    async def scenario() -> list[Any]:
        provider = CachedProvider(CountingJudge(), BrokenStore(), IDENTITY)  # type: ignore[arg-type]
        request = ChatRequest("judge-1", [{"role": "user", "content": "q"}], {})
        try:
            return await asyncio.wait_for(
                asyncio.gather(
                    *(provider.complete(request) for _ in range(3)), return_exceptions=True
                ),
                timeout=30,
            )
        finally:
            await provider.aclose()  # nothing to write: no answer came

    outcomes = asyncio.run(scenario())
    assert [type(o) for o in outcomes] == [OSError] * 3

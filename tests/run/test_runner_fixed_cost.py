"""What a run does around its requests: none before it is recorded, a summary counted by the
writer and its case counts as its finish recorded them (no query), and first requests built as
the workers take them, never all at once."""

from __future__ import annotations

import dataclasses
import gc
import textwrap
from pathlib import Path
from typing import Any

import pytest

from evalkit.corpus.cases import load_corpus
from evalkit.corpus.suite import Suite, load_suite
from evalkit.records import ChatRequest, Completion
from evalkit.run import execution
from evalkit.run.runner import PendingWork, RunOptions, RunStart, run_suite
from evalkit.run.summary import summarize
from evalkit.store import Store, open_store
from evalkit.store.history_queries import case_counts

CASES = 60


def _suite(root: Path, cases: int = CASES) -> Suite:
    """``cases`` one-turn cases of four kinds: passing, failing, a system error, and not JSON
    where JSON is expected (a fail)."""
    (root / "cases").mkdir(parents=True)
    kinds = ["pass", "fail", "boom", "schema"]
    lines = []
    for i in range(cases):
        kind = kinds[i % 4]
        expect = "[{contains: hello}]" if kind != "schema" else "[json_valid]"
        lines.append(
            f"- id: {kind}-{i:03d}\n"
            f"  input: {{messages: [{{role: user, content: '{kind} {i}'}}]}}\n"
            f"  expect: {expect}\n"
        )
    (root / "cases" / "a.yaml").write_text("".join(lines), encoding="utf-8")
    (root / "evalkit.yaml").write_text(
        textwrap.dedent(
            """\
            suite: fixed-cost
            system: {provider: python, model: my-app, function: "os:getcwd"}
            concurrency: 2
            cache: false
            """
        ),
        encoding="utf-8",
    )
    return load_suite(root / "evalkit.yaml")


class _Provider:
    """Answers by the case's kind; records what it saw when each request came in."""

    name = "fixed-cost"

    def __init__(self, store: Store, events: list[str], count_live: bool = False) -> None:
        self.store = store
        self.events = events
        # Only the test that asserts the live requests counts them (`_CountedRequest`).
        self.count_live = count_live
        self.run_id = ""  # set by on_start, when the run is recorded
        self.recorded_at_first: tuple[str, int] | None = None
        self.live_requests: list[int] = []

    async def complete(self, request: ChatRequest) -> Completion:
        if self.recorded_at_first is None:
            self.events.append("first request")
            if self.run_id:  # what the store holds of the run as the first request goes out
                cases = self.store.cases(self.run_id).height
                self.recorded_at_first = (self.store.run_status(self.run_id), cases)
        if self.count_live:
            self.live_requests.append(_CountedRequest.live)
        text = request.messages[-1]["content"]
        if text.startswith("boom"):
            from evalkit.errors import ProviderError

            raise ProviderError("HTTP 400: boom", retryable=False)
        reply = "not json at all" if text.startswith("schema") else text
        return Completion(text=reply.replace("pass", "hello"), prompt_tokens=3)

    async def aclose(self) -> None:
        return None


@pytest.fixture()
def counted_queries(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The SQL of every ``Store.records`` call (the summary's read path) while it is active."""
    seen: list[str] = []
    original = Store.records

    def records(self: Store, sql: str, params: Any = ()) -> list[dict[str, Any]]:
        seen.append(sql)
        return original(self, sql, params)

    monkeypatch.setattr(Store, "records", records)
    return seen


def test_no_request_before_the_run_is_recorded_and_the_summary_is_counted(
    tmp_path: Path, counted_queries: list[str]
) -> None:
    suite = _suite(tmp_path / "corpus")
    corpus = load_corpus(suite.root)
    events: list[str] = []

    def on_start(start: RunStart) -> None:
        events.append("recorded")
        provider.run_id = start.run_id

    options = RunOptions(label="fixed", progress=False, on_start=on_start)
    with open_store(tmp_path / "e.duckdb", write=True) as store:
        provider = _Provider(store, events)
        summary = run_suite(suite, corpus, store, options, provider=provider)
        queried = list(counted_queries)
        read_back = case_counts(store, [summary.run_id])[summary.run_id]
        stored = summarize(
            store,
            summary.run_id,
            summary.label,
            summary.config_hash,
            expected_outputs=summary.expected_outputs,
            session=_session(summary),
        )
    # The run and all its cases were in the store before the first request went out.
    assert events[:2] == ["recorded", "first request"]
    assert provider.recorded_at_first == ("running", CASES)
    # The summary came from the writer's counts and the per-case counts (its pass rate) from
    # what the run's finish recorded: no query read anything back ...
    assert queried == []
    assert summary.case_counts == read_back and read_back.cases == CASES
    # ... and says what the store's query says about the same rows.
    assert (summary.passed, summary.failed, summary.errored) == (15, 30, 15)
    assert summary.error_causes == stored.error_causes
    mine, theirs = dataclasses.asdict(summary), dataclasses.asdict(stored)
    for nested in ("warnings", "error_causes", "replicas", "case_counts"):
        mine.pop(nested), theirs.pop(nested)
    assert mine == pytest.approx(theirs)
    assert [(c.cause, c.count) for c in summary.error_causes] == [("HTTP 400: boom", 15)]


def _session(summary: Any) -> Any:
    from evalkit.run.summary import SessionCounts

    return SessionCounts(
        requests=summary.requests,
        retries=summary.retries,
        cache_hits=summary.cache_hits,
        resumed_skipped=summary.resumed_skipped,
        wall_s=summary.wall_s,
    )


class _CountedRequest(ChatRequest):
    """A ChatRequest that counts the live ones: made (by the runner, or copied: both go through
    ``__new__``) and not yet freed. The test once walked every object of its process per request
    (gc.get_objects, ~0.2 s each); this counts the same objects of this run only."""

    __slots__ = ()
    live = 0

    def __new__(cls, *args: Any, **kwargs: Any) -> _CountedRequest:
        _CountedRequest.live += 1
        return super().__new__(cls)

    def __del__(self) -> None:
        _CountedRequest.live -= 1


def test_first_requests_are_built_as_workers_take_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cases = CASES
    suite = _suite(tmp_path / "corpus", cases)
    corpus = load_corpus(suite.root)
    monkeypatch.setattr(execution, "ChatRequest", _CountedRequest)
    monkeypatch.setattr(_CountedRequest, "live", 0)  # whatever an earlier, failed run left
    with open_store(tmp_path / "e.duckdb", write=True) as store:
        provider = _Provider(store, [], count_live=True)
        run_suite(suite, corpus, store, RunOptions(progress=False), provider=provider)
    gc.collect()
    assert len(provider.live_requests) == cases and _CountedRequest.live == 0
    # Concurrency 2: four workers, each holding the request it is asking (and its copy),
    # never one per case as when every first request was built before the first was sent.
    assert max(provider.live_requests) <= 8 < cases


def test_pending_work_skips_what_is_done_and_counts_what_is_left(tmp_path: Path) -> None:
    corpus = load_corpus(_suite(tmp_path / "corpus", 8).root)
    done = frozenset({(corpus.cases[0].id, 0), (corpus.cases[3].id, 1)})
    work = PendingWork(corpus.cases, 2, done)
    pairs = [(case.id, replay) for case, replay in work]
    assert len(work) == len(pairs) == 14
    assert pairs == [
        (case.id, r) for case in corpus.cases for r in range(2) if (case.id, r) not in done
    ]
    assert len(PendingWork(corpus.cases, 3, frozenset())) == 24

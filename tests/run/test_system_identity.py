"""The cache never hides a change to the system under test.

A python system's module file (and ``system.code_paths``), ``system.version`` and
``system.index`` are part of the cache key and the config hash; cached outputs keep the latency
and cost they had when produced; a resumed ``--no-cache`` run stays uncached.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from evalkit.corpus.cases import load_corpus
from evalkit.corpus.manifest import build_manifest
from evalkit.corpus.suite import Suite, load_suite
from evalkit.run.runner import RunOptions, RunStart, run_suite, run_suite_async
from evalkit.store import open_store

APP = """
import time

DELAY_S = {delay}
ANSWER = {answer!r}


def answer(messages, **context):
    time.sleep(DELAY_S)
    return {{"text": ANSWER + " " + messages[-1]["content"], "prompt_tokens": 5,
             "completion_tokens": 2}}
"""

CASES = "".join(
    f"""\
- id: case-{i:03d}
  tags: [general]
  input: {{messages: [{{role: user, content: "question {i}"}}]}}
  expect: [{{contains: fine}}]
"""
    for i in range(8)
)

_names = itertools.count()


class App:
    """A python system under test in a module of its own, whose source a test edits."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, delay: float = 0.0):
        self.name = f"ek_app_{next(_names)}"
        self.dir = tmp_path / "app"
        self.dir.mkdir(exist_ok=True)
        monkeypatch.syspath_prepend(str(self.dir))
        self.path = self.dir / f"{self.name}.py"
        self.delay = delay
        self.write("fine")

    def write(self, answer: str) -> None:
        self.path.write_text(APP.format(delay=self.delay, answer=answer))


def _suite(tmp_path: Path, app: App, extra: str = "", overrides: tuple[str, ...] = ()) -> Suite:
    root = tmp_path / "corpus"
    (root / "cases").mkdir(parents=True, exist_ok=True)
    (root / "cases" / "a.yaml").write_text(CASES)
    (root / "evalkit.yaml").write_text(
        textwrap.dedent(
            f"""\
            suite: py
            system: {{provider: python, model: my-app, function: "{app.name}:answer"}}
            concurrency: 2
            prices: {{my-app: {{input_per_mtok: 1000000, output_per_mtok: 1000000}}}}
            """
        )
        + extra
    )
    return load_suite(root / "evalkit.yaml", overrides=list(overrides))


class Counting:
    """Counts the python provider's calls (the system under test really being asked)."""

    def __init__(self) -> None:
        self.calls = 0

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from evalkit.run.providers import python_callable

        original = python_callable.PythonProvider.complete
        counter = self

        async def complete(provider, request):  # type: ignore[no-untyped-def]
            counter.calls += 1
            return await original(provider, request)

        monkeypatch.setattr(python_callable.PythonProvider, "complete", complete)


def test_editing_the_python_function_is_a_cache_miss_and_a_new_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = App(tmp_path, monkeypatch)
    counting = Counting()
    counting.install(monkeypatch)
    suite = _suite(tmp_path, app)
    corpus = load_corpus(suite.root)
    with open_store(tmp_path / "e.duckdb", write=True) as store:
        first = run_suite(suite, corpus, store, RunOptions(label="a", progress=False))
        same = run_suite(suite, corpus, store, RunOptions(label="b", progress=False))
        assert counting.calls == 8 and same.requests == 0 and same.cache_hits == 8
        assert same.config_hash == first.config_hash

        app.write("broken")  # a regression in the user's code, nothing else changed
        counting.calls = 0
        edited = run_suite(suite, corpus, store, RunOptions(label="c", progress=False))
        outputs = store.outputs(edited.run_id)
        manifest = store.manifest(edited.run_id)
    assert counting.calls == 8 and edited.requests == 8 and edited.cache_hits == 0
    assert edited.config_hash != first.config_hash
    assert not outputs["cached"].any()
    assert all(text.startswith("broken") for text in outputs["text"].to_list())  # new code ran
    assert edited.failed == 8
    assert list(manifest.system["code"]) == [f"../app/{app.name}.py"]
    # ... and the gate sees the regression the cache used to hide
    from evalkit.compare.analysis import load_comparison
    from evalkit.compare.gate import gate_comparison
    from evalkit.compare.policy import GatePolicy

    with open_store(tmp_path / "e.duckdb", read_only=True) as store:
        pair = load_comparison(store, first.run_id, edited.run_id, allow_diff=["system"])
        decision = gate_comparison(store, pair, GatePolicy(critical_tags=("general",)))
    assert pair.manifest_diff == ("system",) and decision.status == "BLOCKED"


def test_code_paths_version_and_index_change_the_config_hash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = App(tmp_path, monkeypatch)
    helper = app.dir / "retrieval.py"
    helper.write_text("TOP_K = 3\n")
    extra = "system.code_paths=[../app/*.py]"

    def config_hash(*sets: str) -> str:
        suite = _suite(tmp_path, app, overrides=sets)
        corpus = load_corpus(suite.root)
        return build_manifest(suite, corpus, run_id="r", label="l", selection={}).config_hash

    base = config_hash(extra)
    assert config_hash(extra) == base
    helper.write_text("TOP_K = 5\n")  # a helper the function's module imports
    widened = config_hash(extra)
    assert widened != base
    assert config_hash() != widened  # without code_paths only the module file is hashed
    assert config_hash(extra, "system.version=2026.11.30") != widened
    index = "system.index={name: docs, version: '2026-11-01'}"
    newer = "system.index={name: docs, version: '2026-11-29'}"
    assert config_hash(extra, index) != widened
    assert config_hash(extra, index) != config_hash(extra, newer)


def test_a_version_change_is_a_cache_miss_for_a_service(
    tmp_path: Path, demo_server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An OpenAI-compatible service evalkit cannot hash: ``system.version`` is its identity."""
    repo = Path(__file__).resolve().parents[2]
    sets = [f"system.base_url={demo_server.base_url}", "system.version=build-41"]
    suite = load_suite(repo / "corpus" / "evalkit.yaml", overrides=sets)
    corpus = load_corpus(suite.root, user_template=suite.config.system.user_template)
    corpus = corpus.select(ids=[c.id for c in corpus.cases if all(s.tier < 3 for s in c.scorers)])
    corpus = corpus.select(tags=["billing"])
    with open_store(tmp_path / "e.duckdb", write=True) as store:
        first = run_suite(suite, corpus, store, RunOptions(label="a", progress=False))
        demo_server.reset_stats()
        bumped_sets = [sets[0], "system.version=build-42"]
        bumped = load_suite(repo / "corpus" / "evalkit.yaml", overrides=bumped_sets)
        second = run_suite(bumped, corpus, store, RunOptions(label="b", progress=False))
        manifest = store.manifest(second.run_id)
    assert second.config_hash != first.config_hash
    assert demo_server.stats()["requests"] == second.requests > 0 and second.cache_hits == 0
    assert manifest.system["version"] == "build-42"


def test_cached_outputs_keep_their_latency_and_cost_and_are_marked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = App(tmp_path, monkeypatch, delay=0.03)
    suite = _suite(tmp_path, app)
    corpus = load_corpus(suite.root)
    with open_store(tmp_path / "e.duckdb", write=True) as store:
        fresh = run_suite(suite, corpus, store, RunOptions(label="a", progress=False))
        cached = run_suite(suite, corpus, store, RunOptions(label="b", progress=False))
        before = store.outputs(fresh.run_id)
        after = store.outputs(cached.run_id)
        warnings = store.manifest(cached.run_id).warnings
    assert not before["cached"].any() and after["cached"].all()
    assert (before["latency_ms"] >= 30).all()
    assert after["latency_ms"].to_list() == before["latency_ms"].to_list()  # real, not 0
    assert after["cost_usd"].to_list() == before["cost_usd"].to_list() == [7.0] * 8
    assert cached.mean_latency_ms == fresh.mean_latency_ms >= 30
    assert (fresh.cost_spent_usd, fresh.cost_cached_usd, fresh.cached_outputs) == (56.0, 0.0, 0)
    assert (cached.cost_spent_usd, cached.cost_cached_usd, cached.cached_outputs) == (0.0, 56.0, 8)
    assert any("8 of 8 outputs (100%) came from the response cache" in w for w in warnings)
    assert cached.warnings == tuple(warnings)


def test_resuming_a_no_cache_run_stays_uncached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = App(tmp_path, monkeypatch, delay=0.05)
    counting = Counting()
    counting.install(monkeypatch)
    suite = _suite(tmp_path, app)
    corpus = load_corpus(suite.root)
    with open_store(tmp_path / "e.duckdb", write=True) as store:
        run_suite(suite, corpus, store, RunOptions(label="warm", progress=False))  # fills cache

        async def scenario() -> str:
            task_options = RunOptions(label="nightly", use_cache=False)
            started: list[RunStart] = []
            options = replace(task_options, on_start=started.append, flush_rows=1, progress=False)
            task = asyncio.ensure_future(run_suite_async(suite, corpus, store, options))
            calls_at_start = counting.calls
            while counting.calls - calls_at_start < 3:
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return started[0].run_id

        run_id = asyncio.run(scenario())
        stored = len(store.completed(run_id))
        assert 0 < stored < 8, "the cancel must land mid-run"
        assert store.run_status(run_id) == "interrupted"
        (stopped,) = store.records("SELECT summary FROM runs WHERE run_id = ?", [run_id])
        assert json.loads(stopped["summary"]) == {"stopped": "CancelledError"}  # no bare colon
        assert store.manifest(run_id).run.cache is False
        counting.calls = 0
        resumed = run_suite(
            suite, corpus, store, RunOptions(resume=run_id, progress=False)
        )  # no use_cache given: the run's own setting applies
        outputs = store.outputs(run_id)
        status = store.run_status(run_id)
    assert resumed.cache_hits == 0 and counting.calls == 8 - stored == resumed.requests
    assert not outputs["cached"].any() and outputs.height == 8
    assert status == "complete"
    # the summary of a resumed run counts the whole run, not only what the resume asked
    assert (resumed.outputs, resumed.passed, resumed.resumed_skipped) == (8, 8, stored)


def test_transport_and_request_settings_are_recorded_not_hashed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = Path(__file__).resolve().parents[2]
    corpus = load_corpus(repo / "corpus")

    def manifest(*sets: str) -> dict:
        suite = load_suite(repo / "corpus" / "evalkit.yaml", overrides=list(sets))
        return build_manifest(suite, corpus, run_id="r", label="l", selection={})

    default = manifest()
    lean = manifest("system.transport=lean", "system.max_retries=1", "system.timeout_s=5")
    limited = manifest("rate_limit={requests_per_minute: 600}")
    # the demo suite names an OpenAI-compatible base_url: "auto" resolves to the lean transport
    assert default.requests["transport"] == "lean"
    official = manifest("system.base_url=https://api.openai.com/v1")
    assert official.requests["transport"] == "openai"
    assert (lean.requests["transport"], lean.requests["max_retries"]) == ("lean", 1)
    assert lean.requests["timeout_s"] == 5.0
    assert limited.requests["rate_limit"]["requests_per_minute"] == 600
    # how requests are made changes no answer: the runs stay comparable replays
    assert default.config_hash == lean.config_hash == limited.config_hash


def test_config_warnings_name_unpinned_models_and_thin_judge_replays(tmp_path: Path) -> None:
    from evalkit.run.caveats import config_warnings, result_warnings

    repo = Path(__file__).resolve().parents[2]
    corpus = load_corpus(repo / "corpus")
    sets = ["system.model=gpt-4o", "judge.model=claude-sonnet-4", "critical_tags=[orders]"]
    warnings = config_warnings(load_suite(repo / "corpus" / "evalkit.yaml", overrides=sets), corpus)
    assert any("model 'gpt-4o' is an alias with no pinned snapshot" in w for w in warnings)
    assert any("judge model 'claude-sonnet-4' is an alias" in w for w in warnings)
    assert any("replays 1 < 5 where a judge decides critical tag(s) orders" in w for w in warnings)
    pinned = [*sets, "system.snapshot=gpt-4o-2024-08-06", "judge.snapshot=x-1", "replays=5"]
    suite = load_suite(repo / "corpus" / "evalkit.yaml", overrides=pinned)
    assert config_warnings(suite, corpus) == []
    assert result_warnings(10, 2, 12) == [
        "incomplete run: 10 of 12 outputs (selected cases × replays) stored"
    ]

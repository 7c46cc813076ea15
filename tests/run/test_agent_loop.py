"""The agent tool loop's response-cache keys: one per request with the cache on (each step is
looked up and stored), only the first request's (the output's ``request_hash``) with it off."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

import evalkit.run.execution as execution
from evalkit.corpus.cases import load_corpus
from evalkit.corpus.suite import load_suite
from evalkit.run.runner import RunOptions, run_suite
from evalkit.store import open_store

TOOLS = ("lookup_order", "lookup_customer", "issue_refund")

APP = f"""
import json

TOOLS = {TOOLS!r}
CALLS = []

def answer(messages, **context):
    CALLS.append(len(messages))
    done = sum(m["role"] == "tool" for m in messages)
    if done < len(TOOLS):
        return {{"text": None, "tool_calls": [{{"id": f"c{{done}}", "name": TOOLS[done],
                "arguments": {{"order_id": "8812"}}}}]}}
    return json.dumps({{"refund": True, "seen": done}})
"""

CASES = "".join(
    f"- id: agent-{i}\n"
    f"  input: {{messages: [{{role: user, content: 'refund order {i}'}}]}}\n"
    "  fixtures: {tools: {lookup_order: {status: delivered}, lookup_customer: {verified: true},"
    " issue_refund: {refund_id: R-1}}}\n"
    "  expect: [json_valid]\n"
    for i in range(3)
)


@pytest.fixture()
def agent_suite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    app_dir = tmp_path / "app"
    app_dir.mkdir()
    (app_dir / "agent_app.py").write_text(APP)
    monkeypatch.syspath_prepend(str(app_dir))
    sys.modules.pop("agent_app", None)
    root = tmp_path / "corpus"
    (root / "cases").mkdir(parents=True)
    (root / "cases" / "a.yaml").write_text(CASES)
    (root / "evalkit.yaml").write_text(
        textwrap.dedent(
            """\
            suite: agent
            system: {provider: python, model: my-agent, function: "agent_app:answer"}
            concurrency: 2
            """
        )
    )
    suite = load_suite(root / "evalkit.yaml")
    return suite, load_corpus(suite.root)


@pytest.fixture()
def keys(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every cache key the runner computes, in order."""
    computed: list[str] = []
    real = execution.cache_key

    def counting(identity, request, replay):  # type: ignore[no-untyped-def]
        key = real(identity, request, replay)
        computed.append(key)
        return key

    monkeypatch.setattr(execution, "cache_key", counting)
    return computed


def _run(suite, corpus, store, label: str, use_cache: bool):  # type: ignore[no-untyped-def]
    options = RunOptions(label=label, progress=False, use_cache=use_cache, replays=2)
    summary = run_suite(suite, corpus, store, options)
    return summary, store.outputs(summary.run_id)


def test_without_the_cache_only_the_first_request_is_keyed(
    agent_suite, keys: list[str], tmp_path: Path
) -> None:
    suite, corpus = agent_suite
    with open_store(tmp_path / "e.duckdb", write=True) as store:
        summary, outputs = _run(suite, corpus, store, "off", use_cache=False)
    app = sys.modules["agent_app"]
    assert len(app.CALLS) == 3 * 2 * 4  # 3 cases x 2 replays x (3 tool steps + the answer)
    assert summary.passed == 6
    for row in outputs.iter_rows(named=True):
        assert [c["name"] for c in json.loads(row["tool_calls"])] == list(TOOLS)
        assert row["steps"] == 4 and json.loads(row["text"]) == {"refund": True, "seen": 3}
    # one key per (case, replay): its first request's, stored as the output's request_hash
    assert len(keys) == 6
    assert sorted(keys) == sorted(outputs["request_hash"].to_list())
    assert len(set(keys)) == 6


def test_with_the_cache_every_step_is_keyed_and_answered_from_it(
    agent_suite, keys: list[str], tmp_path: Path
) -> None:
    suite, corpus = agent_suite
    with open_store(tmp_path / "e.duckdb", write=True) as store:
        _, first = _run(suite, corpus, store, "fill", use_cache=True)
        app = sys.modules["agent_app"]
        assert len(app.CALLS) == 24
        # the prefetch's key of each first request, then a key per request: each is stored
        assert len(keys) == 6 + 24
        hashes = sorted(first["request_hash"].to_list())
        summary, again = _run(suite, corpus, store, "hit", use_cache=True)
    assert len(app.CALLS) == 24  # every step of every (case, replay) from the cache
    assert len(keys) == 2 * (6 + 24) and summary.passed == 6
    assert sorted(again["request_hash"].to_list()) == hashes
    assert again["cached"].to_list() == [True] * 6
    assert again.sort("case_id", "replay")["tool_calls"].to_list() == (
        first.sort("case_id", "replay")["tool_calls"].to_list()
    )

"""The runner: outputs and scores stored as they complete, errors kept apart, tool-fixture loop."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from evalkit.corpus.cases import load_corpus
from evalkit.corpus.suite import load_suite
from evalkit.run.runner import RunOptions, run_suite
from evalkit.store import open_store

APP = """
import json

def answer(messages, **context):
    last = messages[-1]
    if last["role"] == "tool":
        return "refund issued: " + last["content"]
    text = last["content"]
    if "boom" in text:
        raise RuntimeError("upstream app crashed")
    if "refund" in text:
        return {"text": None, "tool_calls": [{"id": "c1", "name": "lookup_order",
                "arguments": {"order_id": "8812"}}], "prompt_tokens": 7, "completion_tokens": 3}
    if "wander" in text:
        return {"text": None, "tool_calls": [{"id": "c2", "name": "delete_account",
                "arguments": {"user": "u1"}}]}
    return {"text": json.dumps({"echo": text}), "prompt_tokens": 5, "completion_tokens": 2}
"""

CASES = """\
- id: plain-001
  tags: [general]
  input: {messages: [{role: user, content: "hello there"}]}
  expect: [json_valid, {contains: hello}]
- id: plain-002
  tags: [general]
  input: {messages: [{role: user, content: "goodbye"}]}
  expect: [{contains: hello}]
- id: crash-001
  tags: [general]
  input: {messages: [{role: user, content: "boom"}]}
  expect: [json_valid]
- id: agent-001
  tags: [agent]
  input: {messages: [{role: user, content: "refund please"}]}
  fixtures:
    tools:
      lookup_order:
        - {args: {order_id: "8812"}, response: {status: delivered, charges: 2}}
  expect: [{contains: delivered}]
- id: agent-002
  tags: [agent]
  input: {messages: [{role: user, content: "wander off"}]}
  fixtures: {tools: {lookup_order: {status: delivered}}}
  expect: [{contains: delivered}]
"""


@pytest.fixture()
def python_suite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    app_dir = tmp_path / "app"
    app_dir.mkdir()
    (app_dir / "support_app.py").write_text(APP)
    monkeypatch.syspath_prepend(str(app_dir))
    sys.modules.pop("support_app", None)
    root = tmp_path / "corpus"
    (root / "cases").mkdir(parents=True)
    (root / "cases" / "a.yaml").write_text(CASES)
    (root / "evalkit.yaml").write_text(
        textwrap.dedent(
            """\
            suite: py
            system: {provider: python, model: my-app, function: "support_app:answer"}
            concurrency: 4
            """
        )
    )
    suite = load_suite(root / "evalkit.yaml")
    return suite, load_corpus(suite.root)


def test_python_provider_run_stores_outputs_scores_and_errors(python_suite, tmp_path: Path) -> None:
    suite, corpus = python_suite
    with open_store(tmp_path / "e.duckdb", write=True) as store:
        summary = run_suite(suite, corpus, store, RunOptions(label="base", progress=False))
        outputs = store.outputs(summary.run_id)
        scores = store.scores(summary.run_id)
        run_status = store.run_status(summary.run_id)
    assert outputs.height == 5 and summary.outputs == 5
    by_case = {row["case_id"]: row for row in outputs.iter_rows(named=True)}
    # A crash in the user's app is an error with its cause, and is never scored.
    assert by_case["crash-001"]["error"] == "RuntimeError: upstream app crashed"
    assert scores.filter(scores["case_id"] == "crash-001").is_empty()
    # Scores are long: one row per (case, replay, scorer), in expect order, with reasons.
    plain = scores.filter(scores["case_id"] == "plain-001")
    assert plain["scorer"].to_list() == ["json_valid", "contains"]
    assert plain["passed"].to_list() == [True, True]
    failing = scores.filter(scores["case_id"] == "plain-002").row(0, named=True)
    assert failing["passed"] is False and "hello" in failing["reason"]
    assert (summary.passed, summary.failed, summary.errored) == (2, 2, 1)
    assert run_status == "complete"


def test_tool_loop_serves_fixtures_and_fails_uncovered_calls(python_suite, tmp_path: Path) -> None:
    suite, corpus = python_suite
    with open_store(tmp_path / "e.duckdb", write=True) as store:
        runs = [
            run_suite(
                suite, corpus, store, RunOptions(label=f"r{i}", progress=False, use_cache=False)
            )
            for i in range(2)
        ]
        first, second = (store.outputs(r.run_id) for r in runs)
    agent = first.filter(first["case_id"] == "agent-001").row(0, named=True)
    trajectory = json.loads(agent["tool_calls"])
    assert trajectory == [
        {
            "name": "lookup_order",
            "arguments": {"order_id": "8812"},
            "response": {"status": "delivered", "charges": 2},
        }
    ]
    assert agent["steps"] == 2 and "delivered" in agent["text"]
    assert agent["prompt_tokens"] == 7  # summed over the steps
    stray = first.filter(first["case_id"] == "agent-002").row(0, named=True)
    assert stray["fail_reason"] == 'unexpected tool call delete_account(user="u1")'
    assert stray["error"] is None  # a real failure, not an outage
    # Fixture replay is deterministic: the same trajectory on every run.
    assert (
        first.select("case_id", "tool_calls")
        .sort("case_id")
        .equals(second.select("case_id", "tool_calls").sort("case_id"))
    )


def test_selection_is_recorded_in_the_manifest(python_suite, tmp_path: Path) -> None:
    suite, corpus = python_suite
    selection = {"tags": ["agent"], "exclude_tags": [], "sealed": False}
    with open_store(tmp_path / "e.duckdb", write=True) as store:
        summary = run_suite(
            suite,
            corpus.select(tags=["agent"]),
            store,
            RunOptions(label="smoke", progress=False, selection=selection),
        )
        manifest = store.manifest(summary.run_id)
        cases = store.cases(summary.run_id)
    assert manifest.selection == selection
    assert sorted(cases["case_id"].to_list()) == ["agent-001", "agent-002"]
    assert manifest.provider.function == "support_app:answer"


def test_fixture_arguments_are_normalized() -> None:
    from evalkit.fixtures import FixtureMiss, serve_tool_call

    keyed = {"lookup_order": [{"args": {"order_id": "8812"}, "response": {"ok": True}}]}
    for raw in ('{"order_id": 8812}', '{"order_id": " 8812 "}', '{"order_id": "8812"}'):
        assert serve_tool_call(keyed, "lookup_order", raw).response == {"ok": True}
    with pytest.raises(FixtureMiss, match=r'unexpected tool call lookup_order\(order_id="8813"\)'):
        serve_tool_call(keyed, "lookup_order", '{"order_id": "8813"}')


def test_run_against_the_demo_server_stores_everything(tmp_path: Path, demo_server) -> None:
    from evalkit.corpus.suite import load_suite as load

    repo = Path(__file__).resolve().parents[2]
    overrides = [
        f"system.base_url={demo_server.base_url}",
        "judge.base_url=" + demo_server.base_url,
    ]
    suite = load(repo / "corpus" / "evalkit.yaml", overrides=overrides)
    corpus = load_corpus(suite.root, user_template=suite.config.system.user_template)
    demo_server.reset_stats()
    with open_store(tmp_path / "e.duckdb", write=True) as store:
        summary = run_suite(suite, corpus, store, RunOptions(label="demo", progress=False))
        outputs = store.outputs(summary.run_id)
        manifest = store.manifest(summary.run_id)
    assert outputs.height == len(corpus.cases) == summary.cases
    assert outputs["error"].null_count() == outputs.height
    assert (outputs["prompt_tokens"] > 0).all() and (outputs["completion_tokens"] > 0).all()
    assert (outputs["latency_ms"] > 0).all()
    assert (outputs["cost_usd"] > 0).all()  # from the suite's price table
    assert set(outputs["model"].to_list()) == {"demo-support-1"}
    assert manifest.provider.simulator is True
    assert manifest.recorded("model") == {"id": "demo-support-1", "snapshot": "demo-support-1"}
    assert summary.requests == int(outputs["steps"].sum())  # a request per model turn

"""Live tools (``kind: live``) against the demo simulator: a live run answers tool calls from
Python callables, is labelled live and is never promoted, compared or gated; ``evalkit fixtures
record`` freezes its calls into the case file, ``check`` finds a changed live answer, and
``refresh`` rewrites it as a reviewed change whose new case hash the pin logic treats as an
edited case to rebaseline."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from evalkit.cli import main
from evalkit.corpus.cases import load_corpus
from evalkit.corpus.manifest import build_manifest
from evalkit.corpus.suite import load_suite
from evalkit.demo.server import DemoServer
from evalkit.errors import ConfigError
from evalkit.run.rebaseline import delta_cases
from evalkit.store import open_store

REPO = Path(__file__).resolve().parents[2]
CASE = "order-status-001"
CASES = """\
# Order status, answered from the order service.
- id: order-status-001
  tags: [orders]
  provenance: {reviewer: ops, date: 2026-07-01, source: "ticket 1"}
  input:
    messages:
      - {role: user, content: "Where is my order 58120?"}   # a shipped order
  expect:
    - json_valid
    - {scorer: tool_called, args: {name: lookup_order, order_id: "58120"}}

# A case that needs no tool: its text must survive the rewrite byte for byte.
- id: greeting-002
  input: {messages: [{role: user, content: "Hello there, just saying thanks!"}]}
  expect: [json_valid]
"""


@pytest.fixture
def live(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, demo_server: DemoServer) -> Any:
    """A project whose suite is ``kind: live`` with ``lookup_order`` from the example module."""
    monkeypatch.syspath_prepend(str(REPO / "tests" / "fixtures"))
    import live_tools_example

    monkeypatch.setattr(live_tools_example, "CALLS", {"lookup_order": 0, "lookup_customer": 0})
    root = tmp_path / "proj"
    (root / "cases").mkdir(parents=True)
    tools = json.loads((REPO / "corpus" / "tools" / "support_tools.json").read_text())
    (root / "tools.json").write_text(json.dumps(tools), encoding="utf-8")
    (root / "system.md").write_text(
        "Respond only with a JSON object with keys category, priority, order_id, refund, "
        "escalate, reply. Use the tools to look up orders.\n",
        encoding="utf-8",
    )
    (root / "cases" / "orders.yaml").write_text(CASES, encoding="utf-8")
    config = root / "evalkit.yaml"
    config.write_text(
        textwrap.dedent(f"""\
        suite: live-demo
        system:
          provider: openai
          model: demo-support-1
          base_url: {demo_server.base_url}
          api_key_env: EVALKIT_DEMO_KEY
          prompt: system.md
          tools: tools.json
          sampling: {{temperature: 0, seed: 7, max_tokens: 400}}
        cache: false
        kind: live
        tools:
          lookup_order: live_tools_example:lookup_order
        """),
        encoding="utf-8",
    )
    return {"config": config, "db": tmp_path / "e.duckdb", "module": live_tools_example}


def _run(live: Any, label: str, *sets: str) -> str:
    flags = [f for s in sets for f in ("--set", s)]
    code = main(["run", "--config", str(live["config"]), "--db", str(live["db"]), "--label",
                 label, "--no-progress", *flags])  # fmt: skip
    assert code == 0
    with open_store(live["db"], read_only=True) as store:
        return store.resolve_run(label)


def _fixtures(live: Any, *args: str) -> int:
    return main(["fixtures", *args, "--config", str(live["config"])])


def test_a_live_run_answers_from_the_live_tools_and_is_labelled_live(live: Any, capsys) -> None:
    run_id = _run(live, "live")
    printed = capsys.readouterr()
    assert "warning: LIVE run (kind: live): calls to lookup_order were answered by the live" in (
        printed.out
    )
    assert live["module"].CALLS["lookup_order"] == 1
    with open_store(live["db"], read_only=True) as store:
        manifest = store.manifest(run_id)
        outputs = {r["case_id"]: r for r in store.outputs(run_id).iter_rows(named=True)}
        summary = json.loads(store.runs()["summary"][0])
    assert manifest.kind == "live"
    assert manifest.tools["live"] == {"lookup_order": "live_tools_example:lookup_order"}
    assert any(w.startswith("LIVE run") for w in summary["warnings"])
    calls = json.loads(outputs[CASE]["tool_calls"])
    assert calls == [
        {"name": "lookup_order", "arguments": {"order_id": "58120"},
         "response": live["module"].ORDERS["58120"]}
    ]  # fmt: skip
    # a live configuration is another configuration: its hash is not the fixture one's
    hashes = []
    for kind in ("live", "fixtures"):
        suite = load_suite(live["config"], overrides=[f"kind={kind}"])
        corpus = load_corpus(suite.root)
        built = build_manifest(suite, corpus, run_id="r", label="x", selection={})
        hashes.append(built.config_hash)
    assert hashes[0] != hashes[1]


def test_record_freezes_the_calls_and_a_fixture_run_replays_them_without_a_live_call(
    live: Any, capsys
) -> None:
    run_id = _run(live, "live")
    path = live["config"].parent / "cases" / "orders.yaml"
    assert main(["fixtures", "record", "live", "--db", str(live["db"]), "--config",
                 str(live["config"])]) == 0  # fmt: skip
    assert f"recorded 1 live tool call(s) of run {run_id} into 1 case(s)" in capsys.readouterr().out
    text = path.read_text(encoding="utf-8")
    assert text.endswith(CASES.split("# A case that needs no tool")[1])  # untouched
    assert '      - {role: user, content: "Where is my order 58120?"}   # a shipped order\n' in text
    assert (
        "  fixtures:\n    tools:\n      lookup_order:\n        - args: {order_id: '58120'}\n"
        "          response: {order_id: '58120', status: shipped, carrier: UPS, tracking: 1Z999}\n"
        "  expect:\n"
    ) in text
    assert f"note: tool fixtures recorded from live run {run_id} on " in text
    assert "reviewer: ops, date: 2026-07-01" in text  # the person's provenance is kept
    # the fixture configuration now replays the frozen answer: no live call, same verdicts
    before = live["module"].CALLS["lookup_order"]
    replay = _run(live, "replay", "kind=fixtures")
    assert live["module"].CALLS["lookup_order"] == before
    capsys.readouterr()
    with open_store(live["db"], read_only=True) as store:
        calls = json.loads(store.outputs(replay).filter(case_id=CASE)["tool_calls"][0])
        assert store.manifest(replay).kind == "fixtures"
        assert store.scores(replay)["passed"].all()
    assert calls[0]["response"]["status"] == "shipped"
    # recording the same run again finds nothing new to write
    assert main(["fixtures", "record", run_id, "--db", str(live["db"]), "--config",
                 str(live["config"])]) == 0  # fmt: skip
    assert "skipped:" not in (out := capsys.readouterr().out) and "nothing recorded" in out


def test_check_lists_a_changed_live_answer_as_stale_and_refresh_makes_an_edited_case(
    live: Any, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    _run(live, "live")
    assert main(["fixtures", "record", "live", "--db", str(live["db"]), "--config",
                 str(live["config"])]) == 0  # fmt: skip
    base = _run(live, "base", "kind=fixtures")  # the fixture configuration before the refresh
    capsys.readouterr()
    assert _fixtures(live, "check") == 0
    assert "1 frozen answer(s) of live tools (lookup_order) in 1 case(s): 0 stale" in (
        capsys.readouterr().out
    )
    delivered = {**live["module"].ORDERS["58120"], "status": "delivered"}
    monkeypatch.setitem(live["module"].ORDERS, "58120", delivered)
    assert _fixtures(live, "check") == 1
    out = capsys.readouterr().out
    assert f'STALE     cases/orders.yaml:2 case {CASE}: lookup_order(order_id="58120")' in out
    assert '"status": "shipped"' in out and '"status": "delivered"' in out
    assert f"evalkit fixtures refresh {CASE} --who NAME" in out

    old_hash = {c.id: c.hash for c in load_corpus(live["config"].parent).cases}
    code = _fixtures(live, "refresh", CASE, "--who", "ops-lead", "--reason", "carrier delivered")
    assert code == 0
    new_hash = {c.id: c.hash for c in load_corpus(live["config"].parent).cases}
    assert f"{CASE}: case hash {old_hash[CASE][:12]} → {new_hash[CASE][:12]}" in (
        capsys.readouterr().out
    )
    assert new_hash[CASE] != old_hash[CASE] and new_hash["greeting-002"] == old_hash["greeting-002"]
    text = (live["config"].parent / "cases" / "orders.yaml").read_text(encoding="utf-8")
    assert "response: {order_id: '58120', status: delivered," in text
    assert "reviewer: ops-lead" in text and "by ops-lead: carrier delivered" in text
    assert _fixtures(live, "check") == 0  # fresh again
    # the pin: the refreshed case is an edited case, never paired, to be rebaselined
    cand = _run(live, "cand", "kind=fixtures")
    with open_store(live["db"], read_only=True) as store:
        delta = delta_cases(store.cases(base), store.cases(cand))
    assert delta == {CASE: new_hash[CASE]}


def test_a_live_run_is_never_promoted_compared_or_gated(live: Any, capsys) -> None:
    run_id = _run(live, "live")
    fixture_run = _run(live, "fix", "kind=fixtures")
    db = str(live["db"])
    capsys.readouterr()
    assert main(["baseline", "promote", run_id, "--db", db, "--who", "a", "--reason", "b"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"run {run_id} is a live run (kind: live" in err
    assert "never promoted as a baseline" in err
    for command in ("compare", "gate"):
        assert main([command, fixture_run, run_id, "--db", db]) == 2
        assert "never compared or gated" in capsys.readouterr().err
    with open_store(live["db"], read_only=True) as store:
        assert store.baselines("live-demo").is_empty()
    # and a fixture run is no source of recorded answers
    assert main(["fixtures", "record", fixture_run, "--db", db, "--config",
                 str(live["config"])]) == 2  # fmt: skip
    assert "is not a live run (kind: fixtures)" in capsys.readouterr().err


def test_a_failing_live_tool_is_an_error_not_a_verdict_and_is_not_recorded(
    live: Any, capsys
) -> None:
    run_id = _run(live, "down", "tools.lookup_order=live_tools_example:broken_tool")
    with open_store(live["db"], read_only=True) as store:
        row = store.outputs(run_id).filter(case_id=CASE).row(0, named=True)
    assert row["error"].startswith("live tool lookup_order failed: ConnectionError: order ")
    before = (live["config"].parent / "cases" / "orders.yaml").read_text(encoding="utf-8")
    assert main(["fixtures", "record", run_id, "--db", str(live["db"]), "--config",
                 str(live["config"])]) == 0  # fmt: skip
    assert f"skipped: case {CASE} replay 0 errored: live tool lookup_order failed" in (
        capsys.readouterr().out
    )
    assert (live["config"].parent / "cases" / "orders.yaml").read_text() == before


def test_live_configuration_errors_are_one_line_naming_the_file(live: Any) -> None:
    config = live["config"]
    config.write_text(config.read_text().split("tools:\n  lookup_order")[0], encoding="utf-8")
    with pytest.raises(ConfigError, match=r"evalkit.yaml:11: kind: live needs tools:"):
        load_suite(config)
    config.write_text(config.read_text() + "tools: {lookup_order: no_such_module:f}\n")
    with pytest.raises(ConfigError, match=r"tools.lookup_order 'no_such_module:f': cannot import"):
        _check_direct(config)


def _check_direct(config: Path) -> None:
    from evalkit.run.fixture_recording import check_fixtures

    suite = load_suite(config)
    check_fixtures(suite, load_corpus(suite.root))


def test_a_coroutine_tool_is_awaited_and_an_answer_json_cannot_carry_is_an_error(
    live: Any,
) -> None:
    import asyncio

    from evalkit.run.live_tools import LiveToolError, answer_tool_call, load_live_tools

    config = live["config"]
    config.write_text(
        config.read_text() + "  lookup_customer: live_tools_example:lookup_customer\n"
        "  when: datetime:datetime.now\n",
        encoding="utf-8",
    )
    tools = load_live_tools(load_suite(config))
    served = asyncio.run(answer_tool_call(tools, {}, "lookup_customer", '{"email": "a@b.c"}'))
    assert served.response == {"email": "a@b.c", "verified": True, "orders": ["58120", "77031"]}
    assert live["module"].CALLS["lookup_customer"] == 1
    with pytest.raises(LiveToolError, match="live tool when failed: answer is not JSON data"):
        asyncio.run(answer_tool_call(tools, {}, "when", "{}"))
    # a tool the suite does not name is still served from the case's fixtures
    fixtures = {"issue_refund": {"refund_id": "R-1"}}
    assert asyncio.run(answer_tool_call(tools, fixtures, "issue_refund", "{}")).response == {
        "refund_id": "R-1"
    }


def test_record_skips_a_case_whose_input_changed_since_the_run(live: Any, capsys) -> None:
    run_id = _run(live, "live")
    path = live["config"].parent / "cases" / "orders.yaml"
    edited = path.read_text(encoding="utf-8").replace("Where is my order", "Where's my order")
    path.write_text(edited, encoding="utf-8")
    assert main(["fixtures", "record", run_id, "--db", str(live["db"]), "--config",
                 str(live["config"])]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert f"skipped: case {CASE} has another input than it ran with: not recorded" in out
    assert f"nothing recorded from {run_id}: no live tool call" in out
    assert path.read_text(encoding="utf-8") == edited

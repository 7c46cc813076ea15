"""Production traces become draft cases: the OTLP GenAI and OpenAI-log readers on files the real
tools wrote (tests/fixtures/traces/README.md), power-guided stratified sampling, dedupe against
the corpus and each other, PII scrubbing, tool calls as fixtures, and the whole loop: sample →
lint refuses the drafts → review → lint, run against the demo and gate."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
import yaml
from projects import make_project

from evalkit import redact
from evalkit.cli import main
from evalkit.corpus.cases import Case, load_corpus
from evalkit.corpus.traces import read_traces
from evalkit.corpus.traces.drafting import compile_patterns, draft_case, scrub
from evalkit.corpus.traces.records import ToolCall, Trace
from evalkit.corpus.traces.sampler import sample
from evalkit.demo.server import DemoServer
from evalkit.errors import CorpusError
from evalkit.store import open_store

REPO = Path(__file__).resolve().parents[2]
TRACES = REPO / "tests" / "fixtures" / "traces"
OTLP, LOG = TRACES / "support_app.otlp.jsonl", TRACES / "support_app.openai.jsonl"


def test_otlp_genai_spans_become_traces_with_their_tool_calls() -> None:
    read = read_traces([OTLP])
    assert len(read.traces) == 7 and read.skipped == {str(OTLP): 0}
    refund = read.traces[0]
    assert refund.messages == (
        {
            "role": "user",
            "content": "I was charged twice for order 8812, please refund the extra payment.",
        },
    )  # fmt: skip  (no system prompt: the suite's is under test)
    assert refund.output.startswith('{"category": "billing"')
    assert [(c.name, c.args) for c in refund.tool_calls] == [
        ("lookup_order", {"order_id": "8812"}),
        ("issue_refund", {"order_id": "8812", "amount": 49.9, "reason": "duplicate_charge"}),
    ]
    assert refund.tool_calls[1].response == {"refund_id": "RF-20418", "status": "issued",
                                             "amount": 49.9}  # fmt: skip
    attributes = refund.attributes
    assert attributes["gen_ai.provider.name"] == "openai"
    assert attributes["gen_ai.request.model"] == "demo-support-1"
    assert attributes["gen_ai.usage.input_tokens"] == 423  # intValue "423" read as an int
    assert attributes["app.intent"] == "billing" and attributes["service.name"] == "support-app"


def test_openai_logs_become_one_trace_per_conversation() -> None:
    read = read_traces([LOG])
    assert len(read.traces) == 6  # 11 calls: the agent's successive calls are one conversation
    refund = read.traces[0]
    assert [c.name for c in refund.tool_calls] == ["lookup_order", "issue_refund"]
    assert refund.tool_calls[0].response["customer_email"] == "m.haddad@example.com"
    assert refund.attributes["metadata.intent"] == "billing"
    assert refund.output.startswith('{"category": "billing"')


def test_a_line_no_reader_understands_names_its_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(OTLP.read_text().splitlines()[0] + "\n{not json\n")
    with pytest.raises(CorpusError, match=r"bad.jsonl:2: not JSON"):
        read_traces([bad])
    log = tmp_path / "log.jsonl"
    log.write_text('{"prompt": "hi"}\n')
    with pytest.raises(CorpusError, match=r"log.jsonl:1: no messages"):
        read_traces([log])


def _case(case_id: str, tag: str, text: str) -> Case:
    messages = ({"role": "user", "content": text},)
    return Case(case_id, (tag,), "normal", {}, messages, None, {}, (), "h", "cases/x.yaml:1")


def _trace(text: str, intent: str) -> Trace:
    return Trace(f"t:{text}", ({"role": "user", "content": text},), "ok", (), {"intent": intent})


def test_the_slice_that_needs_most_cases_gets_most_drafts_and_dupes_are_dropped() -> None:
    corpus = [_case(f"b{i}", "billing", f"billing case {i}") for i in range(200)]
    corpus += [_case(f"o{i}", "orders", f"orders case {i}") for i in range(5)]
    traces = [_trace(f"billing trace {i}", "billing") for i in range(30)]
    traces += [_trace(f"orders trace {i}", "orders") for i in range(30)]
    traces += [_trace("Billing  CASE 3", "billing"), _trace("orders trace 1", "orders")]
    picked = sample(traces, corpus, 20, by="intent", seed=3)
    counts = {s.slice: s.drafts for s in picked.slices}
    # 246 cases detect a 5-point drop: orders lacks 241, billing 46 — orders gets every draft
    # until their deficits meet, and that is beyond 20
    assert counts == {"orders": 20, "billing": 0} and picked.required_n == 246
    assert (picked.duplicates_of_corpus, picked.duplicates_of_traces) == (1, 1)
    again = sample(traces, corpus, 20, by="intent", seed=3)
    assert again.chosen == picked.chosen  # reproducible by seed
    assert sample(traces, corpus, 20, by="intent", seed=4).chosen != picked.chosen
    wide = sample(traces, corpus, 250, by="intent")
    assert {s.slice: s.drafts for s in wide.slices} == {"orders": 30, "billing": 30}
    # without --by a trace takes the tags of its closest corpus case
    nearest = sample([_trace("orders case 999 please", "x")], corpus, 1)
    assert nearest.chosen[0][1] == ("orders",)


def test_scrubbing_and_tool_fixtures_of_a_draft(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redact, "_KNOWN_SECRETS", set())  # this test's key only, then gone
    redact.register_secret("sk-live-9f8e7d6c5b4a")
    trace = Trace(
        "t.jsonl:4",
        (
            {
                "role": "user",
                "content": "I'm kari@example.org, +47 912 34 567, key sk-live-9f8e7d6c5b4a,"
                " member M-12345",
            },
        ),
        "Refunded to card 4111 1111 1111 1111.",
        (
            ToolCall("lookup_customer", {"email": "kari@example.org"}, {"id": "M-12345"}),
            ToolCall("never_answered", {}, None),
        ),
        {"gen_ai.request.model": "m", "gen_ai.provider.name": "openai"},
    )
    case = draft_case(trace, ["billing"], compile_patterns([r"M-\d+"]))
    assert case["review"] == "draft" and case["tags"] == ["billing"]
    assert case["input"]["messages"][0]["content"] == (
        "I'm [redacted], [redacted], key [redacted], member [redacted]"
    )
    assert case["fixtures"] == {"tools": {"lookup_customer": [
        {"args": {"email": "[redacted]"}, "response": {"id": "[redacted]"}}]}}  # fmt: skip
    assert {"scorer": "tool_called", "args": {"name": "lookup_customer"}} in case["expect"]
    assert "4111" not in str(case) and "kari@" not in str(case)
    assert case["provenance"]["source"] == "traces: t.jsonl:4 (openai, m)"
    assert scrub("order 8812, $49.90, tracking JD0146000", ()) == (
        "order 8812, $49.90, tracking JD0146000"
    )


def test_sample_lint_review_run_and_gate_the_drafts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, demo_server: DemoServer, capsys
) -> None:
    make_project(tmp_path / "corpus", demo=True)
    monkeypatch.chdir(tmp_path)
    config = ["--config", "corpus/evalkit.yaml"]
    args = ["traces", "sample", str(OTLP), "--n", "10", "--by", "app.intent", *config]
    assert main([*args, "--redact", r"JD\d+"]) == 0
    out = capsys.readouterr().out
    assert "read 7 traces from 1 files; 1 already in the corpus, 1 repeated, dropped" in out
    (written,) = (tmp_path / "corpus" / "cases").glob("traces-*.yaml")
    drafts = yaml.safe_load(written.read_text())
    assert len(drafts) == 5 and all(d["review"] == "draft" for d in drafts)
    texts = " ".join(d["input"]["messages"][0]["content"] for d in drafts)
    assert "tracking hasn't updated" not in texts  # that ticket is a corpus case already
    assert "[redacted]" in texts and "example.org" not in written.read_text()
    assert "JD0146000" not in written.read_text()  # the user's pattern
    refund = next(d for d in drafts if d["tags"] == ["billing"])
    assert list(refund["fixtures"]["tools"]) == ["lookup_order", "issue_refund"]
    assert main(args) == 0  # sampling again: every trace is a duplicate now
    out = capsys.readouterr().out  # the drafts hold the scrubbed text: matched all the same
    assert "7 already in the corpus, 0 repeated" in out and "nothing written" in out

    assert main(["cases", "lint", *config]) == 2  # drafts never gate
    assert "is a draft (review: draft)" in capsys.readouterr().err
    urls = [f"--set=system.base_url={demo_server.base_url}",
            f"--set=judge.base_url={demo_server.base_url}"]  # fmt: skip
    run = ["run", "--no-progress", "--tag", "billing", "--tag", "orders", *urls, *config]
    assert main([*run, "--label", "base"]) == 2
    assert "evalkit cases review trace-" in capsys.readouterr().err

    ids = [d["id"] for d in drafts]
    assert main(["cases", "review", *ids, "--who", "support-lead", *config]) == 0
    assert main(["cases", "lint", *config]) == 0
    cases = {c.id: c for c in load_corpus(tmp_path / "corpus").cases}
    assert all(cases[i].review == "reviewed" for i in ids)
    assert main([*run, "--label", "base"]) == 0
    out = capsys.readouterr().out
    assert "errors 0" in out, out
    with open_store("data/evalkit.duckdb", read_only=True) as store:
        scores = store.scores("base").filter(pl.col("case_id") == refund["id"])
        outputs = store.outputs("base").filter(pl.col("case_id") == refund["id"])
    assert scores["passed"].to_list() == [True, True, True]  # both tools called, JSON answer
    assert "issue_refund" in outputs["tool_calls"][0]  # served from the frozen fixtures
    assert main([*run, "--label", "cand"]) == 0
    assert main(["gate", "base", "cand", *config]) == 0, capsys.readouterr()

"""``fixtures.documents`` reach the system under test (``{{documents}}``, the default block in the
system message, a python system's ``documents`` context) and the judge's prompt."""

from __future__ import annotations

import asyncio
import json
import textwrap
from pathlib import Path

import pytest

from evalkit.cli import main
from evalkit.corpus.cases import load_corpus
from evalkit.corpus.suite import load_suite
from evalkit.demo.server import DemoServer
from evalkit.records import Output
from evalkit.scorers.judge_client import JudgeClient
from evalkit.store import open_store

ECHO = """
import json


def answer(messages, **context):
    return json.dumps({"messages": messages, "documents": context["documents"],
                       "keys": sorted(context)})
"""

CASES = """\
- id: rag-vars
  input: {vars: {message: "How long do refunds take?"}}
  fixtures:
    documents:
      - "Refunds are issued within 5 business days."
      - {title: Fees, text: "Refunds carry no fee."}
  expect:
    - {contains: {text: "5 business days", field: documents.0}}
    - {scorer: judge, args: {rubric: rubrics/faithful.md, min_score: 4}}
- id: rag-messages
  input: {messages: [{role: user, content: "Any fee?"}]}
  fixtures: {documents: ["Refunds carry no fee."]}
  expect: [json_valid]
- id: no-docs
  input: {messages: [{role: user, content: "hi"}]}
  expect: [json_valid]
"""

RUBRIC = """Is the answer faithful to the source documents?
1: contradicts them
2: mostly unsupported
3: partly supported
4: supported but for a detail
5: every claim is supported by them
"""


def _project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, template: str, judge_url: str = ""
) -> Path:
    module = f"ek_echo_{abs(hash(str(tmp_path)))}"
    (tmp_path / f"{module}.py").write_text(ECHO)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "cases").mkdir()
    (tmp_path / "rubrics").mkdir()
    (tmp_path / "cases" / "rag.yaml").write_text(CASES)
    (tmp_path / "rubrics" / "faithful.md").write_text(RUBRIC)
    (tmp_path / "prompt.md").write_text("You answer billing questions.")
    (tmp_path / "evalkit.yaml").write_text(
        textwrap.dedent(f"""\
            suite: rag
            system:
              provider: python
              model: echo
              function: "{module}:answer"
              prompt: prompt.md
              user_template: {json.dumps(template)}
            judge: {{model: demo-judge-1, base_url: "{judge_url or "http://127.0.0.1:9"}"}}
            """)
    )
    return tmp_path / "evalkit.yaml"


def _outputs(config: Path, db: Path, capsys) -> dict[str, dict]:
    assert main(["run", "--config", str(config), "--db", str(db), "--no-progress"]) == 0
    capsys.readouterr()
    with open_store(db, read_only=True) as store:
        run_id = store.runs()["run_id"][0]
        frame = store.outputs(run_id)
    return {row["case_id"]: json.loads(row["text"]) for row in frame.iter_rows(named=True)}


def test_documents_reach_an_echo_system_by_default_placement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys, demo_server: DemoServer
) -> None:
    config = _project(tmp_path, monkeypatch, template="{{message}}", judge_url=demo_server.base_url)
    echoed = _outputs(config, tmp_path / "e.duckdb", capsys)
    system = echoed["rag-vars"]["messages"][0]
    assert system == {
        "role": "system",
        "content": "You answer billing questions.\n\nReference documents:\n"
        "[1] Refunds are issued within 5 business days.\n[2] (Fees) Refunds carry no fee.",
    }
    assert echoed["rag-vars"]["messages"][1]["content"] == "How long do refunds take?"
    # the python context carries them as written, beside model, tools and sampling
    assert echoed["rag-vars"]["documents"] == [
        "Refunds are issued within 5 business days.",
        {"title": "Fees", "text": "Refunds carry no fee."},
    ]
    assert {"model", "tools", "documents", "temperature"} <= set(echoed["rag-vars"]["keys"])
    assert echoed["rag-messages"]["messages"][0]["content"].endswith(
        "Reference documents:\n[1] Refunds carry no fee."
    )
    # a case without documents is sent exactly as before
    assert echoed["no-docs"]["messages"][0]["content"] == "You answer billing questions."
    assert echoed["no-docs"]["documents"] == []


def test_documents_template_variable_places_them_in_the_user_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys, demo_server: DemoServer
) -> None:
    template = "Sources:\n{{documents}}\n\nQ: {{message}}"
    config = _project(tmp_path, monkeypatch, template=template, judge_url=demo_server.base_url)
    echoed = _outputs(config, tmp_path / "e.duckdb", capsys)
    messages = echoed["rag-vars"]["messages"]
    assert messages[0]["content"] == "You answer billing questions."  # no second copy
    assert messages[1]["content"] == (
        "Sources:\n[1] Refunds are issued within 5 business days.\n"
        "[2] (Fees) Refunds carry no fee.\n\nQ: How long do refunds take?"
    )
    # a messages case is not rendered through the user template: the default block applies
    assert "Reference documents:" in echoed["rag-messages"]["messages"][0]["content"]


def test_documents_reach_the_judge_prompt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scripted_provider
) -> None:
    config = _project(tmp_path, monkeypatch, template="{{message}}")
    suite = load_suite(config)
    case = next(c for c in load_corpus(suite.root).cases if c.id == "rag-vars")
    judge_scorer = next(s for s in case.scorers if s.name == "judge")
    provider = scripted_provider(lambda request: '{"reason": "supported", "score": 5}')
    client = JudgeClient(provider, "judge-model")
    score = asyncio.run(judge_scorer.ascore(Output("Within 5 business days."), case, client))
    assert score.passed, score.reason
    user = provider.requests[0].messages[1]["content"]
    assert user.startswith(
        "Source documents given to the assistant:\n"
        "[1] Refunds are issued within 5 business days.\n[2] (Fees) Refunds carry no fee.\n\n"
        "Conversation:\n"
    )
    assert user.endswith("Assistant's final answer:\nWithin 5 business days.")

"""The shared cache knows who answered (issue 46, item 5): a run against a stub at
``http://127.0.0.1:P/v1`` publishes its answers; a run of the same configuration against a
different server at the same URL is served none of them. Each entry records its publisher and
what the endpoint said it was; another machine's loopback entries are never taken."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import polars as pl
import pytest

from evalkit.cli import main
from evalkit.run.cache_provenance import Consumer, Publisher, refusal
from evalkit.run_manifest import ProviderInfo, RunInfo, RunManifest
from evalkit.store import open_store
from evalkit.store.shared import parse_store_uri
from evalkit.store.shared.tables import TABLES, load_table, open_catalog

MODEL = "demo-support-1"


class _Server(ThreadingHTTPServer):
    allow_reuse_address = True
    daemon_threads = True
    owner = "stub"
    fingerprint = "fp_stub"
    answered = 0


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, *args: object) -> None:
        pass

    def _reply(self, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        entry = {"id": MODEL, "object": "model", "created": 0, "owned_by": self.server.owner}
        self._reply({"object": "list", "data": [entry]})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        self.server.answered += 1
        self._reply({
            "id": "x", "object": "chat.completion", "model": f"{MODEL}-{self.server.owner}",
            "system_fingerprint": self.server.fingerprint,
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant",
                                     "content": f"answered by {self.server.owner}"}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 4},
        })  # fmt: skip


@contextmanager
def _serve(port: int, owner: str) -> Iterator[_Server]:
    server = _Server(("127.0.0.1", port), _Handler)
    server.owner, server.fingerprint = owner, f"fp_{owner}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def project(project_factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An ``evalkit init`` project whose config names a shared store; the cwd is its parent."""
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    shared = f"sqlite:///{tmp_path / 'team' / 'catalog.db'}"
    made = project_factory(config=f"\nstore: {{shared: '{shared}'}}\n")
    monkeypatch.chdir(tmp_path)
    return made.config


def _run(project: Path, db: Path, port: int) -> int:
    return main(["run", "--label", "pr", "--no-progress", "--config", str(project), "--db",
                 str(db), "--set", f"system.base_url=http://127.0.0.1:{port}/v1"])  # fmt: skip


def test_a_different_server_at_the_same_url_gets_none_of_the_stubs_answers(
    project: Path, tmp_path: Path, capsys
) -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with _serve(port, "stub") as stub:
        assert _run(project, tmp_path / "laptop.duckdb", port) in (0, 1)
    assert stub.answered > 0
    # what the shared cache recorded of each entry: its publisher and what the stub said it was
    table = load_table(
        open_catalog(parse_store_uri(f"sqlite:///{tmp_path / 'team' / 'catalog.db'}")),
        TABLES["response_cache"], create=False,
    )  # fmt: skip
    assert table is not None
    entries = pl.from_arrow(table.scan().to_arrow())
    assert entries.height == stub.answered
    publisher = json.loads(entries["publisher"][0])
    assert publisher["loopback"] is True and publisher["run"]
    assert publisher["reported"] == {"id": MODEL, "owned_by": "stub", "created": 0}
    response = json.loads(entries["response"][0])
    assert (response["model"], response["system_fingerprint"]) == (f"{MODEL}-stub", "fp_stub")

    capsys.readouterr()
    with _serve(port, "vllm") as real:
        assert _run(project, tmp_path / "ci.duckdb", port) in (0, 1)
    assert real.answered == stub.answered  # every answer asked again: 0 of the stub's taken
    with open_store(tmp_path / "ci.duckdb", read_only=True) as store:
        outputs = store.query("SELECT text, cached FROM outputs")
        summary = json.loads(store.query("SELECT summary FROM runs")["summary"][0])
    assert outputs["text"].unique().to_list() == ["answered by vllm"]
    assert not outputs["cached"].any()
    assert summary["shared_cache"]["served"] == 0

    # the same server again: its own entries are taken, nothing is asked
    with _serve(port, "vllm") as again:
        assert _run(project, tmp_path / "ci2.duckdb", port) in (0, 1)
    assert again.answered == 0


def test_another_machines_loopback_entries_and_unrecorded_ones_are_not_taken() -> None:
    reported = {"id": MODEL, "owned_by": "vllm", "created": 0}
    me = Consumer("ci-runner", reported)
    laptop = Publisher(
        host="laptop",
        run="r1",
        commit="abc",
        endpoint="http://127.0.0.1:8000/v1",
        loopback=True,
        reported=reported,
    )
    assert "another machine's loopback" in str(refusal(laptop.to_json(), me))
    remote = Publisher(
        host="laptop",
        run="r1",
        commit="abc",
        endpoint="https://llm.internal/v1",
        loopback=False,
        reported=reported,
    )
    assert refusal(remote.to_json(), me) is None  # a real endpoint reporting the same
    assert refusal(None, me) == "no publisher recorded"
    other = Publisher(
        host="ci-runner",
        run="r2",
        commit="abc",
        endpoint="https://llm.internal/v1",
        loopback=False,
        reported={"id": "x"},
    )
    assert "another served identity" in str(refusal(other.to_json(), me))


def test_a_pull_request_jobs_entries_serve_only_that_job(monkeypatch) -> None:
    from evalkit.run.cache_provenance import publisher_of

    reported = {"id": MODEL, "owned_by": "vllm", "created": 0}
    manifest = RunManifest(
        provider=ProviderInfo(base_url="https://llm.internal/v1"), run=RunInfo(git_sha="abc")
    )
    for name in ("GITHUB_ACTIONS", "GITHUB_EVENT_NAME", "GITHUB_RUN_ID", "GITHUB_JOB"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_EVENT_NAME", "pull_request")
    monkeypatch.setenv("GITHUB_RUN_ID", "77")
    monkeypatch.setenv("GITHUB_JOB", "gate")
    published = publisher_of("pr-run", manifest, reported)
    assert published.pull_request and published.job == "77/gate"
    main_job = Consumer("ci-runner", reported, "78/nightly")
    assert "pull-request job" in str(refusal(published.to_json(), main_job))
    assert "pull-request job" in str(refusal(published.to_json(), Consumer("h", reported)))
    assert refusal(published.to_json(), Consumer("ci-runner", reported, "77/gate")) is None
    monkeypatch.setenv("GITHUB_EVENT_NAME", "push")  # the control: main's job publishes
    assert refusal(publisher_of("main-run", manifest, reported).to_json(), main_job) is None


def test_the_gate_report_counts_answers_from_another_machines_cache(
    project: Path, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A laptop publishes answers of a (LAN) server; CI, on another host, is served them: its
    summary and the gate report count them."""
    import socket

    from evalkit.run import cache_provenance

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setattr(cache_provenance, "is_loopback", lambda url: False)  # a LAN server
    with _serve(port, "vllm") as server:
        monkeypatch.setattr(cache_provenance, "this_host", lambda: "laptop")
        assert _run(project, tmp_path / "laptop.duckdb", port) in (0, 1)
        asked = server.answered
        monkeypatch.setattr(cache_provenance, "this_host", lambda: "ci-7")
        ci = tmp_path / "ci.duckdb"
        assert _run(project, ci, port) in (0, 1)
        assert server.answered == asked  # all served by the laptop's entries
        base = ["run", "--label", "base", "--no-cache", "--no-progress", "--config",
                str(project), "--db", str(ci), "--set",
                f"system.base_url=http://127.0.0.1:{port}/v1"]  # fmt: skip
        assert main(base) in (0, 1)
    with open_store(ci, read_only=True) as store:
        summary = json.loads(
            store.query("SELECT summary FROM runs WHERE label = 'pr'")["summary"][0]
        )
    assert summary["shared_cache"]["from_other_hosts"] == asked
    assert summary["shared_cache"]["other_hosts"] == ["laptop"]
    capsys.readouterr()
    report = tmp_path / "gate.md"
    main(["gate", "base", "pr", "--db", str(ci), "--config", str(project), "--out",
          str(tmp_path / "reports"), "--markdown", str(report)])  # fmt: skip
    said = f"{asked} answers came from another machine's response cache (published by laptop"
    assert said in report.read_text()

"""The endpoint a run really talked to is the one it records and caches under.

The official ``openai`` client reads ``OPENAI_BASE_URL`` when ``base_url`` is unset: a run whose
config names no endpoint talks to whatever the environment names. That *effective* endpoint is
what the provider connects to, what the manifest records (``provider.base_url``, without
userinfo) and what the response cache keys on, so a run against another server is never served
this one's answers.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from evalkit.compare.comparability import check_comparable
from evalkit.corpus.cases import load_corpus
from evalkit.corpus.manifest import manifest_diff
from evalkit.corpus.suite import OPENAI_DEFAULT_BASE_URL, SystemConfig, load_suite
from evalkit.errors import ComparabilityError
from evalkit.run.providers import make_provider
from evalkit.run.runner import RunOptions, RunSummary, run_suite
from evalkit.run_manifest import RunManifest
from evalkit.store import open_store

KEY_ENV = "EVALKIT_ENDPOINT_TEST_KEY"  # unset: loopback endpoints get the placeholder key


class ChatServer:
    """A loopback OpenAI-compatible chat endpoint answering ``"<name>: fine"``; counts requests."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.requests = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests += 1
                reply = {
                    "model": body["model"],
                    "choices": [
                        {"message": {"content": f"{server.name}: fine"}, "finish_reason": "stop"}
                    ],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 2},
                }
                data = json.dumps(reply).encode()
                ok = self.path == "/v1/chat/completions"
                self.send_response(200 if ok else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                return None

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.http.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.http.shutdown()
        self.http.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def servers(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[ChatServer, ChatServer]]:
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    a, b = ChatServer("A"), ChatServer("B")
    yield a, b
    a.stop()
    b.stop()
    assert not a.thread.is_alive() and not b.thread.is_alive()


def _project(tmp_path: Path, system: str = "") -> Path:
    root = tmp_path / "corpus"
    (root / "cases").mkdir(parents=True, exist_ok=True)
    (root / "cases" / "a.yaml").write_text(
        "".join(
            f"- id: c{i}\n  input: {{messages: [{{role: user, content: 'q{i}'}}]}}\n"
            "  expect: [{contains: fine}]\n"
            for i in range(4)
        )
    )
    (root / "evalkit.yaml").write_text(
        f"suite: endpoint\nsystem: {{model: m, transport: openai, api_key_env: {KEY_ENV}"
        f"{', ' + system if system else ''}}}\n"
    )
    return root / "evalkit.yaml"


def _run(
    config: Path, db: Path, label: str
) -> tuple[RunSummary, RunManifest, list[str], list[bool]]:
    suite = load_suite(config)
    corpus = load_corpus(suite.root)
    with open_store(db, write=True) as store:
        summary = run_suite(suite, corpus, store, RunOptions(label=label, progress=False))
        outputs = store.outputs(summary.run_id).sort("case_id")
        manifest = store.manifest(summary.run_id)
    return summary, manifest, outputs["text"].to_list(), outputs["cached"].to_list()


def test_openai_base_url_elsewhere_is_asked_again_and_recorded(
    tmp_path: Path, servers: tuple[ChatServer, ChatServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = servers
    config, db = _project(tmp_path), tmp_path / "e.duckdb"

    monkeypatch.setenv("OPENAI_BASE_URL", a.url)
    first, base, texts, _ = _run(config, db, "baseline")
    assert (a.requests, b.requests) == (4, 0) and texts == ["A: fine"] * 4

    monkeypatch.setenv("OPENAI_BASE_URL", b.url)  # same evalkit.yaml, another server
    second, cand, texts, cached = _run(config, db, "candidate")
    assert (a.requests, b.requests) == (4, 4)
    assert second.cache_hits == 0 and second.requests == 4 and not any(cached)
    assert texts == ["B: fine"] * 4
    assert base.provider.base_url == a.url and cand.provider.base_url == b.url
    assert base.requests["base_url_from"] == cand.requests["base_url_from"]
    assert cand.requests["base_url_from"] == "OPENAI_BASE_URL"
    assert manifest_diff(base, cand) == ["provider"]
    assert second.config_hash != first.config_hash
    with pytest.raises(ComparabilityError, match=r"provider\.base_url"):
        check_comparable(base, cand, allow_diff=["prompt"])  # the endpoint was not declared

    monkeypatch.setenv("OPENAI_BASE_URL", a.url)  # back to A: A's answers, from the cache
    again, _, texts, cached = _run(config, db, "again")
    assert again.cache_hits == 4 and again.requests == 0 and all(cached)
    assert texts == ["A: fine"] * 4 and (a.requests, b.requests) == (4, 4)


def test_the_same_endpoint_named_by_config_or_environment_is_one_configuration(
    tmp_path: Path, servers: tuple[ChatServer, ChatServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the endpoint came from is recorded, not hashed: the answers depend on the server."""
    a, _ = servers
    db = tmp_path / "e.duckdb"
    monkeypatch.setenv("OPENAI_BASE_URL", a.url)
    from_env, env_manifest, _, _ = _run(_project(tmp_path), db, "env")
    monkeypatch.delenv("OPENAI_BASE_URL")
    named = _project(tmp_path, system=f"base_url: '{a.url}/'")  # a trailing slash, too
    from_config, config_manifest, _, cached = _run(named, db, "config")
    assert env_manifest.requests["base_url_from"] == "OPENAI_BASE_URL"
    assert config_manifest.requests["base_url_from"] == "config"
    assert from_config.config_hash == from_env.config_hash
    assert from_config.cache_hits == 4 and all(cached) and a.requests == 4


def test_a_password_in_openai_base_url_is_never_recorded(
    tmp_path: Path, servers: tuple[ChatServer, ChatServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, _ = servers
    secret = "pw-endpoint-7f3a91c2"
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://gateway-user:{secret}@127.0.0.1:{a.port}/v1")
    db = tmp_path / "e.duckdb"
    summary, manifest, texts, _ = _run(_project(tmp_path), db, "secret")
    assert a.requests == 4 and texts == ["A: fine"] * 4  # it did talk to the named server
    assert manifest.provider.base_url == a.url
    assert secret not in json.dumps(manifest.to_dict())
    assert secret.encode() not in db.read_bytes()
    assert summary.errored == 0


def test_each_transport_connects_where_it_records(monkeypatch: pytest.MonkeyPatch) -> None:
    """The official client reads OPENAI_BASE_URL; the lean transport does not: each records
    (and connects to) what it really uses."""
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.delenv(KEY_ENV, raising=False)
    official = SystemConfig(model="m", transport="openai", api_key_env=KEY_ENV)
    lean = SystemConfig(model="m", transport="lean", api_key_env="EVALKIT_ENDPOINT_SET_KEY")
    monkeypatch.setenv("EVALKIT_ENDPOINT_SET_KEY", "sk-test-not-real")
    assert official.effective_endpoint().url == "http://127.0.0.1:9/v1"
    assert lean.effective_endpoint().url == OPENAI_DEFAULT_BASE_URL
    assert lean.effective_endpoint().source == "default"
    client, lean_client = make_provider(official), make_provider(lean)
    assert str(client._client.base_url) == "http://127.0.0.1:9/v1/"  # type: ignore[attr-defined]
    assert lean_client._base_url == OPENAI_DEFAULT_BASE_URL  # type: ignore[attr-defined]
    asyncio.run(client.aclose())
    asyncio.run(lean_client.aclose())
    python = SystemConfig(provider="python", model="m", function="app:answer")
    assert python.effective_endpoint().url is None


def test_the_judge_cache_keys_on_the_judges_effective_endpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from evalkit.run.judging import judge_client

    config = _project(tmp_path)
    config.write_text(config.read_text() + "judge: {model: judge-1, api_key_env: NO_SUCH_KEY}\n")
    monkeypatch.delenv("NO_SUCH_KEY", raising=False)
    suite = load_suite(config)
    identities = []
    with open_store(tmp_path / "e.duckdb", write=True) as store:
        for port in (9, 10):
            monkeypatch.setenv("OPENAI_BASE_URL", f"http://u:judge-secret@127.0.0.1:{port}/v1")
            client = judge_client(suite, store)
            identities.append(client.provider.identity)  # type: ignore[attr-defined]
            connects_to = str(client.provider.inner._client.base_url)  # type: ignore[attr-defined]
            asyncio.run(client.provider.aclose())
            assert connects_to == f"http://u:judge-secret@127.0.0.1:{port}/v1/"
    assert [i["base_url"] for i in identities] == [
        "http://127.0.0.1:9/v1",
        "http://127.0.0.1:10/v1",
    ]

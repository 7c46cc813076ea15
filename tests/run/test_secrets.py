"""Secrets: an API key set in the environment appears nowhere evalkit writes or prints.

A distinctive fake key goes into the variable the demo suite names (``api_key_env``); the demo is
run, compared and gated through the CLI, and every byte evalkit produced — the DuckDB file (and
every value in every table, since DuckDB compresses strings), manifests, summaries, reports,
executed notebooks, stdout/stderr (the simulator's own output with it) — is searched for it.
Provider error bodies that echo the Authorization header are scrubbed before they are stored.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web
from loopback_support import serving

from evalkit import redact
from evalkit.cli import main
from evalkit.corpus.cases import load_corpus
from evalkit.corpus.suite import load_suite
from evalkit.demo.server import ServerOptions, create_app
from evalkit.errors import ProviderError
from evalkit.redact import redact_secrets, register_secret
from evalkit.run.providers import make_provider
from evalkit.run.runner import RunOptions, run_suite_async
from evalkit.store import open_store

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "corpus" / "evalkit.yaml"
CANARY = "sk-evalkit-canary-7f3a9c2e41d8b5a60e1f"
FRAGMENTS = (CANARY, CANARY[3:], CANARY[-16:])  # the key, without its prefix, its tail


def _leaks(data: bytes | str) -> list[str]:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return [f for f in FRAGMENTS if f in text]


@pytest.fixture()
def demo_url() -> Iterator[str]:
    """The demo simulator's app on a thread of this process: what it prints lands in the same
    captured stdout and stderr as the commands' output, which the test searches."""
    with serving(create_app(ServerOptions(noise=False))) as base_url:
        yield base_url


def test_fake_key_appears_nowhere_after_run_compare_and_gate(
    tmp_path: Path,
    demo_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    base_url = demo_url
    monkeypatch.setenv("EVALKIT_DEMO_KEY", CANARY)
    suite = load_suite(CONFIG, overrides=[f"system.base_url={base_url}"])
    assert suite.config.system.api_key_env == "EVALKIT_DEMO_KEY"
    assert make_provider(suite.config.system)._api_key == CANARY  # the runs really use it

    work = tmp_path / "work"
    work.mkdir()
    db, reports = work / "e.duckdb", work / "reports"
    sets = ["--set", f"system.base_url={base_url}"]
    if suite.config.judge is not None:
        sets += ["--set", f"judge.base_url={base_url}"]
    common = ["--db", str(db)]
    commands = [
        ["run", "--config", str(CONFIG), *common, *sets, "--label", "baseline",
         "--json", str(work / "baseline.json"), "--no-progress"],
        ["run", "--config", str(CONFIG), *common, *sets, "--label", "candidate",
         "--prompt", str(REPO / "corpus" / "prompts" / "v2.md"),
         "--json", str(work / "candidate.json"), "--no-progress"],
        ["compare", "baseline", "candidate", "--config", str(CONFIG), *common,
         "--allow-diff", "prompt", "--json", str(reports / "compare.json"),
         "--html", str(reports / "compare.html"), "--junit", str(reports / "compare.xml")],
        ["gate", "baseline", "candidate", "--config", str(CONFIG), *common,
         "--allow-diff", "prompt", "--out", str(reports)],
    ]  # fmt: skip
    printed = []
    monkeypatch.chdir(work)
    capfd.readouterr()
    for command in commands:  # the CLI entry point, in this process: output captured at the fd
        code = main(command)
        captured = capfd.readouterr()
        expected = (0, 1) if command[0] == "gate" else (0,)
        assert code in expected, (command[0], captured.err[-2000:])
        printed.append(captured.out + captured.err)

    assert not _leaks("\n".join(printed)), "printed (the simulator's output with it)"
    produced = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.suffix == ".ipynb" for p in produced), "the gate executed a notebook"
    assert any(p.suffix == ".html" for p in produced), "reports were written"
    for path in produced:
        assert not _leaks(path.read_bytes()), path
    with open_store(db, read_only=True) as store:
        manifests = store.runs()["manifest"].to_list()
        assert len(manifests) == 2
        for manifest in manifests:
            assert json.loads(manifest)["provider"]["base_url"] == base_url
            assert not _leaks(manifest)
        tables = store.query("SELECT table_name FROM information_schema.tables")["table_name"]
        for table in tables:  # DuckDB compresses strings: read every value back, decompressed
            rows = store.query(f"SELECT * FROM {table}").rows()
            assert rows or table not in {"runs", "outputs", "scores", "cases"}, table
            assert not _leaks(repr(rows)), table


_ECHO_STATUS = 401


def _echo_app() -> web.Application:
    """An endpoint whose error bodies echo the request headers, as some proxies do."""

    async def chat(request: web.Request) -> web.Response:
        await request.read()
        headers = dict(request.headers)
        body = {
            "error": {
                "message": f"Incorrect API key provided: {headers.get('Authorization')}; "
                f"request headers were {headers}",
                "type": "invalid_request_error",
            }
        }
        return web.json_response(body, status=_ECHO_STATUS)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


@pytest.mark.parametrize("transport", ["openai", "lean"])
def test_error_bodies_echoing_the_key_are_scrubbed_before_they_are_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, transport: str
) -> None:
    monkeypatch.setenv("EVALKIT_SECRET_TEST_KEY", CANARY)
    root = tmp_path / "corpus"
    (root / "cases").mkdir(parents=True)
    (root / "cases" / "a.yaml").write_text(
        "- id: c1\n  input: {messages: [{role: user, content: hi}]}\n  expect: [json_valid]\n"
    )
    seen_authorization: list[str] = []

    async def scenario() -> tuple[str, str]:
        app = _echo_app()

        @web.middleware
        async def record(request: web.Request, handler):  # type: ignore[no-untyped-def]
            seen_authorization.append(request.headers.get("Authorization", ""))
            return await handler(request)

        app.middlewares.append(record)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        try:
            (root / "evalkit.yaml").write_text(
                "suite: echo\nsystem: {model: m, base_url: "
                f"'http://{host}:{port}/v1', api_key_env: EVALKIT_SECRET_TEST_KEY, "
                f"transport: {transport}}}\ncache: false\n"
            )
            suite = load_suite(root / "evalkit.yaml")
            corpus = load_corpus(suite.root)
            with open_store(tmp_path / "e.duckdb", write=True) as store:
                summary = await run_suite_async(suite, corpus, store, RunOptions(progress=False))
                error = store.outputs(summary.run_id)["error"][0]
                dump = repr(store.query("SELECT * FROM outputs").rows())
            return error, dump
        finally:
            await runner.cleanup()

    error, dump = asyncio.run(scenario())
    assert seen_authorization == [f"Bearer {CANARY}"]  # the key was sent, and echoed back
    assert error.startswith(f"HTTP {_ECHO_STATUS}") and "[redacted]" in error, error
    assert not _leaks(error) and not _leaks(dump)
    assert not _leaks((tmp_path / "e.duckdb").read_bytes())


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("Authorization: Bearer abc.def-ghi", "Authorization: [redacted]"),
        ("{'authorization': 'Bearer tok123'}", "{'authorization': '[redacted]'}"),
        ('"Authorization": "Basic dXNlcjpwYXNz"', '"Authorization": "[redacted]"'),
        ("x-api-key: abc123secret", "x-api-key: [redacted]"),
        ("api_key=abc123secret&x=1", "api_key=[redacted]&x=1"),
        ("bad key sk-proj-AbC123_xyz-987", "bad key sk-[redacted]"),
        ("Incorrect API key provided: sk-other*****9c2d.", "... provided: sk-[redacted]"),
        ("HTTP 500: The simulator failed (simulated)", None),
        ("timeout after 1s (after 3 attempts)", None),
    ],
)  # fmt: skip
def test_redact_secrets_patterns(text: str, kept: str | None) -> None:
    """Each pattern removes the secret and keeps the text around it (None: nothing to remove)."""
    expected = text if kept is None else kept
    if expected.startswith("... "):
        expected = text[: text.index(expected[4:10])] + expected[4:]
    assert redact_secrets(text) == expected


def test_registered_keys_are_scrubbed_whatever_they_look_like() -> None:
    """A key with no telltale prefix is removed too, once a provider registered it."""
    odd_key = "Zq9-odd-key-without-prefix-41c7"
    assert odd_key in redact_secrets(f"echo {odd_key}")
    register_secret(odd_key)
    error = ProviderError(f"HTTP 403: key {odd_key} is not allowed", retryable=False)
    assert odd_key not in error.cause and odd_key not in str(error)
    assert error.cause == "HTTP 403: key [redacted] is not allowed"


# --- a password in a URL ------------------------------------------------------------------------

URL_SECRET = "SECRETPW"


def _ok_app() -> web.Application:
    async def chat(request: web.Request) -> web.Response:
        await request.read()
        body = {"model": "m", "choices": [{"message": {"content": "{}"}}], "usage": {}}
        return web.json_response(body)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


def test_a_password_in_base_url_is_printed_stored_and_reported_nowhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """``base_url: http://user:SECRETPW@127.0.0.1:PORT/v1`` through ``evalkit run`` (also with
    an "@" in the password, and as replicas beside a dead one), a ``--shard`` run and its
    merge, and a compare writing every report: SECRETPW is in no printed line, no manifest,
    no stored value and no file evalkit wrote.

    The commands run through the CLI's entry point in this process, their output captured at
    the file descriptors (as `test_fake_key_appears_nowhere_after_run_compare_and_gate` does),
    with the secrets registry emptied first: no secret an earlier test registered can redact
    SECRETPW for the code under test, as none could in a fresh ``evalkit`` process.
    """
    monkeypatch.setattr(redact, "_KNOWN_SECRETS", set())
    monkeypatch.setattr(redact, "_ENVIRONMENT_READ", False)
    root, work = tmp_path / "corpus", tmp_path / "work"
    (root / "cases").mkdir(parents=True)
    work.mkdir()
    (root / "cases" / "a.yaml").write_text(
        "".join(
            f"- id: c{i}\n  input: {{messages: [{{role: user, content: q{i}}}]}}\n"
            "  expect: [json_valid]\n"
            for i in range(6)
        )
    )
    with socket.socket() as probe:  # a port nothing listens on: a dead replica
        probe.bind(("127.0.0.1", 0))
        dead = probe.getsockname()[1]
    with serving(_ok_app()) as url:
        netloc = url.removeprefix("http://")
        config = root / "evalkit.yaml"
        config.write_text(
            f"suite: url-secret\nsystem: {{model: m, base_url: 'http://user:{URL_SECRET}@"
            f"{netloc}'}}\ncache: false\n"
        )
        common = ["--config", config, "--db", work / "e.duckdb", "--no-progress"]
        fleet = (
            f"system.base_urls=[http://user:{URL_SECRET}@{netloc}, "
            f"http://user:{URL_SECRET}@127.0.0.1:{dead}/v1]"
        )
        commands = [
            ["run", *common, "--label", "plain", "--json", work / "plain.json"],
            ["run", *common, "--label", "at-sign",
             "--set", f"system.base_url=http://user:x@{URL_SECRET}@{netloc}"],
            ["run", *common, "--label", "fleet", "--set", fleet, "--set", "system.max_retries=2"],
            ["run", *common, "--shard", "1/1", "--run-id", "sharded", "--label", "sharded",
             "--parts", work / "parts"],
            ["runs", "merge", "sharded", "--parts", work / "parts", "--db", work / "e.duckdb"],
            ["compare", "plain", "sharded", "--db", work / "e.duckdb", "--config", config,
             "--json", work / "r.json", "--html", work / "r.html", "--junit", work / "r.xml",
             "--markdown", work / "r.md"],
        ]  # fmt: skip
        printed = []
        monkeypatch.chdir(work)
        capfd.readouterr()
        for command in commands:
            code = main([str(arg) for arg in command])
            captured = capfd.readouterr()
            output = captured.out + captured.err
            assert code == 0, (command[:2], output[-3000:])
            printed.append(output)
    everything = "\n".join(printed)
    assert f"loopback endpoint {url}" in everything  # the note names the endpoint, bare
    assert f"replica http://127.0.0.1:{dead}/v1: " in printed[2]  # and the dead replica
    assert URL_SECRET not in everything, next(p for p in printed if URL_SECRET in p)[-3000:]
    written = [p for p in work.rglob("*") if p.is_file()]
    assert {"e.duckdb", "plain.json", "r.html", "r.md"} <= {p.name for p in written}
    for path in written:
        assert URL_SECRET.encode() not in path.read_bytes(), path
    with open_store(work / "e.duckdb", read_only=True) as store:
        runs = store.runs()
        assert sorted(runs["label"]) == ["at-sign", "fleet", "plain", "sharded"]
        for manifest in runs["manifest"]:
            assert json.loads(manifest)["provider"]["base_url"] == url
        tables = store.query("SELECT table_name FROM information_schema.tables")["table_name"]
        for table in tables:  # DuckDB compresses strings: read every value back, decompressed
            assert URL_SECRET not in repr(store.query(f"SELECT * FROM {table}").rows()), table
        errors = store.query("SELECT count(*) AS n FROM outputs WHERE error IS NOT NULL")["n"]
    assert errors[0] == 0  # every run really answered (the dead replica's were retried)


def test_errors_and_resume_commands_quoting_a_url_print_no_password(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """What the command line echoes back (a ``--set`` in an error, the ``--resume`` command of
    an interrupted run) shows the URL without its userinfo."""
    import argparse

    from evalkit.cli.run import resume_command

    item = f"system.base_urls=http://user:{URL_SECRET}@127.0.0.1:9/v1"  # a list, given a string
    capfd.readouterr()
    assert main(["run", "--config", str(CONFIG), "--set", item]) == 2
    printed = capfd.readouterr()
    assert "--set system.base_urls=http://127.0.0.1:9/v1: invalid value" in printed.err
    assert URL_SECRET not in printed.out + printed.err
    args = argparse.Namespace(
        db="e.duckdb", config=str(CONFIG), overrides=[item.replace("_urls", "_url")], prompt=None
    )
    shown = resume_command(args, "r1")
    assert "system.base_url=http://127.0.0.1:9/v1" in shown and URL_SECRET not in shown

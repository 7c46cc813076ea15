"""Hostile endpoints and model outputs: one bad response never kills a run or poisons the cache,
every wait and every body is bounded, and a key the child tries to steal appears in nothing
stored.

Every test starts its own loopback aiohttp endpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gzip
import json
import socket
import subprocess
import sys
import tempfile
import zlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from aiohttp import web
from loopback_support import serving

from evalkit.cli import main
from evalkit.corpus.cases import load_corpus
from evalkit.corpus.suite import load_suite
from evalkit.redact import redact_known, redact_secrets, register_secret, strip_userinfo
from evalkit.run.runner import RunOptions, RunSummary, run_suite_async
from evalkit.scorers import sandbox
from evalkit.store import open_store

Handler = Callable[[web.Request, str], Awaitable[web.StreamResponse]]
MALFORMED = {
    "c1": {"choices": [{"message": {"content": {"nested": "object"}}}]},
    "c2": {"choices": [{"message": {"content": 42}}]},
    "c3": {"model": 7, "choices": [{"message": {"content": "{}"}}]},
    "c4": {"choices": [{"message": {"content": "{}"}}], "usage": {"prompt_tokens": 1e30}},
    "c5": "not a chat completion",
}


def _ok(text: str) -> dict[str, Any]:
    return {"model": "m", "choices": [{"message": {"content": text}}], "usage": {}}


async def _case_of(request: web.Request) -> str:
    body = await request.json()
    return str(body["messages"][-1]["content"]).removeprefix("q")


def _run(
    tmp_path: Path,
    handler: Handler,
    n_cases: int,
    system: str = "",
    *,
    expect: str = "[json_valid]",
    cache: bool = False,
    env_key: str | None = None,
    options: RunOptions | None = None,
    port: int = 0,
    userinfo: str = "",
) -> tuple[RunSummary, pl.DataFrame, Path]:
    root = tmp_path / "corpus"
    (root / "cases").mkdir(parents=True, exist_ok=True)
    (root / "cases" / "a.yaml").write_text(
        "".join(
            f"- id: c{i}\n  input: {{messages: [{{role: user, content: 'qc{i}'}}]}}\n"
            f"  expect: {expect}\n"
            for i in range(n_cases)
        )
    )
    db, listen_on = tmp_path / "e.duckdb", port

    async def scenario() -> tuple[RunSummary, pl.DataFrame]:
        async def chat(request: web.Request) -> web.StreamResponse:
            return await handler(request, await _case_of(request))

        app = web.Application()
        app.router.add_post("/v1/chat/completions", chat)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", listen_on)
        await site.start()
        host, port = runner.addresses[0][:2]
        key = f", api_key_env: {env_key}" if env_key else ""
        try:
            (root / "evalkit.yaml").write_text(
                f"suite: hostile\nsystem: {{model: m, base_url: 'http://{userinfo}{host}:{port}/v1'"
                f"{key}{', ' + system if system else ''}}}\ncache: {str(cache).lower()}\n"
            )
            suite = load_suite(root / "evalkit.yaml")
            corpus = load_corpus(suite.root)
            with open_store(db, write=True) as store:
                summary = await run_suite_async(
                    suite, corpus, store, options or RunOptions(progress=False)
                )
                return summary, store.outputs(summary.run_id)
        finally:
            await runner.cleanup()

    summary, outputs = asyncio.run(scenario())
    return summary, outputs, db


async def _malformed_or_ok(request: web.Request, case: str) -> web.Response:
    if case in MALFORMED:
        return web.json_response(MALFORMED[case])
    return web.json_response(_ok('{"ok": true}'))


@pytest.mark.parametrize("transport", ["openai", "lean"])
def test_each_malformed_200_is_that_cases_error_and_the_rest_complete(
    tmp_path: Path, transport: str
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    system = f"transport: {transport}"
    _summary, outputs, db = _run(tmp_path, _malformed_or_ok, 10, system, cache=True, port=port)
    errors = dict(zip(outputs["case_id"], outputs["error"], strict=True))
    assert len(errors) == 10
    for case in MALFORMED:
        assert errors[case].startswith("malformed response body (HTTP 200): "), errors[case]
    assert "content is an object, expected a string or null" in errors["c1"]
    assert "content is int" in errors["c2"] and "model is int" in errors["c3"]
    assert "usage.prompt_tokens is 1e+30" in errors["c4"]
    assert "the body is a string" in errors["c5"]
    assert sorted(c for c, e in errors.items() if e is None) == ["c0", "c6", "c7", "c8", "c9"]
    with open_store(db, read_only=True) as store:
        assert store.runs()["status"].to_list() == ["complete"]
        cached = store.query("SELECT response FROM response_cache")["response"].to_list()
    assert len(cached) == 5  # nothing invalid is cached
    # A fresh cached run afterwards succeeds, reading the five good answers from the cache.
    _again, outputs, _ = _run(tmp_path, _malformed_or_ok, 10, system, cache=True, port=port)
    assert outputs["cached"].sum() == 5 and outputs["error"].null_count() == 5


def test_a_lone_surrogate_is_stored_losslessly_escaped(tmp_path: Path) -> None:
    async def handler(request: web.Request, case: str) -> web.Response:
        body = '{"model": "m", "choices": [{"message": {"content": "a\\ud800b \\ud83d\\ude00"}}]}'
        return web.Response(text=body, content_type="application/json")

    _summary, outputs, _ = _run(tmp_path, handler, 2, expect="[{contains: a}]")
    assert outputs["error"].to_list() == [None, None]
    assert outputs["text"].to_list() == ["a\\ud800b \U0001f600"] * 2


def test_retry_after_an_hour_is_a_stored_error_without_waiting(tmp_path: Path) -> None:
    asked: list[str] = []

    async def handler(request: web.Request, case: str) -> web.Response:
        asked.append(case)
        return web.json_response(
            {"error": "slow down"}, status=429, headers={"Retry-After": "3600"}
        )

    _summary, outputs, _ = _run(tmp_path, handler, 2, "max_retries: 3")
    # One request per case: the hour is refused at once, never waited for and retried
    # (a wait would hold the run past the test's timeout).
    assert sorted(asked) == ["c0", "c1"], asked
    error = outputs["error"][0]
    assert error.startswith("HTTP 429") and "asked to wait 3600s" in error, error
    assert "max_retry_after_s = 60s" in error


def test_max_retry_after_s_is_a_suite_setting(tmp_path: Path) -> None:
    async def handler(request: web.Request, case: str) -> web.Response:
        return web.json_response({"error": "slow down"}, status=429, headers={"Retry-After": "5"})

    _summary, outputs, _ = _run(tmp_path, handler, 1, "max_retries: 3, max_retry_after_s: 2")
    error = outputs["error"][0]
    assert "asked to wait 5s" in error and "max_retry_after_s = 2s" in error, error


@pytest.mark.parametrize("transport", ["openai", "lean"])
def test_a_dripping_body_stops_at_the_total_deadline(tmp_path: Path, transport: str) -> None:
    async def handler(request: web.Request, case: str) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.content_length = 10_000
        await response.prepare(request)
        with pytest.raises((ConnectionError, asyncio.CancelledError)):
            for _ in range(200):
                await response.write(b" ")
                await asyncio.sleep(0.5)
        return response

    _summary, outputs, _ = _run(
        tmp_path, handler, 1, f"transport: {transport}, max_retries: 0, timeout_s: 2"
    )
    # The body drips for 100 s: only the total deadline ends it with this error (a per-read
    # timeout never fires, and the end of the body would be a length error).
    assert outputs["error"][0].startswith("timeout after 2s"), outputs["error"][0]


# --- bodies past system.max_response_mb -------------------------------------------------------


@functools.cache
def _gzip_bomb(mib: int = 384) -> bytes:
    """``mib`` MiB of spaces (JSON whitespace), gzipped: about 1/1000 of that on the wire."""
    packer = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    block = b" " * 2**20
    return b"".join([*(packer.compress(block) for _ in range(mib)), packer.flush()])


async def _bomb_endless_or_ok(request: web.Request, case: str) -> web.StreamResponse:
    if case == "c0":
        headers = {"Content-Encoding": "gzip", "Content-Type": "application/json"}
        return web.Response(body=_gzip_bomb(), headers=headers)
    if case == "c1":  # a chunked 200 that never ends: 40 MB/s until the client hangs up
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        with contextlib.suppress(ConnectionError, asyncio.CancelledError):
            for _ in range(2**14):
                await response.write(b" " * 2**20)
                await asyncio.sleep(0.025)
        return response
    return web.json_response(_ok('{"ok": true}'))


def _app(handler: Handler) -> web.Application:
    async def chat(request: web.Request) -> web.StreamResponse:
        return await handler(request, await _case_of(request))

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


# Runs ``evalkit`` (argv[2:]) and writes its exit code and peak RSS (KiB) to argv[1]. A small
# launcher, not this process, forks it: a forked (or vforked) child's ru_maxrss starts at its
# parent's high-water RSS, which exec keeps, so a child of the test process would report the
# test process's own peak. It stops a run that hangs (and so is its only child's reaper).
_LAUNCHER = """
import os, subprocess, sys, time
child = subprocess.Popen(sys.argv[2:])
deadline = time.monotonic() + 300
while (waited := os.wait4(child.pid, os.WNOHANG))[0] == 0:
    if time.monotonic() > deadline:
        child.kill()
    time.sleep(0.05)
with open(sys.argv[1], "w") as out:
    out.write(f"{os.waitstatus_to_exitcode(waited[1])} {waited[2].ru_maxrss}")
"""


def _evalkit_measured(args: list[str], cwd: Path) -> tuple[int, str, float]:
    """``evalkit ARGS`` in a child process: its exit code, its output (stdout and stderr) and
    its own peak RSS in MiB (os.wait4: that child's rusage alone, where RUSAGE_CHILDREN is
    the largest of every child ever waited for)."""
    result = cwd / "measured.txt"
    with tempfile.TemporaryFile() as sink:
        subprocess.run(
            [sys.executable, "-c", _LAUNCHER, result, sys.executable, "-m", "evalkit.cli", *args],
            cwd=cwd, stdout=sink, stderr=subprocess.STDOUT, timeout=400, check=True,
        )  # fmt: skip
        sink.seek(0)
        printed = sink.read().decode(errors="replace")
    code, peak_kib = map(int, result.read_text().split())
    return code, printed, peak_kib / 1024


@pytest.mark.parametrize("transport", ["lean", "openai"])
def test_a_gzip_bomb_and_an_endless_body_are_errors_in_bounded_memory(
    tmp_path: Path, transport: str
) -> None:
    """A real ``evalkit run``: the 384 MiB bomb (about 0.4 MB on the wire) and the endless
    chunked 200 each become that case's stored error at the 32 MB default, the child never
    holds more than a few caps' worth, the other cases pass and nothing bad is cached."""
    root = tmp_path / "corpus"
    (root / "cases").mkdir(parents=True)
    (root / "cases" / "a.yaml").write_text(
        "".join(
            f"- id: c{i}\n  input: {{messages: [{{role: user, content: 'qc{i}'}}]}}\n"
            "  expect: [json_valid]\n"
            for i in range(6)
        )
    )
    _gzip_bomb()  # built before the clock of the child's timeout starts
    with serving(_app(_bomb_endless_or_ok)) as base_url:
        (root / "evalkit.yaml").write_text(
            f"suite: bodies\nsystem: {{model: m, base_url: '{base_url}', transport: {transport}, "
            "max_retries: 0, timeout_s: 8}\ncache: true\n"
        )
        db = tmp_path / "e.duckdb"
        code, printed, peak_mib = _evalkit_measured(
            ["run", "--config", str(root / "evalkit.yaml"), "--db", str(db), "--no-progress"],
            tmp_path,
        )
    assert code == 0, printed
    assert peak_mib < 300, f"peak RSS {peak_mib:.0f} MiB"
    with open_store(db, read_only=True) as store:
        (run_id,) = store.runs()["run_id"].to_list()
        outputs = store.outputs(run_id)
        cached = store.query("SELECT count(*) AS n FROM response_cache")["n"][0]
    errors = dict(zip(outputs["case_id"], outputs["error"], strict=True))
    limit = "response body exceeds system.max_response_mb = 32 MB"
    assert errors.pop("c0") == f"{limit} (decompressed)", printed
    assert errors.pop("c1") == f"{limit} (on the wire)", printed
    assert errors == dict.fromkeys(["c2", "c3", "c4", "c5"]), errors  # the rest are fine
    assert cached == 4  # the four good answers, nothing of the two bodies


@pytest.mark.parametrize("transport", ["lean", "openai"])
def test_compressed_answers_are_read_and_a_compressed_error_body_is_bounded_too(
    tmp_path: Path, transport: str
) -> None:
    """Both transports inflate gzip and deflate answers themselves (under the cap); a 503
    whose body is an 8 MiB bomb is stopped at ``max_response_mb: 1`` like a 200's."""

    async def handler(request: web.Request, case: str) -> web.Response:
        answer = json.dumps(_ok('{"ok": true}')).encode()
        if case == "c0":
            body, headers, status = gzip.compress(answer), {"Content-Encoding": "gzip"}, 200
        elif case == "c1":
            body, headers, status = zlib.compress(answer), {"Content-Encoding": "deflate"}, 200
        else:
            body, headers, status = _gzip_bomb(8), {"Content-Encoding": "gzip"}, 503
        return web.Response(body=body, status=status, headers=headers)

    system = f"transport: {transport}, max_retries: 2, max_response_mb: 1"
    summary, outputs, _ = _run(tmp_path, handler, 3, system)
    assert outputs["error"].to_list() == [
        None,
        None,
        "response body exceeds system.max_response_mb = 1 MB (decompressed)",
    ]
    assert summary.retries == 0  # the server would send the same body again


def test_connection_errors_name_what_went_wrong(tmp_path: Path) -> None:
    async def handler(request: web.Request, case: str) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.content_length = 1000
        await response.prepare(request)
        await response.write(b'{"choi')
        request.transport.close()  # type: ignore[union-attr]
        return response

    _summary, outputs, _ = _run(tmp_path, handler, 1, "max_retries: 0")
    error = outputs["error"][0]
    assert error.startswith("connection error: ") and error != "connection error: Connection error."
    assert "Error" in error.split(": ", 1)[1], error


# --- keys ---------------------------------------------------------------------------------------

CANARY = "custkey-7f3a9c2e41d8b5a60e1faa90"
LEAKS = (CANARY, CANARY[8:], CANARY[-16:])

HOSTILE = {
    "c0": """```python
import os
raise RuntimeError("KEY custkey-****aa90 " + KNOWN + repr(dict(os.environ)))
```""",
    "c1": """```python
import os
seen = []
for name in ("/proc/%d/environ" % os.getppid(), "/proc/1/environ"):
    try:
        seen.append(open(name, "rb").read().decode(errors="replace"))
    except Exception as exc:
        seen.append(repr(exc))
raise RuntimeError(KNOWN + " ".join(seen))
```""",
}


def test_a_key_the_child_goes_after_is_in_nothing_stored_or_rendered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    if sandbox.isolation_problem() is not None:
        pytest.skip(sandbox.isolation_problem() or "")
    monkeypatch.setenv("EVALKIT_HOSTILE_KEY", CANARY)
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "t.py").write_text("def test_x():\n    assert True\n")

    async def handler(request: web.Request, case: str) -> web.Response:
        # The model "knows" the key (an echoing proxy, a prompt leak) and prints it too.
        text = HOSTILE[case].replace("KNOWN", repr(f"{CANARY} sk-evalk****{CANARY[-4:]}"))
        return web.json_response(_ok(text + f"\nAlso: {CANARY} and custkey-****aa90"))

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    for label in ("baseline", "candidate"):
        _, outputs, db = _run(
            tmp_path,
            handler,
            2,
            expect="[{python_tests: {tests: t.py}}]",
            env_key="EVALKIT_HOSTILE_KEY",
            options=RunOptions(progress=False, label=label),
            port=port,
        )
    # Rendered: the terminal report, JSON, HTML, JUnit and Markdown of a compare.
    reports = tmp_path / "reports"
    config = tmp_path / "corpus" / "evalkit.yaml"
    capfd.readouterr()
    code = main(
        ["compare", "baseline", "candidate", "--db", str(db), "--config", str(config),
         "--json", str(reports / "r.json"), "--html", str(reports / "r.html"),
         "--junit", str(reports / "r.xml"), "--markdown", str(reports / "r.md")]
    )  # fmt: skip
    printed = capfd.readouterr()
    assert code in (0, 1), printed.err
    rendered = [printed.out + printed.err, *(p.read_text() for p in sorted(reports.iterdir()))]
    assert len(rendered) == 5 and any("[redacted]" in text for text in rendered[1:])
    assert outputs["error"].to_list() == [None, None], outputs.select("error", "fail_reason").rows()
    with open_store(db, read_only=True) as store:
        reasons = store.query("SELECT reason FROM scores ORDER BY case_id")["reason"].to_list()
        everything = [
            repr(store.query(f"SELECT * FROM {table}").rows())
            for table in store.query("SELECT table_name FROM information_schema.tables")[
                "table_name"
            ]
        ]
    assert reasons[0].startswith("code raised RuntimeError: KEY [redacted] [redacted] sk-"), reasons
    assert reasons[-1].startswith("introspection blocked: /proc/"), reasons
    assert "[redacted]" in outputs["text"][0]
    for text in [*everything, *reasons, *rendered]:
        assert not [leak for leak in LEAKS if leak in text], text[:500]
    assert not [leak for leak in LEAKS if leak.encode() in db.read_bytes()]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("key mykey-Q9v2z7LmXr41aa90 end", "key [redacted] end"),
        ("shown mykey-****aa90 end", "shown [redacted] end"),
        ("shown mykey-Q9v2…aa90 end", "shown [redacted] end"),
        ("shown ****aa90 end", "shown [redacted] end"),
        ("shown mykey-Q9v*** end", "shown [redacted] end"),
        ("markdown **bold** stays", "markdown **bold** stays"),
        ("wait... then go", "wait... then go"),
    ],
)
def test_registered_keys_and_their_masked_forms_are_removed(text: str, expected: str) -> None:
    register_secret("mykey-Q9v2z7LmXr41aa90")
    assert redact_known(text) == expected


def test_a_key_in_a_url_is_a_key() -> None:
    assert strip_userinfo("http://user:s3cr3t-pass-9@host:1/v1") == "http://host:1/v1"
    assert redact_secrets("GET http://user:s3cr3t-pass-9@host/v1 failed") == (
        "GET http://host/v1 failed"
    )
    # the userinfo ends at the last "@" of the authority, as every client reads it
    assert strip_userinfo("http://user:x@s3cr3t@host:1/v1") == "http://host:1/v1"


@pytest.mark.parametrize("transport", ["openai", "lean"])
def test_a_key_in_base_url_is_not_stored_in_the_manifest(tmp_path: Path, transport: str) -> None:
    userinfo = "proxyuser:url-key-3c9e1d77aa@"
    _, _outputs, db = _run(
        tmp_path, _malformed_or_ok, 1, f"transport: {transport}", userinfo=userinfo
    )
    with open_store(db, read_only=True) as store:
        manifest = store.runs()["manifest"][0]
    assert json.loads(manifest)["provider"]["base_url"].startswith("http://127.0.0.1:")
    assert "url-key-3c9e1d77aa" not in manifest
    assert b"url-key-3c9e1d77aa" not in db.read_bytes()


def test_store_writes_scrub_registered_keys(tmp_path: Path) -> None:
    register_secret("Zz-store-boundary-key-0042")
    from evalkit.store.scrub import scrub_json, scrub_outputs

    frame = pl.DataFrame({"text": ["x Zz-store-boundary-key-0042 y"], "error": ["E Zz-****0042"]})
    scrubbed = scrub_outputs(frame)
    assert scrubbed.rows() == [("x [redacted] y", "E [redacted]")]
    hidden = json.dumps({"text": "Zz-store-boundary-key-\u0030042"}, ensure_ascii=True)
    assert "Zz-store" not in scrub_json(hidden.replace("0042", "\\u0030042"))

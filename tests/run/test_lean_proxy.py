"""The lean transport goes through the proxy the environment names (``HTTP_PROXY`` with its
credentials, ``NO_PROXY``), as the official client does, looking it up once per session, and
never hands the proxy the API key as its credentials."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import pytest
from aiohttp import web

from evalkit.corpus.suite import SystemConfig
from evalkit.errors import ProviderError
from evalkit.records import ChatRequest
from evalkit.run.providers import make_provider

UPSTREAM = "http://models.invalid:8000/v1"  # never resolved: only the proxy is reachable


async def _ask_through(proxy_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Any:
    """Two lean requests to ``UPSTREAM`` with ``proxy_env`` set; returns what the proxy saw
    (or the error when no proxy took the request)."""
    seen: list[tuple[str, str, str | None]] = []

    async def proxy(request: web.Request) -> web.Response:
        proxy_credentials = request.headers.get("Proxy-Authorization")
        seen.append((request.method, str(request.url), proxy_credentials))
        return web.json_response({"model": "m", "choices": [{"message": {"content": "hi"}}]})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", proxy)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    for name in ("HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name, value in proxy_env.items():
        monkeypatch.setenv(name, value.format(port=port))
    monkeypatch.setenv("EVALKIT_PROXY_TEST_KEY", "sk-proxy-test-0000")
    system = SystemConfig(
        model="m", base_url=UPSTREAM, transport="lean", api_key_env="EVALKIT_PROXY_TEST_KEY"
    )
    provider = make_provider(system)
    request = ChatRequest(model="m", messages=[{"role": "user", "content": "hello"}])
    try:
        texts = [(await provider.complete(request)).text for _ in range(2)]
        return texts, seen
    except ProviderError as exc:
        return exc, seen
    finally:
        await provider.aclose()
        await runner.cleanup()


def test_requests_go_through_the_environment_proxy_with_its_credentials(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    texts, seen = asyncio.run(
        _ask_through({"HTTP_PROXY": "http://ana:s3cret@127.0.0.1:{port}"}, monkeypatch)
    )
    assert texts == ["hi", "hi"]
    credentials = "Basic " + base64.b64encode(b"ana:s3cret").decode()
    assert seen == [("POST", f"{UPSTREAM}/chat/completions", credentials)] * 2


def test_a_proxy_without_credentials_is_not_sent_the_api_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    texts, seen = asyncio.run(_ask_through({"http_proxy": "http://127.0.0.1:{port}"}, monkeypatch))
    assert texts == ["hi", "hi"]
    assert seen == [("POST", f"{UPSTREAM}/chat/completions", None)] * 2


def test_no_proxy_sends_the_request_straight_to_the_endpoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = {"HTTP_PROXY": "http://127.0.0.1:{port}", "NO_PROXY": "models.invalid"}
    error, seen = asyncio.run(_ask_through(env, monkeypatch))
    assert seen == []  # the proxy was bypassed ...
    assert "connection error" in str(error)  # ... and the unresolvable host refused


def test_an_https_endpoint_tunnels_with_the_proxy_credentials_and_not_the_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The CONNECT the proxy receives carries its own credentials; the API key goes only
    inside the tunnel (here the proxy refuses the tunnel, so the request is an error)."""

    async def scenario() -> tuple[bytes, ProviderError]:
        heads: list[bytes] = []

        async def refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            heads.append(await reader.readuntil(b"\r\n\r\n"))
            writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(refuse, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        for name in ("HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy", "ALL_PROXY"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HTTPS_PROXY", f"http://ana:s3cret@127.0.0.1:{port}")
        monkeypatch.setenv("EVALKIT_PROXY_TEST_KEY", "sk-proxy-test-0000")
        system = SystemConfig(
            model="m",
            base_url="https://models.invalid/v1",
            transport="lean",
            api_key_env="EVALKIT_PROXY_TEST_KEY",
        )
        provider = make_provider(system)
        request = ChatRequest(model="m", messages=[{"role": "user", "content": "hello"}])
        try:
            with pytest.raises(ProviderError) as caught:
                await provider.complete(request)
        finally:
            await provider.aclose()
            server.close()
            await server.wait_closed()
        return heads[0], caught.value

    head, error = asyncio.run(scenario())
    assert head.startswith(b"CONNECT models.invalid:443 HTTP/1.1\r\n")
    credentials = base64.b64encode(b"ana:s3cret")
    assert b"Proxy-Authorization: Basic " + credentials in head
    assert b"sk-proxy-test-0000" not in head
    assert "connection error" in str(error)

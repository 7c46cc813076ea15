"""Any OpenAI-compatible chat endpoint (OpenAI, vLLM, Ollama, llama.cpp server, the demo).

Two transports speak the same protocol (``system.transport``; ``auto``, the default, picks
lean for a named OpenAI-compatible ``base_url`` and the official client for the OpenAI API):

* ``openai``: the official ``AsyncOpenAI`` client: its HTTP stack, auth, headers, timeouts and
  error types. It posts the request body with ``client.post`` and reads the response bytes,
  skipping the params transform and typed response models of ``chat.completions.create``
  (about a third of the client's CPU per call; see bench/).
* ``lean``: one shared aiohttp session posting ``/chat/completions`` directly: about a sixth of
  the official client's CPU per call, for endpoints called hundreds of times per second (see
  bench/). It routes through the proxy the environment names, looked up once per session.

Both send the same request, parse the response with the same function (:func:`_completion`)
and map errors the same way. ``timeout_s`` is a total deadline for one attempt (connecting,
sending and reading the whole body), in both. Neither inflates a body itself: both hand the raw
bytes to :class:`evalkit.run.providers.bodies.BoundedBody`, so ``max_response_mb`` caps every
body (errors and redirects included) on the wire and decompressed, in both.

Every response is validated here, at the boundary: a body that is not a chat completion of the
expected shape (``content`` an object or a number, a numeric ``model``, token counts that are not
plausible integers, ...) is a non-retryable :class:`ProviderError` naming the HTTP status, the
field and what was wrong, with a short snippet of the body: that case stores an error, the run
goes on, and nothing is cached. Text is kept losslessly; the one exception is a lone UTF-16
surrogate (``"\ud800"`` in the JSON), which no UTF-8 store can hold: it is replaced by the six
characters of its escape, ``\ud800``.

The client's own retries are disabled: :func:`evalkit.retries.complete_with_retries`
retries with jitter and honours Retry-After, and counts what it did.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import email.utils
import json
import math
import re
import sys
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from evalkit.errors import ProviderError
from evalkit.records import ChatRequest, Completion, ToolCallRequest
from evalkit.redact import register_secret, strip_userinfo
from evalkit.run.providers.bodies import (
    ACCEPT_ENCODING,
    DEFAULT_MAX_RESPONSE_MB,
    BoundedBody,
    bounded_stream_type,
    read_bounded,
)

if TYPE_CHECKING:
    import openai

RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})
_MAX_TOKENS = 10**9  # a token count above this is not a count
_LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")


class OpenAIProvider:
    """Chat completions against ``base_url`` (None: resolved by
    :func:`evalkit.corpus.suite.resolve_endpoint`, ``OPENAI_BASE_URL`` for the official client,
    else api.openai.com)."""

    name = "openai"

    def __init__(
        self,
        *,
        base_url: str | None,
        api_key: str,
        timeout_s: float = 60.0,
        transport: str = "openai",
        key_is_secret: bool = True,
        max_response_mb: float = DEFAULT_MAX_RESPONSE_MB,
    ) -> None:
        self._transport = transport
        self._timeout_s = timeout_s
        self._max_response_mb = max_response_mb
        if base_url is None:  # resolved here as make_provider does: both transports agree
            from evalkit.corpus.suite import resolve_endpoint

            base_url = resolve_endpoint(None, reads_env=transport == "openai").url
        # Authorization is the Bearer key; URL credentials are dropped (aiohttp refuses both).
        self._base_url = (strip_userinfo(base_url) or "").rstrip("/")
        self._given_base_url = base_url  # the official client's (it strips credentials itself)
        self._api_key = api_key
        if key_is_secret:  # the loopback placeholder is public: scrubbing it would cost, not hide
            register_secret(api_key)  # scrubbed from every ProviderError cause from now on
        userinfo = urlsplit(base_url or "")
        for part in (userinfo.password, userinfo.username):
            if part:  # a key in the URL is a key: never stored, whatever string carries it
                register_secret(unquote(part))
                register_secret(part)
        self._built: openai.AsyncOpenAI | None = None  # the official client, once built
        self._session: Any = None
        self._lean: tuple[dict[str, str], Any, dict[str, str] | None] | None = None

    @property
    def _client(self) -> openai.AsyncOpenAI | None:
        """The official client (None on the lean transport), built on first use: a judge whose
        every verdict is cached (a rescore) never imports openai (1-2 s on a loaded machine)."""
        if self._transport != "openai":
            return None
        if self._built is None:
            import openai  # here, not at the top: the lean transport never pays for the import

            # The body is read under the cap by a response hook (_bound_body), which runs
            # before the client reads a byte of it, for every response: errors and redirects
            # too. The client's own defaults (pool, redirects, proxies from the environment)
            # are kept: DefaultAsyncHttpxClient is the client it would have built.
            http_client = openai.DefaultAsyncHttpxClient(
                headers={"Accept-Encoding": ACCEPT_ENCODING},
                event_hooks={"response": [self._bound_body]},
            )
            # base_url is never None here: the client would read OPENAI_BASE_URL itself, and
            # could talk to another endpoint than the manifest and the cache key name.
            self._built = openai.AsyncOpenAI(
                base_url=self._given_base_url,
                api_key=self._api_key,
                max_retries=0,
                timeout=self._timeout_s,
                http_client=http_client,
            )
        return self._built

    async def complete(self, request: ChatRequest) -> Completion:
        if self._transport == "openai":
            return await self._complete_openai(request)
        return await self._complete_lean(request)

    async def aclose(self) -> None:
        if self._built is not None:
            await self._built.close()
        if self._session is not None:
            await self._session.close()

    # -- official client --------------------------------------------------------------------

    async def _complete_openai(self, request: ChatRequest) -> Completion:
        import openai

        assert self._client is not None
        try:
            # httpx's timeout bounds each read, not the body: a server trickling one byte per
            # half second would never trip it. The deadline covers the whole attempt.
            async with asyncio.timeout(self._timeout_s):
                body = await self._client.post(
                    "/chat/completions", body=_payload(request), cast_to=bytes
                )
        except (openai.APITimeoutError, TimeoutError):
            raise ProviderError(f"timeout after {self._timeout_s:g}s", retryable=True) from None
        except openai.APIConnectionError as exc:
            raise ProviderError(f"connection error: {_cause(exc)}", retryable=True) from None
        except openai.APIStatusError as exc:
            raise _status_error(exc.status_code, exc.response.headers, _first_line(exc)) from None
        return _completion(body, 200)

    async def _bound_body(self, response: Any) -> None:
        """Replace ``response``'s raw stream by the same bytes decoded under the cap; the
        client then reads the decoded body (its own decoder sees no Content-Encoding)."""
        body = BoundedBody(
            response.headers.get("content-encoding"),
            self._max_response_mb,
            response.headers.get("content-length"),
        )
        response.headers.pop("content-encoding", None)
        # httpx or httpx2, whichever this openai version speaks: its responses only read a
        # stream that subclasses its own AsyncByteStream.
        http = sys.modules[type(response).__module__.partition(".")[0]]
        response.stream = bounded_stream_type(http.AsyncByteStream)(response.stream, body)

    # -- lean transport ---------------------------------------------------------------------

    async def _complete_lean(self, request: ChatRequest) -> Completion:
        import asyncio

        import aiohttp

        url = f"{self._base_url}/chat/completions"
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self._timeout_s),
                connector=aiohttp.TCPConnector(limit=0),
                # BoundedBody inflates, under the cap; aiohttp would inflate each chunk whole
                auto_decompress=False,
                headers={"Accept-Encoding": ACCEPT_ENCODING},
            )
            self._lean = _lean_routing(url, self._api_key)
        headers, proxy, tunnel_headers = self._lean or _lean_routing(url, self._api_key)
        try:
            async with self._session.post(
                url,
                json=_payload(request),
                headers=headers,
                proxy=proxy,
                proxy_headers=tunnel_headers,
            ) as response:
                body = await read_bounded(response, self._max_response_mb)
                if response.status >= 400:
                    raise _status_error(
                        response.status, response.headers, body[:200].decode(errors="replace")
                    )
        except TimeoutError:
            raise ProviderError(f"timeout after {self._timeout_s:g}s", retryable=True) from None
        except asyncio.TimeoutError:  # noqa: UP041 - aiohttp may raise the asyncio alias
            raise ProviderError(f"timeout after {self._timeout_s:g}s", retryable=True) from None
        except aiohttp.ClientError as exc:
            raise ProviderError(f"connection error: {_cause(exc)}", retryable=True) from None
        return _completion(body, response.status)


def _lean_routing(url: str, api_key: str) -> tuple[dict[str, str], Any, dict[str, str] | None]:
    """The lean transport's request headers, proxy and CONNECT headers for ``url``, from the
    environment (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``, ``NO_PROXY``; the proxy's
    credentials from its URL or ~/.netrc), as aiohttp's ``trust_env`` and the official client's
    httpx would route it.

    Looked up once per session: with ``trust_env`` aiohttp repeats the lookup, and a ~/.netrc
    read, in a worker thread for every request (two thread hops per request). The key goes in
    each request's headers, never as a session default: aiohttp merges default headers into a
    proxy's and sends their ``Authorization`` to the proxy as ``Proxy-Authorization``. The
    proxy's own credentials go in the CONNECT of an https endpoint, and in the request itself
    of a plain-http one (which the proxy receives whole).

    Examples:
        >>> import os; os.environ["HTTP_PROXY"] = "http://u:p@proxy.local:3128"
        >>> headers, proxy, tunnel = _lean_routing("http://models.local/v1/chat/completions", "k")
        >>> headers, str(proxy), tunnel
        ({'Authorization': 'Bearer k', 'Proxy-Authorization': 'Basic dTpw'}, 'http://proxy.local:3128', None)
        >>> os.environ["NO_PROXY"] = "models.local"
        >>> _lean_routing("http://models.local/v1/chat/completions", "k")
        ({'Authorization': 'Bearer k'}, None, None)
        >>> del os.environ["HTTP_PROXY"], os.environ["NO_PROXY"]
    """  # noqa: E501
    from aiohttp.helpers import get_env_proxy_for_url
    from yarl import URL

    headers = {"Authorization": f"Bearer {api_key}"}
    try:
        proxy, credentials = get_env_proxy_for_url(URL(url))
    except LookupError:
        return headers, None, None
    if credentials is None:
        return headers, proxy, None
    proxy_authorization = {"Proxy-Authorization": credentials.encode()}
    if url.startswith("https:"):
        return headers, proxy, proxy_authorization
    return headers | proxy_authorization, proxy, None


def _completion(body: bytes, status: int = 200) -> Completion:
    """The fields evalkit uses from a ``chat.completion`` response body (both transports),
    validated: every field has the type and range evalkit stores.

    Tool calls without a ``function`` (other tool types) are skipped.

    Raises:
        ProviderError: not retryable: no choices, or a body that is not a chat completion; the
            cause names ``status``, the field and what was wrong, and quotes the body's start.

    Examples:
        >>> body = b'{"model": "m", "choices": [{"message": {"content": "hi"}}], "usage": {}}'
        >>> _completion(body).text, _completion(body).prompt_tokens
        ('hi', 0)
        >>> _completion(b'{"choices": [{"message": {"content": 7}}]}')
        Traceback (most recent call last):
        ...
        evalkit.errors.ProviderError: malformed response body (HTTP 200): choices[0].message.content is int, expected a string or null; body: {"choices": [{"message": {"content": 7}}]}
    """  # noqa: E501
    try:
        return _parse(json.loads(body))
    except _Malformed as exc:
        problem = str(exc)
    except (ValueError, RecursionError) as exc:
        problem = f"not JSON ({type(exc).__name__}: {_first_line(exc)[:80]})"
    snippet = " ".join(body[:120].decode("utf-8", "replace").split())
    raise ProviderError(
        f"malformed response body (HTTP {status}): {problem}; body: {snippet}", retryable=False
    )


class _Malformed(Exception):
    """One thing wrong with a response body (the message names the field)."""


def _parse(data: Any) -> Completion:
    if not isinstance(data, dict):
        raise _Malformed(f"the body is {_kind(data)}, expected an object")
    choices = data.get("choices")
    if not isinstance(choices, list):
        raise _Malformed(f"choices is {_kind(choices)}, expected a list")
    if not choices:
        raise ProviderError("response had no choices", retryable=False)
    choice = _field(choices[0], "choices[0]", dict, "an object")
    message = _field(choice.get("message"), "choices[0].message", dict, "an object")
    content = _optional(message.get("content"), "choices[0].message.content", str)
    calls = []
    raw_calls = _optional(message.get("tool_calls"), "choices[0].message.tool_calls", list) or []
    for i, call in enumerate(raw_calls):
        where = f"choices[0].message.tool_calls[{i}]"
        call = _field(call, where, dict, "an object")
        function = call.get("function")
        if function is None:
            continue
        function = _field(function, f"{where}.function", dict, "an object")
        name = _field(function.get("name"), f"{where}.function.name", str, "a string")
        arguments = _optional(function.get("arguments"), f"{where}.function.arguments", str)
        call_id = _optional(call.get("id"), f"{where}.id", str)
        calls.append(ToolCallRequest(_text(call_id or ""), _text(name), _text(arguments or "{}")))
    usage = _optional(data.get("usage"), "usage", dict) or {}
    model = _optional(data.get("model"), "model", str)
    finish = _optional(choice.get("finish_reason"), "choices[0].finish_reason", str)
    fingerprint = data.get("system_fingerprint")
    return Completion(
        text=None if content is None else _text(content),
        tool_calls=tuple(calls),
        prompt_tokens=_tokens(usage.get("prompt_tokens"), "usage.prompt_tokens"),
        completion_tokens=_tokens(usage.get("completion_tokens"), "usage.completion_tokens"),
        model=None if model is None else _text(model),
        finish_reason=None if finish is None else _text(finish),
        system_fingerprint=_text(fingerprint) if isinstance(fingerprint, str) else None,
    )


def _field(value: Any, where: str, kind: type, expected: str) -> Any:
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise _Malformed(f"{where} is {_kind(value)}, expected {expected}")
    return value


def _optional(value: Any, where: str, kind: type) -> Any:
    if value is None or isinstance(value, kind):
        return value
    names: dict[type, str] = {str: "a string", list: "a list", dict: "an object"}
    raise _Malformed(f"{where} is {_kind(value)}, expected {names[kind]} or null")


def _tokens(value: Any, where: str) -> int:
    if value is None:
        return 0
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value) if abs(value) <= _MAX_TOKENS else value
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= _MAX_TOKENS:
        shown = repr(value)[:40]
        raise _Malformed(f"{where} is {shown}, expected an integer in [0, {_MAX_TOKENS:.0e}]")
    return value


def _text(value: str) -> str:
    """``value`` with each lone surrogate replaced by its six-character escape (``\\udXXX``),
    so it can be stored as UTF-8; every other character is kept."""
    return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", value)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )


def _payload(request: ChatRequest) -> dict[str, Any]:
    payload: dict[str, Any] = {"model": request.model, "messages": request.messages}
    payload.update({k: v for k, v in request.sampling.items() if v is not None})
    if request.tools:
        payload["tools"] = request.tools
    return payload


def _status_error(status: int, headers: Any, detail: str) -> ProviderError:
    retry_after = _retry_after(headers)
    return ProviderError(
        f"HTTP {status}: {detail}"[:300],
        retryable=status in RETRYABLE_STATUS or status >= 500,
        retry_after=retry_after,
    )


def _retry_after(headers: Any) -> float | None:
    """Seconds the server asked us to wait: ``retry-after-ms``, or ``Retry-After`` as seconds
    or as an HTTP date; None when absent or unreadable.

    Examples:
        >>> _retry_after({"retry-after": "1.5"}), _retry_after({"retry-after-ms": "250"})
        (1.5, 0.25)
    """
    if headers is None:
        return None
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return max(0.0, (when - dt.datetime.now(dt.UTC)).total_seconds())


def _first_line(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0][:200]


def _cause(exc: BaseException) -> str:
    """What went wrong under a transport's generic wrapper ("Connection error."): the innermost
    exception's type and first line, e.g. ``RemoteProtocolError: peer closed connection``."""
    inner = exc
    while inner.__cause__ is not None or inner.__context__ is not None:
        inner = inner.__cause__ or inner.__context__  # type: ignore[assignment]
    if inner is exc:
        return f"{type(exc).__name__}: {_first_line(exc)}"
    return f"{type(inner).__name__}: {_first_line(inner)}"

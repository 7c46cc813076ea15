"""Any OpenAI-compatible chat endpoint (OpenAI, vLLM, Ollama, llama.cpp server, the demo).

Two transports speak the same protocol:

* ``openai`` (default, the supported path): the official ``AsyncOpenAI`` client: its HTTP stack,
  auth, headers, timeouts and error types. It posts the request body with ``client.post`` and
  reads the response bytes, skipping the params transform and typed response models of
  ``chat.completions.create`` (about a third of the client's CPU per call; see bench/).
* ``lean``: one shared aiohttp session posting ``/chat/completions`` directly: about a sixth of
  the official client's CPU per call, for fast local endpoints called hundreds of times per
  second (see bench/).

Both send the same request, parse the response with the same function (:func:`_completion`)
and map errors the same way.

The client's own retries are disabled: :func:`evalkit.retries.complete_with_retries`
retries with jitter and honours Retry-After, and counts what it did.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import json
from typing import TYPE_CHECKING, Any

from evalkit.errors import ProviderError
from evalkit.records import ChatRequest, Completion, ToolCallRequest
from evalkit.redact import register_secret

if TYPE_CHECKING:
    import openai

RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})


class OpenAIProvider:
    """Chat completions against ``base_url`` (None = api.openai.com)."""

    name = "openai"

    def __init__(
        self,
        *,
        base_url: str | None,
        api_key: str,
        timeout_s: float = 60.0,
        transport: str = "openai",
    ) -> None:
        self._transport = transport
        self._timeout_s = timeout_s
        self._base_url = (base_url or "https://api.openai.com/v1").rstrip("/")
        self._api_key = api_key
        register_secret(api_key)  # scrubbed from every ProviderError cause from now on
        self._client: openai.AsyncOpenAI | None = None
        self._session: Any = None
        if transport == "openai":
            import openai  # here, not at the top: the lean transport never pays for the import

            self._client = openai.AsyncOpenAI(
                base_url=base_url, api_key=api_key, max_retries=0, timeout=timeout_s
            )

    async def complete(self, request: ChatRequest) -> Completion:
        if self._client is not None:
            return await self._complete_openai(request)
        return await self._complete_lean(request)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()
        if self._session is not None:
            await self._session.close()

    # -- official client --------------------------------------------------------------------

    async def _complete_openai(self, request: ChatRequest) -> Completion:
        import openai

        assert self._client is not None
        try:
            body = await self._client.post(
                "/chat/completions", body=_payload(request), cast_to=bytes
            )
        except openai.APITimeoutError:
            raise ProviderError(f"timeout after {self._timeout_s:g}s", retryable=True) from None
        except openai.APIConnectionError as exc:
            raise ProviderError(f"connection error: {_first_line(exc)}", retryable=True) from None
        except openai.APIStatusError as exc:
            raise _status_error(exc.status_code, exc.response.headers, _first_line(exc)) from None
        return _completion(body)

    # -- lean transport ---------------------------------------------------------------------

    async def _complete_lean(self, request: ChatRequest) -> Completion:
        import asyncio

        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self._timeout_s),
                connector=aiohttp.TCPConnector(limit=0),
                headers={"Authorization": f"Bearer {self._api_key}"},
            )
        url = f"{self._base_url}/chat/completions"
        try:
            async with self._session.post(url, json=_payload(request)) as response:
                body = await response.read()
                if response.status >= 400:
                    raise _status_error(
                        response.status, response.headers, body[:200].decode(errors="replace")
                    )
        except TimeoutError:
            raise ProviderError(f"timeout after {self._timeout_s:g}s", retryable=True) from None
        except asyncio.TimeoutError:  # noqa: UP041 - aiohttp may raise the asyncio alias
            raise ProviderError(f"timeout after {self._timeout_s:g}s", retryable=True) from None
        except aiohttp.ClientError as exc:
            raise ProviderError(f"connection error: {_first_line(exc)}", retryable=True) from None
        return _completion(body)


def _completion(body: bytes) -> Completion:
    """The fields evalkit uses from a ``chat.completion`` response body (both transports).

    Tool calls without a ``function`` (other tool types) are skipped.

    Raises:
        ProviderError: not retryable: no choices, or a body that is not a chat completion.

    Examples:
        >>> body = b'{"model": "m", "choices": [{"message": {"content": "hi"}}], "usage": {}}'
        >>> _completion(body).text, _completion(body).prompt_tokens
        ('hi', 0)
    """
    try:
        data = json.loads(body)
        choices = data["choices"]
        if not choices:
            raise ProviderError("response had no choices", retryable=False)
        choice = choices[0]
        message = choice["message"]
        calls = tuple(
            ToolCallRequest(
                c.get("id") or "", c["function"]["name"], c["function"].get("arguments") or "{}"
            )
            for c in message.get("tool_calls") or ()
            if c.get("function") is not None
        )
        usage = data.get("usage") or {}
        return Completion(
            text=message.get("content"),
            tool_calls=calls,
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
            model=data.get("model"),
            finish_reason=choice.get("finish_reason"),
        )
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        raise ProviderError("malformed response body", retryable=False) from None


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

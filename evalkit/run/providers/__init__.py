"""Providers: the system under test behind one interface (``complete(ChatRequest)``)."""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import threading
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from evalkit.errors import ConfigError, ProviderError
from evalkit.records import ChatRequest, Completion, Provider

if TYPE_CHECKING:  # config imports cases, which imports scorers, which import providers.base
    from evalkit.corpus.suite import JudgeConfig, SystemConfig

__all__ = [
    "ChatRequest",
    "Completion",
    "Provider",
    "ProviderError",
    "make_provider",
    "prefetch_transport",
]


def transport_module(system: SystemConfig) -> str | None:
    """The HTTP client module the system's requests will import: ``aiohttp`` for the lean
    transport, ``openai`` for the official client, None for a python system."""
    if system.provider != "openai":
        return None
    return "aiohttp" if system.resolved_transport() == "lean" else "openai"


def prefetch_transport(system: SystemConfig) -> threading.Thread | None:
    """Start importing the system's HTTP client in a thread; the thread, or None when there
    is nothing to import (a python system, or the module is imported already).

    The import (aiohttp: much of a short run's start-up) would otherwise start at the first
    request, after the corpus is loaded and the run recorded; begun here it runs while the main
    thread waits on the store's writes and syncs (DuckDB releases the GIL), and the first
    request's own ``import`` waits on the module's import lock until it is complete. Nothing is
    sent: only modules are imported. A failure is left to that ``import`` to report.

    Not a daemon: a run refused while the import is under way (a bad corpus) exits once the
    import is complete, never with a thread still importing while the interpreter finalizes
    (with a daemon thread, one refused run in testing ended in SIGSEGV at exit).
    """
    module = transport_module(system)
    if module is None or module in sys.modules:
        return None
    thread = threading.Thread(target=_import_quietly, args=(module,), name="evalkit-prefetch")
    thread.start()
    return thread


def _import_quietly(module: str) -> None:
    with contextlib.suppress(Exception):  # the request path imports it again and says why
        importlib.import_module(module)


def make_provider(system: SystemConfig | JudgeConfig) -> Provider:
    """Build the provider a suite (or judge) config names. Keys come from the environment only."""
    if system.provider == "python":
        from evalkit.run.providers.python_callable import PythonProvider

        return PythonProvider(system.function or "")
    if getattr(system, "base_urls", None):  # replicas of one model: least in flight first
        from evalkit.run.replicas import ReplicaRouter

        return ReplicaRouter(
            [
                (
                    r.url,
                    make_provider(system.model_copy(update={"base_urls": [], "base_url": r.url})),
                    r.max_in_flight,
                )
                for r in system.replicas  # type: ignore[union-attr]
            ]
        )
    api_key = api_key_for(system)
    from evalkit.run.providers.bodies import DEFAULT_MAX_RESPONSE_MB
    from evalkit.run.providers.openai_api import OpenAIProvider

    # The endpoint the manifest records and the cache keys on, resolved once and handed to the
    # client explicitly: the official client never reads OPENAI_BASE_URL behind our back.
    endpoint = system.effective_endpoint()
    provider = OpenAIProvider(
        base_url=endpoint.url,
        api_key=api_key,
        timeout_s=system.timeout_s,
        transport=system.resolved_transport(),
        key_is_secret=api_key != PLACEHOLDER_KEY,
        # a judge has no such setting: its bodies are bounded by the default
        max_response_mb=getattr(system, "max_response_mb", DEFAULT_MAX_RESPONSE_MB),
    )
    if api_key != PLACEHOLDER_KEY:
        return provider
    variable = system.api_key_env or "OPENAI_API_KEY"
    if (variable, endpoint.recorded) not in _NOTED:
        _NOTED.add((variable, endpoint.recorded))
        print(
            f"evalkit: note: {variable} is not set; sending the placeholder key "
            f"{PLACEHOLDER_KEY!r} to the loopback endpoint {endpoint.recorded}",
            file=sys.stderr,
            flush=True,
        )
    return _PlaceholderKeyed(provider, variable)


_NOTED: set[tuple[str, str | None]] = set()  # (variable, endpoint) already named this process
#: What a loopback endpoint gets when ``api_key_env`` names an unset variable.
PLACEHOLDER_KEY = "evalkit-local-no-key"


class _PlaceholderKeyed:
    """A provider sent the placeholder key: a 401/400/403 it gets names the unset variable."""

    def __init__(self, inner: Provider, variable: str) -> None:
        self._inner = inner
        self._variable = variable
        self.name = getattr(inner, "name", "openai")

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    async def complete(self, request: ChatRequest) -> Completion:
        try:
            return await self._inner.complete(request)
        except ProviderError as exc:
            if str(exc).startswith(("HTTP 401", "HTTP 400", "HTTP 403")):
                raise ProviderError(
                    f"{exc} (sent the placeholder key {PLACEHOLDER_KEY!r}: {self._variable} is "
                    "not set; set it to the endpoint's key)",
                    retryable=exc.retryable,
                    retry_after=exc.retry_after,
                ) from None
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()


def api_key_for(system: SystemConfig | JudgeConfig) -> str:
    """The API key from the variable named by ``api_key_env``; a placeholder for loopback."""
    key = os.environ.get(system.api_key_env or "", "") if system.api_key_env else ""
    if key:
        return key
    endpoint = system.effective_endpoint()  # OPENAI_BASE_URL may name the loopback endpoint
    host = urlparse(endpoint.url or "").hostname or ""
    if system.provider == "demo" or host in {"127.0.0.1", "localhost", "::1"}:
        return PLACEHOLDER_KEY
    raise ConfigError(
        f"no API key: set the environment variable {system.api_key_env or 'OPENAI_API_KEY'} "
        f"(system.api_key_env) for {endpoint.recorded} ({_named_by(endpoint.source)})"
    )


def _named_by(source: str | None) -> str:
    return {"config": "base_url", "OPENAI_BASE_URL": "from OPENAI_BASE_URL"}.get(
        source or "", "the OpenAI API"
    )

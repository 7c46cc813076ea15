"""Providers: the system under test behind one interface (``complete(ChatRequest)``)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from evalkit.errors import ConfigError, ProviderError
from evalkit.records import ChatRequest, Completion, Provider

if TYPE_CHECKING:  # config imports cases, which imports scorers, which import providers.base
    from evalkit.corpus.suite import JudgeConfig, SystemConfig

__all__ = ["ChatRequest", "Completion", "Provider", "ProviderError", "make_provider"]


def make_provider(system: SystemConfig | JudgeConfig) -> Provider:
    """Build the provider a suite (or judge) config names. Keys come from the environment only."""
    if system.provider == "python":
        from evalkit.run.providers.python_callable import PythonProvider

        return PythonProvider(system.function or "")
    api_key = api_key_for(system)
    from evalkit.run.providers.openai_api import OpenAIProvider

    transport = getattr(system, "transport", "openai")
    return OpenAIProvider(
        base_url=system.base_url,
        api_key=api_key,
        timeout_s=system.timeout_s,
        transport=transport,
    )


def api_key_for(system: SystemConfig | JudgeConfig) -> str:
    """The API key from the variable named by ``api_key_env``; a placeholder for loopback."""
    key = os.environ.get(system.api_key_env or "", "") if system.api_key_env else ""
    if key:
        return key
    host = urlparse(system.base_url or "").hostname or ""
    if system.provider == "demo" or host in {"127.0.0.1", "localhost", "::1"}:
        return "evalkit-local-no-key"
    raise ConfigError(
        f"no API key: set the environment variable {system.api_key_env or 'OPENAI_API_KEY'} "
        f"(system.api_key_env) for {system.base_url or 'the OpenAI API'}"
    )

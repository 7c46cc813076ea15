"""The user's own application as the system under test: ``package.module:function``.

The function receives the rendered chat messages and keyword context, and returns either a
string (the final answer) or a dict with ``text`` and optionally ``tool_calls``
(``[{"name": ..., "arguments": {...}}]``), ``prompt_tokens`` and ``completion_tokens``.
It may be a coroutine function; a plain function runs in a worker thread. An exception it raises
is stored as an error (never a pass or a fail).

Examples:
    >>> def answer(messages, **context):                     # doctest: +SKIP
    ...     return my_app.reply(messages[-1]["content"])
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evalkit.errors import ConfigError, ProviderError
from evalkit.records import ChatRequest, Completion, ToolCallRequest


def load_callable(spec: str) -> Callable[..., Any]:
    """Import ``module:function`` (the current directory is importable)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"system.function {spec!r}: expected 'package.module:function'")
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            f"system.function {spec!r}: cannot import {module_name!r}: {exc}"
        ) from None
    target: Any = module
    for part in attr.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise ConfigError(f"system.function {spec!r}: {module_name} has no {attr!r}")
    if not callable(target):
        raise ConfigError(f"system.function {spec!r} is not callable")
    return target


class PythonProvider:
    name = "python"

    def __init__(self, spec: str) -> None:
        self._fn = load_callable(spec)
        self._is_async = inspect.iscoroutinefunction(self._fn)

    async def complete(self, request: ChatRequest) -> Completion:
        context = {"model": request.model, "tools": request.tools, **request.sampling}
        try:
            if self._is_async:
                result = await self._fn(request.messages, **context)
            else:
                result = await asyncio.to_thread(self._fn, request.messages, **context)
        except Exception as exc:  # the user's app failed: an error, never a verdict
            raise ProviderError(f"{type(exc).__name__}: {exc}"[:300], retryable=False) from None
        return _to_completion(result)

    async def aclose(self) -> None:
        return None


def _to_completion(result: Any) -> Completion:
    if isinstance(result, str) or result is None:
        return Completion(text=result)
    if not isinstance(result, dict):
        raise ProviderError(
            f"function returned {type(result).__name__}; expected str or dict", retryable=False
        )
    calls = tuple(
        ToolCallRequest(
            str(c.get("id", f"call_{i}")),
            str(c["name"]),
            c["arguments"]
            if isinstance(c.get("arguments"), str)
            else json.dumps(c.get("arguments", {})),
        )
        for i, c in enumerate(result.get("tool_calls") or ())
    )
    return Completion(
        text=result.get("text"),
        tool_calls=calls,
        prompt_tokens=int(result.get("prompt_tokens", 0)),
        completion_tokens=int(result.get("completion_tokens", 0)),
        model=result.get("model"),
    )

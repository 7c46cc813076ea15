"""The user's own application as the system under test: ``package.module:function``.

The function receives the rendered chat messages and keyword context (``model``, ``tools``:
the tool schemas offered or None, ``documents``: the case's ``fixtures.documents`` as written,
and the sampling parameters ``temperature``, ``top_p``, ``seed``, ``max_tokens``; accept
``**context`` so new keys never break it), and returns either a
string (the final answer) or a dict with ``text`` and optionally ``tool_calls``
(``[{"name": ..., "arguments": {...}}]``), ``prompt_tokens`` and ``completion_tokens``.
It may be a coroutine function; a plain function runs in a worker thread. An exception it raises
is stored as an error (never a pass or a fail).

The manifest and the cache key carry a fingerprint of the function's module file, so an edit
is never answered from the cache; within one process (a notebook) a module evalkit imported is
re-imported when its file changed since, so the code that answers is the code that was hashed.

Examples:
    >>> def answer(messages, **context):                     # doctest: +SKIP
    ...     return my_app.reply(messages[-1]["content"])
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import inspect
import json
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
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
        module = _fresh(module)
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


#: sha256 of each module file as evalkit last imported it (module name -> digest).
_LOADED: dict[str, str] = {}


def _fresh(module: ModuleType) -> ModuleType:
    """``module``, re-imported if its source file changed since evalkit last imported it."""
    path = getattr(module, "__file__", None)
    if not path or not Path(path).is_file():
        return module
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    if _LOADED.get(module.__name__, digest) != digest:
        cached = getattr(module, "__cached__", None)  # byte code is checked by mtime and size
        if cached:  # only: an edit within the same second could otherwise run the old code
            Path(cached).unlink(missing_ok=True)
        module = importlib.reload(module)
    _LOADED[module.__name__] = digest
    return module


class PythonProvider:
    name = "python"

    def __init__(self, spec: str) -> None:
        self._fn = load_callable(spec)
        self._is_async = inspect.iscoroutinefunction(self._fn)

    async def complete(self, request: ChatRequest) -> Completion:
        context = {
            "model": request.model,
            "tools": request.tools,
            "documents": list(request.documents),
            **request.sampling,
        }
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

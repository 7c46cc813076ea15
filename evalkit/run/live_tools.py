"""Live tools: the seam where a ``kind: live`` configuration answers an agent's tool calls.

A suite may name Python callables for its tools (``tools: {lookup_order: myapp.tools:lookup_order}``
in ``evalkit.yaml``). In a ``kind: live`` configuration the runner asks them instead of the
case's frozen fixtures: each is called with the call's arguments as keywords (a coroutine
function is awaited, a plain one runs in a worker thread) and must return JSON-serializable data.
A tool the suite does not name is still served from the fixtures. A live tool that raises makes
that output an error (never a pass or a fail). Such a run is an end-to-end measurement of the
system and its services as they are today: its manifest says ``kind: live`` (and hashes the tool
names under ``tools.live``), its summary carries a LIVE warning, and it is reported only —
:func:`refuse_live` keeps it from being promoted as a baseline, compared or gated.
``evalkit fixtures record`` freezes what it was answered (:mod:`evalkit.run.fixture_recording`).

Examples:
    >>> import asyncio
    >>> live = LiveTools({"echo": "builtins:dict"}, {"echo": dict})
    >>> asyncio.run(answer_tool_call(live, {}, "echo", '{"order_id": "8812"}')).response
    {'order_id': '8812'}
    >>> asyncio.run(answer_tool_call(None, {"echo": {"ok": True}}, "echo", "{}")).response
    {'ok': True}
    >>> is_live({"kind": "live"}), is_live({"kind": "fixtures"}), is_live({})
    (True, False, False)
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalkit.corpus.suite import Suite
from evalkit.errors import ConfigError, EvalkitError
from evalkit.fixtures import ServedCall, serve_tool_call
from evalkit.run_manifest import RunManifest, as_manifest

__all__ = [
    "LiveToolError",
    "LiveTools",
    "answer_tool_call",
    "is_live",
    "live_tools_for",
    "load_live_tools",
    "parse_arguments",
    "refuse_live",
]


class LiveToolError(EvalkitError):
    """A live tool raised, or answered something that is not JSON."""

    def __init__(self, name: str, arguments: dict[str, Any], problem: str) -> None:
        self.name = name
        self.arguments = arguments
        super().__init__(f"live tool {name} failed: {' '.join(problem.split())}"[:300])


@dataclass(frozen=True)
class LiveTools:
    """The suite's live tools: ``specs`` as written (name → ``module:function``), imported."""

    specs: dict[str, str]
    functions: Mapping[str, Callable[..., Any]] = field(repr=False, compare=False)

    def answers(self, name: str) -> bool:
        return name in self.functions

    async def call(self, name: str, arguments: dict[str, Any]) -> Any:
        """The live answer to ``name(**arguments)``, as JSON data.

        Raises:
            LiveToolError: the tool raised or returned something JSON cannot carry.
        """
        function = self.functions[name]
        try:
            if inspect.iscoroutinefunction(function):
                result = await function(**arguments)
            else:
                result = await asyncio.to_thread(function, **arguments)
        except Exception as exc:  # the service failed: an error, never a verdict
            raise LiveToolError(name, arguments, f"{type(exc).__name__}: {exc}") from None
        try:
            # a round trip: what is recorded is exactly what the model was shown
            return json.loads(json.dumps(result))
        except (TypeError, ValueError) as exc:
            raise LiveToolError(name, arguments, f"answer is not JSON data: {exc}") from None


def load_live_tools(suite: Suite) -> LiveTools:
    """Import every tool of the suite's ``tools:`` (the config's directory and the current one
    are importable).

    Raises:
        ConfigError: no ``tools:``, or one that cannot be imported or is not callable.
    """
    specs = dict(suite.config.tools)
    if not specs:
        raise ConfigError(
            f"{suite.path}: no live tools: name them under tools: (lookup_order: "
            "'myapp.tools:lookup_order')"
        )
    for directory in (str(Path.cwd()), str(suite.root)):
        if directory not in sys.path:
            sys.path.insert(0, directory)
    return LiveTools(specs, {name: _load(suite.path, name, spec) for name, spec in specs.items()})


def live_tools_for(suite: Suite) -> LiveTools | None:
    """The live tools a run of ``suite`` answers with: None unless ``kind: live``."""
    return load_live_tools(suite) if suite.config.kind == "live" else None


def _load(config: Path, name: str, spec: str) -> Callable[..., Any]:
    module_name, _, attr = spec.partition(":")
    where = f"{config}: tools.{name} {spec!r}"
    try:
        target: Any = importlib.import_module(module_name.strip())
    except ImportError as exc:
        raise ConfigError(f"{where}: cannot import {module_name!r}: {exc}") from None
    for part in attr.strip().split("."):
        target = getattr(target, part, None)
        if target is None:
            raise ConfigError(f"{where}: {module_name} has no {attr!r}")
    if not callable(target):
        raise ConfigError(f"{where} is not callable")
    return target


def parse_arguments(raw_arguments: str) -> dict[str, Any]:
    """A tool call's JSON arguments as a mapping, as the fixtures read them.

    Examples:
        >>> parse_arguments('{"order_id": "1"}'), parse_arguments("not json")
        ({'order_id': '1'}, {'_unparsed': 'not json'})
    """
    try:
        arguments = json.loads(raw_arguments) if raw_arguments else {}
    except json.JSONDecodeError:
        return {"_unparsed": raw_arguments}
    return arguments if isinstance(arguments, dict) else {"_value": arguments}


async def answer_tool_call(
    live: LiveTools | None, fixtures: dict[str, Any], name: str, raw_arguments: str
) -> ServedCall:
    """The answer to one tool call: from the live tool when ``live`` names it, else from the
    case's ``fixtures`` (:func:`evalkit.fixtures.serve_tool_call`).

    Raises:
        FixtureMiss: not a live tool, and no fixture covers the call.
        LiveToolError: the live tool failed.
    """
    if live is None or not live.answers(name):
        return serve_tool_call(fixtures, name, raw_arguments)
    arguments = parse_arguments(raw_arguments)
    return ServedCall(name, arguments, await live.call(name, arguments))


def is_live(manifest: RunManifest | Mapping[str, Any]) -> bool:
    """Whether a run's manifest (or its stored JSON) is of a ``kind: live`` configuration."""
    return as_manifest(manifest).is_live


def refuse_live(manifest: RunManifest, run_id: str, action: str) -> None:
    """Refuse a live run where evidence must be reproducible (``action``: "promoted as a
    baseline", "compared or gated").

    Raises:
        ConfigError: one line naming the run and what to do instead.
    """
    if not manifest.is_live:
        return
    tools = ", ".join(sorted((manifest.tools or {}).get("live") or {})) or "live tools"
    raise ConfigError(
        f"run {run_id} is a live run (kind: live, {tools} answered live): it is reported only, "
        f"never {action}; freeze its answers with `evalkit fixtures record {run_id}` and use a "
        "run of the fixture configuration"
    )

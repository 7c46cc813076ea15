"""Shared pytest fixtures. Keep each fixture small and documented.

Everything a test reads lives inside this repository (``tests/test_self_contained.py`` checks):
the published judge-agreement data is ``data/pandalm`` and ``data/llmbar``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from evalkit.demo.server import DemoServer, start_demo_server
from evalkit.judges import llmbar as llmbar_set
from evalkit.judges import published
from evalkit.records import ChatRequest, Completion

REPO = Path(__file__).resolve().parents[1]

# The suite fails if a process a test started outlives the session (tests/process_guard.py).
pytest_plugins = ["process_guard"]


@pytest.fixture(scope="module")
def demo_server() -> Iterator[DemoServer]:
    """A noise-free demo simulator on a free loopback port, shared by one test module.

    Tests that count requests call ``demo_server.reset_stats()`` first.
    """
    with start_demo_server(noise=False) as server:
        yield server


@pytest.fixture
def demo_server_factory() -> Iterator[Callable[..., DemoServer]]:
    """Start simulators with custom options (``start_demo_server`` keywords); all stopped after."""
    servers: list[DemoServer] = []

    def make(**options: Any) -> DemoServer:
        server = start_demo_server(**options)
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()


# --- published judge-agreement data (shipped in data/) ----------------------------------------


@pytest.fixture(scope="session")
def llmbar_root() -> Path:
    """The shipped LLMBar copy (``data/llmbar``); a missing copy fails, it never skips."""
    root = REPO / "data" / "llmbar"
    if not (root / "items.jsonl").is_file():
        pytest.fail(f"LLMBar copy missing at {root}: it ships with the repository")
    assert llmbar_set.llmbar_dir() == root
    return root


@pytest.fixture(scope="session")
def pandalm_root() -> Path:
    """The shipped PandaLM test set (``data/pandalm``)."""
    root = REPO / "data" / "pandalm"
    assert published.pandalm_dir() == root
    return root


# --- a judge provider answering from a script -------------------------------------------------


class ScriptedProvider:
    """A provider answering every request with ``answer(request)``; records the requests."""

    name = "scripted"

    def __init__(self, answer: Callable[[ChatRequest], str]) -> None:
        self.answer = answer
        self.requests: list[ChatRequest] = []

    async def complete(self, request: ChatRequest) -> Completion:
        self.requests.append(request)
        return Completion(text=self.answer(request))

    async def aclose(self) -> None:
        return None


@pytest.fixture
def scripted_provider() -> type[ScriptedProvider]:
    """``scripted_provider(answer)``: a provider whose reply text is ``answer(request)``.

    ``provider.requests`` lists what it was asked; pass it to ``JudgeClient`` as a judge.
    """
    return ScriptedProvider

"""Shared pytest fixtures. Keep each fixture small and documented."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from evalkit.demo.server import DemoServer, start_demo_server


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

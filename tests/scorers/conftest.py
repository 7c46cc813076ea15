"""Fixtures of the scorer tests: a loopback listener that counts who reached it."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest


class Listener:
    """A non-blocking TCP listener on 127.0.0.1; ``connections()`` counts (and closes) what
    connected since the last call — what sandboxed code must never reach."""

    def __init__(self) -> None:
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(8)
        self.socket.setblocking(False)
        self.port: int = self.socket.getsockname()[1]

    def connections(self) -> int:
        count = 0
        while True:
            try:
                client, _ = self.socket.accept()
            except BlockingIOError:
                return count
            client.close()
            count += 1


@pytest.fixture
def listener() -> Iterator[Listener]:
    server = Listener()
    yield server
    server.socket.close()

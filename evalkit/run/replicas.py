"""Several replicas of one self-hosted model (``system.base_urls``): least-in-flight routing.

Each request goes to the replica with the fewest requests in flight among those below their
own cap (``max_in_flight``); when every replica is at its cap the request waits for the first
one to free up. Ties go to the replica listed first. A retry is routed afresh, so a replica
that answered 503 is not asked again by force. On the Ray engine each worker process routes
its own requests this way; the shared budget caps requests in flight across workers.

Examples:
    >>> from evalkit.run.providers.python_callable import PythonProvider
    >>> a, b = PythonProvider("json:dumps"), PythonProvider("json:dumps")
    >>> ReplicaRouter([("http://a/v1", a, 4), ("http://b/v1", b, None)]).in_flight
    {'http://a/v1': 0, 'http://b/v1': 0}
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from evalkit.records import ChatRequest, Completion, Provider


class ReplicaRouter:
    """A provider spreading requests over replicas, fewest in flight first."""

    name = "replicas"

    def __init__(self, replicas: Sequence[tuple[str, Provider, int | None]]) -> None:
        if not replicas:
            raise ValueError("ReplicaRouter needs at least one replica")
        self._urls = [url for url, _, _ in replicas]
        self._providers = [provider for _, provider, _ in replicas]
        self._caps = [cap for _, _, cap in replicas]
        self._busy = [0] * len(replicas)
        self.served = [0] * len(replicas)  # requests sent to each replica
        self._freed: asyncio.Condition | None = None

    @property
    def in_flight(self) -> dict[str, int]:
        return dict(zip(self._urls, self._busy, strict=True))

    @property
    def served_by(self) -> dict[str, int]:
        return dict(zip(self._urls, self.served, strict=True))

    def _pick(self) -> int | None:
        best = None
        for index, busy in enumerate(self._busy):
            cap = self._caps[index]
            if cap is not None and busy >= cap:
                continue
            if best is None or busy < self._busy[best]:
                best = index
        return best

    async def complete(self, request: ChatRequest) -> Completion:
        if self._freed is None:
            self._freed = asyncio.Condition()
        async with self._freed:
            while (index := self._pick()) is None:
                await self._freed.wait()
            self._busy[index] += 1
            self.served[index] += 1
        try:
            return await self._providers[index].complete(request)
        finally:
            async with self._freed:
                self._busy[index] -= 1
                self._freed.notify()

    async def aclose(self) -> None:
        for provider in self._providers:
            await provider.aclose()

"""The response cache, keyed by who answers (provider, effective endpoint, function, snapshot,
and the system's code fingerprint, version and index) and exactly what was asked (model,
rendered messages, tools, sampling, replay index).

The runner prefetches the keys of a whole run in one query and writes new entries with each
batch; :class:`CachedProvider` wraps any provider for one-off calls (model judges, rescoring)
so an unchanged judge request is answered from the store with zero model calls. The team's
shared cache (lookups that fall back to it, a run's entries published to it) is
:mod:`evalkit.run.shared_cache`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from evalkit.corpus.suite import Suite
from evalkit.records import ChatRequest, Completion, Provider, canonical_json
from evalkit.run_manifest import RunManifest
from evalkit.store import Store

#: Version of the runner's cache entries (completion + the latency and cost it had when
#: produced); part of every key, so entries of an older layout are never read as this one.
CACHE_ENTRY_VERSION = 2
#: A :class:`CachedProvider` writes its new answers once it holds this many, or once the
#: oldest is WRITE_INTERVAL_S old (as the runner's batch writer does), and the rest on close.
WRITE_ROWS = 256
WRITE_INTERVAL_S = 0.5


def cache_key(identity: dict[str, Any], request: ChatRequest, replay: int) -> str:
    """sha256 over who answers (``identity``) and exactly what was asked.

    Examples:
        >>> req = ChatRequest("m", [{"role": "user", "content": "hi"}], {"temperature": 0})
        >>> cache_key({"provider": "openai"}, req, 0) == cache_key({"provider": "openai"}, req, 1)
        False
    """
    payload = {
        **identity,
        "model": request.model,
        "messages": request.messages,
        "tools": request.tools,
        "sampling": request.sampling,
        "replay": replay,
    }
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()


def system_cache_identity(suite: Suite, manifest: RunManifest) -> dict[str, Any]:
    """Who answers, for the cache key: provider, the effective endpoint (``OPENAI_BASE_URL``
    resolved, as the manifest records it), function, pinned snapshot, and the system's code
    fingerprint, version and index (from the manifest), so an edit to any of them is a cache
    miss (fields a suite leaves unset are left out of the key)."""
    system = suite.config.system
    # The endpoint the manifest records: after OPENAI_BASE_URL, never a password.
    recorded = manifest.provider
    base_url = recorded.base_url if recorded is not None else system.effective_endpoint().recorded
    identity: dict[str, Any] = {
        "provider": system.provider,
        "base_url": base_url,
        "function": system.function,
        "entry": CACHE_ENTRY_VERSION,
    }
    described = manifest.system or {}
    extra = {
        "snapshot": system.snapshot,
        "code": described.get("code_fingerprint"),
        "version": described.get("version"),
        "index": described.get("index"),
        # a python system's repository outside the corpus, and its declared variables
        "repo": (described.get("repo") or {}).get("digest"),
        "env": described.get("env"),
    }
    identity.update({k: v for k, v in extra.items() if v is not None})
    return identity


class CachedProvider:
    """A provider whose answers are stored and re-used (when ``enabled``), for one-off calls
    (model judges, rescoring) whose requests are not known before the run.

    Three things keep it off the event loop's critical path. A query per call and a
    transaction per answer, on the loop, held it for 7 of a judge-heavy run's 17 s (1,000
    cases, c=32, profiled) and made a rescore of 1,000 cached verdicts spend 5.8 s in them;
    bench/bench_judge.py has the figures before and after.

    * **lookups are batched**: the keys of every call waiting while a lookup is in flight are
      asked in the next one, in one store query (a rescore asks a whole chunk at once; a run
      asks as the answers arrive). :attr:`lookups` counts the queries;
    * **answers are written in batches**: kept in memory (and served from there) until
      :data:`WRITE_ROWS` are held or the oldest is :data:`WRITE_INTERVAL_S` old, then written
      in one transaction with the next lookup, and the rest on :meth:`aclose`. A killed run
      loses the unwritten ones (its judge scores are stored with its outputs all the same): a
      rescore asks those again;
    * **the store is used from one thread of its own**, so the loop goes on sending and
      reading while the run's writer holds the store for a batch or the file is reopened.

    ``max_in_flight`` bounds the calls to ``inner`` in flight (None: no bound), not the
    lookups: a rescore can start every call of a chunk and only the misses wait for a slot.
    """

    def __init__(
        self,
        inner: Provider,
        store: Store,
        identity: dict[str, Any],
        enabled: bool = True,
        max_in_flight: int | None = None,
    ) -> None:
        self.inner = inner
        self.name = getattr(inner, "name", "cached")
        self.store = store
        self.identity = identity
        self.enabled = enabled
        self.hits = 0
        self.lookups = 0  # store queries asked (each answers every key waiting for it)
        self.writes = 0  # transactions writing answers
        self._slots = asyncio.Semaphore(max_in_flight) if max_in_flight else None
        self._waiting: dict[str, list[asyncio.Future[str | None]]] = {}
        self._unwritten: dict[str, str] = {}  # answers not yet handed to a write
        self._writing: dict[str, str] = {}  # answers in the write in flight
        self._oldest_unwritten: float | None = None
        self._sync: asyncio.Task[None] | None = None
        self._thread: ThreadPoolExecutor | None = None

    async def complete(self, request: ChatRequest) -> Completion:
        if not self.enabled:
            return await self._ask(request)
        key = cache_key(self.identity, request, 0)
        hit = await self._lookup(key)
        if hit is not None:
            self.hits += 1
            return Completion.from_json(json.loads(hit))
        completion = await self._ask(request)
        if not self._unwritten:
            self._oldest_unwritten = time.monotonic()
        self._unwritten[key] = json.dumps(completion.to_json())
        if self._write_due():
            self._start_sync()
        return completion

    async def aclose(self) -> None:
        """Write the answers not yet stored, then close ``inner``."""
        try:
            if self._sync is not None and not self._sync.done():
                await asyncio.wait([self._sync])  # the lookup or write in flight
            if self._unwritten:
                entries, self._unwritten = self._unwritten, {}
                await self._in_thread(self._exchange, entries, [])
        finally:
            if self._thread is not None:
                self._thread.shutdown(wait=True)
                self._thread = None
            await self.inner.aclose()

    async def _ask(self, request: ChatRequest) -> Completion:
        if self._slots is None:
            return await self.inner.complete(request)
        async with self._slots:
            return await self.inner.complete(request)

    async def _lookup(self, key: str) -> str | None:
        held = self._unwritten.get(key) or self._writing.get(key)
        if held is not None:  # asked earlier in this session, not yet in the store
            return held
        future: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(key, []).append(future)
        self._start_sync()
        return await future

    def _write_due(self) -> bool:
        if not self._unwritten:
            return False
        assert self._oldest_unwritten is not None
        age = time.monotonic() - self._oldest_unwritten
        return len(self._unwritten) >= WRITE_ROWS or age >= WRITE_INTERVAL_S

    def _start_sync(self) -> None:
        if self._sync is None or self._sync.done():
            self._sync = asyncio.get_running_loop().create_task(self._run_sync())

    async def _run_sync(self) -> None:
        """Ask what is waiting, and write what is due, until nothing is; one query at a time,
        so the keys asked meanwhile go together in the next."""
        await asyncio.sleep(0)  # lookups asked in this turn of the loop join the first query
        while self._waiting or self._write_due():
            waiting, self._waiting = self._waiting, {}
            entries: dict[str, str] = {}
            oldest = self._oldest_unwritten
            if self._write_due():
                entries, self._unwritten = self._unwritten, {}
                self._oldest_unwritten = None
            self._writing = entries
            try:
                found = await self._in_thread(self._exchange, entries, list(waiting))
            except BaseException as exc:
                # The answers are kept for the next write (close writes them or raises); the
                # callers waiting get the store's error, as a query of their own would.
                self._unwritten = {**entries, **self._unwritten}
                self._oldest_unwritten = oldest if entries else self._oldest_unwritten
                for futures in waiting.values():
                    for future in futures:
                        if not future.done():
                            future.set_exception(exc)
                if isinstance(exc, Exception):
                    return
                raise
            finally:
                self._writing = {}
            for key, futures in waiting.items():
                for future in futures:
                    if not future.done():  # a cancelled caller's future is done
                        future.set_result(found.get(key))

    def _exchange(self, entries: dict[str, str], keys: list[str]) -> dict[str, str]:
        """In the provider's thread: write ``entries``, then look ``keys`` up."""
        if entries:
            self.store.cache_put(entries)
            self.writes += 1
        if not keys:
            return {}
        self.lookups += 1
        return self.store.cache_get(keys)

    async def _in_thread(self, fn: Any, *args: Any) -> Any:
        if self._thread is None:
            self._thread = ThreadPoolExecutor(1, thread_name_prefix="evalkit-cached-provider")
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)

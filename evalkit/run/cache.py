"""The response cache, keyed by who answers (provider, effective endpoint, function, snapshot,
and the system's code fingerprint, version and index) and exactly what was asked (model,
rendered messages, tools, sampling, replay index).

The runner prefetches the keys of a whole run in one query and writes new entries with each
batch; :class:`CachedProvider` wraps any provider for one-off calls (model judges, rescoring)
so an unchanged judge request is answered from the store with zero model calls. With a shared
store configured, :func:`with_shared_cache` makes lookups ask the team's cache for what the
local one lacks (:class:`SharedCacheStore`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from evalkit.corpus.suite import Suite
from evalkit.records import ChatRequest, Completion, Provider, canonical_json
from evalkit.store import Store

if TYPE_CHECKING:
    from evalkit.store.shared import SharedStore

#: Version of the runner's cache entries (completion + the latency and cost it had when
#: produced); part of every key, so entries of an older layout are never read as this one.
CACHE_ENTRY_VERSION = 2


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


def system_cache_identity(suite: Suite, manifest: dict[str, Any]) -> dict[str, Any]:
    """Who answers, for the cache key: provider, the effective endpoint (``OPENAI_BASE_URL``
    resolved, as the manifest records it), function, pinned snapshot, and the system's code
    fingerprint, version and index (from the manifest), so an edit to any of them is a cache
    miss (fields a suite leaves unset are left out of the key)."""
    system = suite.config.system
    # The endpoint the manifest records: after OPENAI_BASE_URL, never a password.
    recorded = manifest.get("provider") or {}
    base_url = (
        recorded["base_url"] if "base_url" in recorded else system.effective_endpoint().recorded
    )
    identity: dict[str, Any] = {
        "provider": system.provider,
        "base_url": base_url,
        "function": system.function,
        "entry": CACHE_ENTRY_VERSION,
    }
    described = manifest.get("system") or {}
    extra = {
        "snapshot": system.snapshot,
        "code": described.get("code_fingerprint"),
        "version": described.get("version"),
        "index": described.get("index"),
    }
    identity.update({k: v for k, v in extra.items() if v is not None})
    return identity


class CachedProvider:
    """A provider whose answers are stored and re-used (when ``enabled``)."""

    def __init__(
        self, inner: Provider, store: Store, identity: dict[str, Any], enabled: bool = True
    ) -> None:
        self.inner = inner
        self.name = getattr(inner, "name", "cached")
        self.store = store
        self.identity = identity
        self.enabled = enabled
        self.hits = 0

    async def complete(self, request: ChatRequest) -> Completion:
        key = cache_key(self.identity, request, 0)
        if self.enabled:
            hit = self.store.cache_get([key]).get(key)
            if hit is not None:
                self.hits += 1
                return Completion.from_json(json.loads(hit))
        completion = await self.inner.complete(request)
        if self.enabled:
            self.store.cache_put({key: json.dumps(completion.to_json())})
        return completion

    async def aclose(self) -> None:
        await self.inner.aclose()


class SharedCacheStore:
    """The local store, whose response-cache lookups fall back to the team's shared store:
    the one seam through which a run asks what the team already asked (the runner's
    prefetch and each later tool-loop step call ``cache_get``). Everything else is the
    local store's own. A shared hit is kept in the local cache too, so a resume or a rescore
    reads it locally; new answers go to the local cache as ever, and ``evalkit push``
    publishes them.
    """

    def __init__(self, local: Store, shared: SharedStore) -> None:
        self.local = local
        self.shared = shared
        self.shared_hits = 0  # entries the shared store answered (the local one had not)

    def cache_get(self, keys: Iterable[str]) -> dict[str, str]:
        wanted = list(dict.fromkeys(keys))
        found = self.local.cache_get(wanted)
        missing = [key for key in wanted if key not in found]
        if missing:
            remote = self.shared.cache_get(missing)
            if remote:
                self.local.cache_put(remote)
                self.shared_hits += len(remote)
                found.update(remote)
        return found

    def __getattr__(self, name: str) -> Any:
        return getattr(self.local, name)


def with_shared_cache(store: Store, suite: Suite) -> Store | SharedCacheStore:
    """``store``, asking the shared store's cache first when the suite names one
    (``store: {shared: URI}``); ``store`` itself otherwise or with the cache off."""
    uri = suite.config.store.get("shared")
    if not uri or not suite.config.cache:
        return store
    from evalkit.store.shared import open_shared_store

    return SharedCacheStore(store, open_shared_store(uri, source=f"{suite.path}: store.shared"))

"""The team's shared response cache, seen from a run: lookups that ask the shared store for
what the local cache lacks, and the entries a run asked published to it once it ends.

:func:`with_shared_cache` wraps a run's local store (:class:`SharedCacheStore`);
:func:`publish_new_cache` publishes what a local run asked, :func:`publish_run_cache` what a
merged run (a Ray run's driver) cached, and a shard's chunks hold theirs in an
:class:`EntryBuffer` until the shard publishes once. An unreachable shared store degrades to
the local cache, warned, never a failed run. Keys and the local cache: :mod:`evalkit.run.cache`.
Who published an entry and which entries a run may take: :mod:`evalkit.run.cache_provenance`
(the shared key folds in what the endpoint reports it serves, :func:`shared_cache_key`).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol, cast

from evalkit.corpus.suite import Suite
from evalkit.run_manifest import RunManifest
from evalkit.store import Store

if TYPE_CHECKING:
    from evalkit.run.summary import RunSummary
    from evalkit.store.history_queries import CaseCounts
    from evalkit.store.history_tally import TalliedHistory
    from evalkit.store.shared import SharedStore


class LocalCache(Protocol):
    """The two calls of a local store that the shared cache wraps (a shard's sink and an
    :class:`EntryBuffer` have only these)."""

    def cache_get(self, keys: Iterable[str]) -> dict[str, str]: ...
    def cache_put(self, entries: dict[str, str]) -> None: ...


class SharedCacheStore:
    """The local store, whose response-cache lookups fall back to the team's shared store,
    and which publishes to the shared store what the run asked: the one seam through which
    a run shares its cache (the runner's prefetch and each later tool-loop step call
    ``cache_get``, its writer and the judge's :class:`CachedProvider` call ``cache_put``).
    Everything else is the local store's own.

    * **Lookups**: what the local cache lacks is asked of the shared one, under keys folded
      with what this run's endpoint reports it serves; an entry is taken only from a recorded
      publisher, and not when another host published it for a loopback endpoint. A shared
      hit is kept in the local cache too, so a resume or a rescore reads it locally; the run's
      summary counts them (``shared_cache``), and those of another host are a warning.
    * **Publishing**: ``cache_put`` writes locally as ever and notes the keys (the answers
      the run asked the model, never those the shared store served it); :meth:`publish`,
      called once the run has ended, appends those entries the shared cache lacks, read
      back from the local cache as stored (scrubbed), in commits of ``CACHE_BATCH_ROWS``.
      Two jobs publishing one key at once leave it once (each commit re-reads the keys).
      A publish that leaves the shared cache past ``COMPACT_AT_FILES`` data files compacts
      it into one (:mod:`evalkit.store.shared.compaction`), said in its line.
    * **An unreachable store degrades the cache, not the run**: a store that cannot be
      opened (``shared`` None), or whose lookup fails once the run started, is warned
      about once on stderr (naming it and the cause) and the run goes on with the local
      cache; the run's finish records the warning in its manifest (``warnings``), and
      nothing is published. ``evalkit push RUN`` publishes later.

    Examples:
        >>> class Local(dict):  # the two calls of a store the wrapper uses
        ...     def cache_get(self, keys): return {k: self[k] for k in keys if k in self}
        ...     def cache_put(self, entries): self.update(entries)
        >>> team = SharedCacheStore(Local(), None, where="sqlite:///team.db", cause="refused",
        ...                         warn=print)
        shared store sqlite:///team.db is unreachable (refused): the run uses the local ...
        >>> team.cache_put({"k1": "{}"}); team.cache_get(["k1", "k2"])
        {'k1': '{}'}
        >>> team.publish("r1").failure
        'shared store sqlite:///team.db: 1 new ... `evalkit push r1` publishes them'
    """

    def __init__(
        self,
        local: Store | LocalCache,
        shared: SharedStore | None,
        *,
        where: str | None = None,
        cause: str | None = None,
        warn: Callable[[str], None] | None = None,
        probe: Callable[[], dict[str, Any] | None] | None = None,
        manifest: RunManifest | None = None,
    ) -> None:
        # What it holds beyond the two cache calls (a run's manifest and finish) is asked of
        # it by name, as __getattr__ forwards the rest.
        self.local: Any = local
        self.shared = shared
        self.where = shared.uri.shown if shared is not None else (where or "shared store")
        self.shared_hits = 0  # entries the shared store answered (the local one had not)
        self.foreign_hits = 0  # of those, entries another host published
        self.foreign_hosts: set[str] = set()
        self.refused: dict[str, int] = {}  # entries not taken, by why (cache_provenance)
        self._probe = probe  # what the run's endpoint says it is (None: a python system)
        self._reported: tuple[dict[str, Any] | None] | None = None  # asked once, lazily
        self._manifest = manifest  # the run's, for a sink that has no store (a shard)
        self.caveats: list[str] = []  # warnings for the run's manifest and summary
        self._warn = warn or _warn_on_stderr
        self._lock = threading.Lock()
        self._asked: dict[str, None] = {}  # keys of the answers this run asked (ordered)
        self._lost: str | None = None  # why lookups stopped asking the shared store
        if shared is None:
            self._lose(
                f"shared store {self.where} is unreachable ({cause or 'not opened'}): the run "
                "uses the local response cache only and publishes nothing"
            )
        elif shared.lost is not None:  # an earlier chunk of this process lost it: warned
            self._lost = shared.lost

    def cache_get(self, keys: Iterable[str]) -> dict[str, str]:
        wanted = list(dict.fromkeys(keys))
        found = self.local.cache_get(wanted)
        missing = [key for key in wanted if key not in found]
        if missing and self.shared is not None and self._lost is None:
            try:
                shared_keys = {self.shared_key(key): key for key in missing}
                published = {
                    shared_keys[shared_key]: entry
                    for shared_key, entry in self.shared.cache_get_published(shared_keys).items()
                }
            except Exception as exc:  # any failure of the store: the run goes on locally
                self._lose(
                    f"shared store {self.where} failed during the run ({failure_cause(exc)}):"
                    " later lookups use the local response cache only and the run publishes "
                    "nothing"
                )
                return found
            remote = self._trusted(published)
            if remote:
                self.local.cache_put(remote)
                self.shared_hits += len(remote)
                found.update(remote)
        return found

    def shared_key(self, key: str) -> str:
        """The shared cache's key for local cache key ``key``: the same where the endpoint
        reports nothing, else folded with what it reports (``/models``), so the answers of
        two servers met at one URL never share a key (:func:`shared_cache_key`)."""
        return shared_cache_key(key, self.reported())

    def reported(self) -> dict[str, Any] | None:
        """What this run's endpoint says it serves (its ``/models`` entry), asked once."""
        if self._reported is None:
            self._reported = (self._probe() if self._probe is not None else None,)
        return self._reported[0]

    def _trusted(self, published: dict[str, tuple[str, str | None]]) -> dict[str, str]:
        """The entries of ``published`` this run may take (:func:`cache_provenance.refusal`),
        counted by publisher host; the others counted by why they were not taken."""
        from evalkit.run.cache_provenance import (
            Consumer,
            publisher_host,
            refusal,
            this_host,
            this_job,
        )

        if not published:
            return {}
        me = Consumer(this_host(), self.reported(), this_job())
        taken: dict[str, str] = {}
        with self._lock:
            for key, (response, publisher) in published.items():
                why = refusal(publisher, me)
                if why is not None:
                    self.refused[why] = self.refused.get(why, 0) + 1
                    continue
                taken[key] = response
                host = publisher_host(publisher)
                if host != me.host:
                    self.foreign_hits += 1
                    self.foreign_hosts.add(str(host))
        return taken

    def cache_put(self, entries: dict[str, str]) -> None:
        self.local.cache_put(entries)
        with self._lock:
            self._asked.update(dict.fromkeys(entries))

    @property
    def asked(self) -> int:
        """How many entries the run asked that are not published yet."""
        return len(self._asked)

    def asked_entries(self) -> dict[str, str]:
        """The entries the run asked and has not published, as the local cache holds them."""
        with self._lock:
            keys = list(self._asked)
        return self.local.cache_get(keys)

    def forget_asked(self) -> None:
        """Publish nothing of what was asked so far (its entries are gone or handed on)."""
        with self._lock:
            self._asked.clear()

    def publish(self, run_id: str | None = None, *, batch_rows: int | None = None) -> CachePublish:
        """Append this run's new cache entries to the shared cache (those it lacks), once
        the run has ended; idempotent (published keys are not noted again). Never raises: a
        failure is warned about (and kept in :attr:`caveats`) and returned as ``failure``.
        ``run_id`` names the run in the warning's `evalkit push` hint."""
        from evalkit.store.shared.store import CACHE_BATCH_ROWS

        started = time.perf_counter()
        with self._lock:
            keys = list(self._asked)
        if not keys:
            return CachePublish(
                where=self.where, asked=0, added=0, present=0, commits=0, conflicts=0, wall_s=0.0
            )
        push = f"`evalkit push {run_id}`" if run_id else "`evalkit push RUN`"
        if self.shared is None or self._lost is not None:
            failure = (
                f"shared store {self.where}: {len(keys)} new response-cache entries not "
                f"published: it was unreachable during the run; {push} publishes them"
            )  # for the summary: stderr had the warning when the store was lost
            return self._failed(keys, failure, started, warn=False)
        try:
            entries = {self.shared_key(k): v for k, v in self.local.cache_get(keys).items()}
            done = self.shared.cache_put(
                entries, batch_rows=batch_rows or CACHE_BATCH_ROWS,
                publisher=self._publisher(run_id),
            )  # fmt: skip
        except Exception as exc:
            failure = (
                f"shared store {self.where}: {len(keys)} new response-cache entries not "
                f"published ({failure_cause(exc)}); the run is stored locally, {push} "
                "publishes them"
            )
            return self._failed(keys, failure, started)
        with self._lock:
            for key in keys:
                self._asked.pop(key, None)
        compaction = done.compact_failure
        if done.compacted is not None:
            compaction = (
                f"compacted the cache from {done.compacted.files_before} data files into "
                f"{done.compacted.files_after} ({done.compacted.wall_s:.2f} s)"
            )
        return CachePublish(
            where=self.where,
            asked=len(keys),
            added=done.added,
            present=done.present,
            commits=done.commits,
            conflicts=done.conflicts,
            wall_s=time.perf_counter() - started,
            compaction=compaction,
        )

    def _publisher(self, run_id: str | None) -> str:
        """This host as the publisher of ``run_id``'s entries (JSON)."""
        from evalkit.run.cache_provenance import publisher_of

        manifest = self._manifest
        if manifest is None and run_id is not None and hasattr(self.local, "manifest"):
            manifest = self.local.manifest(run_id)
        return publisher_of(run_id, manifest, self.reported()).to_json()

    def provenance(self) -> dict[str, Any]:
        """What the shared cache served this run: entries taken, of them those another host
        published (and which hosts), and entries not taken by why."""
        return {
            "served": self.shared_hits,
            "from_other_hosts": self.foreign_hits,
            "other_hosts": sorted(self.foreign_hosts),
            "not_taken": dict(sorted(self.refused.items())),
        }

    def finish_run(
        self,
        run_id: str,
        status: str,
        summary: dict[str, Any],
        *,
        warnings: Sequence[str] | None = None,
        tallied: TalliedHistory | None = None,
    ) -> CaseCounts | None:
        """The local store's finish, with this wrapper's caveats (an unreachable store, the
        answers another machine's cache served) added to the run's manifest warnings and
        what the shared cache served to its summary (``shared_cache``); what it returns."""
        summary = {**summary, "shared_cache": self.provenance()}
        if self.foreign_hits:
            hosts = ", ".join(sorted(self.foreign_hosts))
            caveat = (
                f"{self.foreign_hits} answers came from another machine's response cache "
                f"(published by {hosts} to {self.where}); `--no-cache` asks them again"
            )
            if caveat not in self.caveats:
                self.caveats.append(caveat)
        if self.caveats:
            if warnings is None:
                warnings = list(self.local.manifest(run_id).warnings)
            warnings = [*warnings, *(c for c in self.caveats if c not in warnings)]
        return self.local.finish_run(run_id, status, summary, warnings=warnings, tallied=tallied)

    def _lose(self, caveat: str) -> None:
        """Stop asking the shared store (this wrapper, and later ones over the same store
        in this process), warned once."""
        with self._lock:
            if self._lost is not None:
                return
            self._lost = caveat
            self.caveats.append(caveat)
        if self.shared is not None:
            self.shared.lost = caveat
        self._warn(caveat)

    def _failed(
        self, keys: list[str], failure: str, started: float, *, warn: bool = True
    ) -> CachePublish:
        with self._lock:
            first = failure not in self.caveats
            if first:
                self.caveats.append(failure)
        if first and warn:
            self._warn(failure)
        return CachePublish(
            where=self.where,
            asked=len(keys),
            added=0,
            present=0,
            commits=0,
            conflicts=0,
            wall_s=time.perf_counter() - started,
            failure=failure,
        )

    def __getattr__(self, name: str) -> Any:
        return getattr(self.local, name)


def shared_cache_key(key: str, reported: dict[str, Any] | None) -> str:
    """``key`` folded with what the endpoint reported it serves (None: ``key`` itself).

    Examples:
        >>> shared_cache_key("k1", None)
        'k1'
        >>> shared_cache_key("k1", {"id": "m", "owned_by": "a"}) != shared_cache_key(
        ...     "k1", {"id": "m", "owned_by": "b"})
        True
    """
    if reported is None:
        return key
    import hashlib

    from evalkit.records import canonical_json

    return hashlib.sha256(f"{key}\0{canonical_json(reported)}".encode()).hexdigest()


@dataclass(frozen=True, kw_only=True)
class CachePublish:
    """What :meth:`SharedCacheStore.publish` did: new entries the run asked, how many the
    shared cache took and already held, in how many commits (and commits retried after a
    concurrent writer's), how long it took, and why it failed (None: it did not)."""

    where: str
    asked: int
    added: int
    present: int
    commits: int
    conflicts: int
    wall_s: float
    failure: str | None = None
    compaction: str | None = None  # what the compaction the publish made did, or why it failed

    def render(self) -> str:
        """One line for the run's log."""
        if self.failure is not None:
            return self.failure
        commits = f"{self.commits} commit{'s' if self.commits != 1 else ''}"
        compaction = f"; {self.compaction}" if self.compaction else ""
        return (
            f"published {self.added} new response-cache entries to {self.where} ({commits}, "
            f"{self.wall_s:.2f} s; {self.present} there already){compaction}"
        )


def publish_new_cache(
    store: Store | SharedCacheStore,
    summary: RunSummary,
    report: Callable[[str], None] | None = None,
) -> RunSummary:
    """Once a run has ended: publish the response-cache entries it asked to the team's
    shared store (``store`` from :func:`with_shared_cache`; a plain store: nothing to do),
    and return ``summary`` with a failed publish in its warnings. The stored run is not
    changed: a failed publish is a warning, never a failed run (a store unreachable during
    the run was warned about when it went, and is in the run's manifest warnings already).
    ``report`` gets the published line (default: stderr).

    Examples:
        >>> publish_new_cache(object(), "the summary")  # no shared store: as it was
        'the summary'
    """
    if not isinstance(store, SharedCacheStore):
        return summary
    published = store.publish(summary.run_id)
    if published.failure is None and published.asked:
        (report or _info_on_stderr)(published.render())
    if published.failure is None or published.failure in summary.warnings:
        return summary
    return replace(summary, warnings=(*summary.warnings, published.failure))


class EntryBuffer(dict[str, str]):
    """Response-cache entries held in memory until they are published: the two calls of a
    store :class:`SharedCacheStore` uses, over a dict (a shard's chunks, a merged run)."""

    def cache_get(self, keys: Iterable[str]) -> dict[str, str]:
        return {key: self[key] for key in keys if key in self}

    def cache_put(self, entries: dict[str, str]) -> None:
        self.update(entries)


def report_publish(published: CachePublish) -> None:
    """The published line on stderr (a failure was warned when it happened)."""
    if published.failure is None and published.asked:
        _info_on_stderr(published.render())


def publish_run_cache(store: Store, suite: Suite, run_id: str) -> CachePublish | None:
    """Publish the response-cache entries of a merged run (a Ray run, from its driver after
    its last merge) to the suite's shared store: :func:`publish_stored_cache`. None without a
    shared store or with the suite's cache off.

    Examples:
        >>> from types import SimpleNamespace as NS
        >>> publish_run_cache(None, NS(config=NS(store={}, cache=True)), "r1") is None
        True
    """
    uri = suite.config.store.get("shared")
    if not uri or not suite.config.cache:
        return None
    return publish_stored_cache(
        store, uri, run_id, source=f"{suite.path}: store.shared", probe=endpoint_probe(suite)
    )


def publish_stored_cache(
    store: Store,
    uri: str,
    run_id: str,
    *,
    source: str,
    probe: Callable[[], dict[str, Any] | None] | None = None,
) -> CachePublish | None:
    """Publish the response-cache entries of stored run ``run_id`` to the shared store at
    ``uri``, in one commit: every entry its outputs or its tool loops cached, those the shared
    cache holds already skipped (a shard that published its own leaves nothing to add but the
    read of its keys). For a run merged from parts: a Ray run's driver, ``evalkit runs merge`` of a
    shard matrix (whose shards may have lost the store and published nothing). None with the
    run's cache off or the store unreachable (warned). Never raises: a failed commit is one
    warning (``evalkit push RUN`` publishes later).

    Raises:
        ConfigError: the URI is malformed or holds a credential.
    """
    if not store.manifest(run_id).run.cache:
        return None
    shared = open_team_store(uri, source=source)
    if shared is None:  # warned: the run is stored locally all the same
        return None
    from evalkit.store.shared.local_rows import local_rows

    rows = local_rows(store, "response_cache", run_id)
    entries = dict(zip(rows["cache_key"].to_pylist(), rows["response"].to_pylist(), strict=True))
    manifest = store.manifest(run_id)
    if probe is None:  # a merge names no suite: the endpoint the run's manifest records
        from evalkit.run.cache_provenance import report_of_manifest

        probe = lambda: report_of_manifest(manifest)  # noqa: E731
    publisher = SharedCacheStore(
        EntryBuffer(),
        shared,
        probe=probe,
        manifest=manifest,
    )
    publisher.cache_put(entries)
    published = publisher.publish(run_id)
    report_publish(published)
    return published


def failure_cause(exc: BaseException) -> str:
    """A store error as one short line: its first line (the type when it says nothing),
    without any URL's user part or a registered key.

    Examples:
        >>> failure_cause(OSError("[Errno 2] No such file: /wh/x.avro\\nmore"))
        '[Errno 2] No such file: /wh/x.avro'
    """
    from evalkit.redact import redact_known, strip_userinfo

    cause = getattr(exc, "cause", None)  # SharedStoreUnreachable: the storage's own error
    if isinstance(cause, str):
        return cause
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return redact_known(strip_userinfo(text))[:300]


def _warn_on_stderr(text: str) -> None:
    print(f"evalkit: warning: {text}", file=sys.stderr, flush=True)


def _info_on_stderr(text: str) -> None:
    print(f"evalkit: {text}", file=sys.stderr, flush=True)


def open_team_store(
    uri: str, *, source: str, warn: Callable[[str], None] | None = None
) -> SharedStore | None:
    """The shared store at ``uri``, or None (warned on stderr, naming it and the cause) when
    it cannot be reached: for a shard or a Ray worker, whose cache goes on locally. A bad
    URI or a missing pyiceberg still raises (fix the config or the install).

    Raises:
        ConfigError: the URI is malformed or holds a credential.
        StoreError: pyiceberg is not installed.
    """
    opened = _open_team_store(uri, source)
    if isinstance(opened, str):
        (warn or _warn_on_stderr)(
            f"shared store {parse_shown(uri, source)} is unreachable ({opened}): the cache "
            "goes on locally and publishes nothing"
        )
        return None
    return opened


def parse_shown(uri: str, source: str) -> str:
    """``uri`` as messages print it (no user part)."""
    from evalkit.store.shared import parse_store_uri

    return parse_store_uri(uri, source=source).shown


def _open_team_store(uri: str, source: str) -> SharedStore | str:
    """The opened shared store, or the cause it could not be reached."""
    import importlib.util

    from evalkit.store.shared import open_shared_store, parse_store_uri

    parsed = parse_store_uri(uri, source=source)  # a bad URI is the config's error: raised
    try:
        return open_shared_store(parsed)
    except Exception as exc:
        if importlib.util.find_spec("pyiceberg") is None:
            raise  # not a store that went away: the install lacks the shared extra
        return failure_cause(exc)


def with_shared_cache(
    store: Store, suite: Suite, *, warn: Callable[[str], None] | None = None
) -> Store | SharedCacheStore:
    """``store``, asking the shared store's cache first and publishing to it when the suite
    names one (``store: {shared: URI}``); ``store`` itself otherwise or with the cache off.
    A shared store that cannot be reached gives a :class:`SharedCacheStore` over the local
    cache alone, warned once (``warn``; default: stderr), never an error.

    Raises:
        ConfigError: the URI is malformed or holds a credential.
        StoreError: pyiceberg is not installed.
    """
    uri = suite.config.store.get("shared")
    if not uri or not suite.config.cache:
        return store
    source = f"{suite.path}: store.shared"
    opened = _open_team_store(uri, source)
    if isinstance(opened, str):
        return SharedCacheStore(store, None, where=parse_shown(uri, source), cause=opened,
                                warn=warn)  # fmt: skip
    return SharedCacheStore(store, opened, warn=warn, probe=endpoint_probe(suite))


def as_store(store: Store | SharedCacheStore) -> Store:
    """What :func:`with_shared_cache` gave, as the :class:`Store` a run writes to: a
    :class:`SharedCacheStore` over a local Store answers the cache calls itself and forwards
    every other one to that Store (``__getattr__``), which its class cannot declare."""
    return cast(Store, store)  # a forwarding proxy: mypy cannot see __getattr__ as a Store


def endpoint_probe(suite: Suite) -> Callable[[], dict[str, Any] | None]:
    """Asks what the endpoint of ``suite``'s system says it serves, when called
    (:func:`evalkit.run.cache_provenance.report_endpoint`)."""
    from evalkit.run.cache_provenance import report_endpoint

    system = suite.config.system
    return lambda: report_endpoint(system)

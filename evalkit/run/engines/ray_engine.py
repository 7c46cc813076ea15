"""``evalkit run --engine ray``: a run's chunks as Ray tasks on a local or existing cluster.

Needs the optional extra (``pip install 'evalkit-gate[ray]'``, Ray core only); Ray is imported
when a Ray run starts, never by ``import evalkit``. The driver (the ``evalkit run`` process) holds
the store: it records the run, schedules the chunks (:mod:`evalkit.run.shards`) as tasks, and
merges their Parquet parts into the store every ``merge_every_s`` seconds and at the end; it
is the store's only writer. Each task gets its chunk's cases from the driver and loads the
suite from the same files (the cluster's nodes must see them, and the prompt, schema and tool
files they name: a shared directory, or a Ray ``working_dir``), runs its chunk through the
runner's own loop and writes the chunk's parts (:mod:`evalkit.run.sharded`). A periodic merge
costs what it adds (the parts written since the last one: :mod:`evalkit.store.merge`), and
waits at least ten times as long as the last one took, so merging while the run goes on stays
a bounded share of it.

With a shared store in the suite (``store: {shared: URI}``) and the cache on, each worker
opens it once and its chunks ask the team's response cache for what the driver's prefetch
did not answer (:func:`evalkit.run.sharded.team_cache`), as a local run and a shard do.

A task lost with its node is retried by Ray on another node (``max_task_retries``); a chunk
that committed before the loss is written again under the next attempt number and the merge
keeps the first. A killed driver loses the chunks in flight: ``evalkit run --engine ray
--resume RUN_ID`` skips everything in the store or in committed parts.

With ``rate_limit:`` in the suite, one named rate-budget actor per endpoint
(:func:`evalkit.run.engines.budget.budget_name`) enforces requests/min, tokens/min and
``rate_limit.max_in_flight`` across every worker of every run using that endpoint; it is
detached, pinned to the head node, held by each run while it runs and removed when the last
one leaves (:mod:`evalkit.run.engines.ray_budget`).

Where it listens. Without ``--address`` the driver starts a Ray instance of its own (never one
a ``ray start`` left on the machine): every port of its processes on 127.0.0.1, no dashboard
and so no job API, token authentication on with a token of the driver's own (nothing written
under ``~/.ray``). With ``--address`` it joins that cluster as it was started; an address where
nothing answers fails within a minute in one line (:func:`connect`).

The parts root is resolved once, on the driver, before any task is scheduled: a relative
``--parts`` (the default ``data/parts``) becomes an absolute path, so the workers write where
the driver merges, whatever directory their node was started in.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
import secrets
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from evalkit.corpus.case_facts import CorpusFacts
from evalkit.corpus.cases import Case, Corpus
from evalkit.corpus.suite import Suite, load_suite
from evalkit.errors import EvalkitError
from evalkit.run.engines.budget import BudgetedProvider, BudgetLimiter
from evalkit.run.engines.ray_budget import (
    BUDGET_PATIENCE_S,
    NAMESPACE,
    Budgets,
    RayBudget,
    start_budgets,
    stop_budgets,
)
from evalkit.run.engines.ray_plan import (
    ShareFeed,
    order_corpus_units,
    plan_shares,
    stored_share_count,
)
from evalkit.run.merging import merge_run
from evalkit.run.providers import make_provider
from evalkit.run.runner import RunOptions, RunStart, first_request_keys
from evalkit.run.sharded import (
    ChunkResult,
    run_chunk,
    run_manifest,
    session_counts,
    team_cache,
)
from evalkit.run.shards import DEFAULT_CHUNK_SIZE, Chunk
from evalkit.run.shared_cache import publish_run_cache
from evalkit.run.summary import RunSummary
from evalkit.run_manifest import RunManifest
from evalkit.store import Store, new_run_id
from evalkit.store.parts import PartsRoot

if TYPE_CHECKING:
    # Ray is imported lazily and handed around as a module object (a module is not a type).
    from types import ModuleType as ray_module

    from evalkit.store.shared import SharedStore

__all__ = [  # the budget names are re-exported: callers of the engine find them here
    "BUDGET_PATIENCE_S", "NAMESPACE", "Budgets", "RayBudget", "start_budgets", "stop_budgets",
]  # fmt: skip
#: Ray reads this before it starts: "0" keeps a cluster started on this machine on 127.0.0.1
#: rather than the machine's network address.
LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
#: A periodic merge waits at least this many times as long as the last one took (so merges
#: while a run goes on take at most about a tenth of its wall time).
MERGE_SHARE = 10.0


@dataclass(frozen=True)
class SuiteSource:
    """How a worker loads the suite: the driver's ``--config``, ``--set`` and ``--prompt``."""

    config: str
    overrides: tuple[str, ...] = ()
    prompt: str | None = None


@dataclass(frozen=True, kw_only=True)
class RayOptions:
    address: str | None = None  # None: start a Ray instance on this machine (loopback)
    chunk_size: int = DEFAULT_CHUNK_SIZE
    merge_every_s: float = 10.0
    max_task_retries: int = 3
    chunks_in_flight: int | None = None  # None: two per CPU of the cluster
    run_id: str | None = None  # None: a new run id


def import_ray(address: str | None = None) -> ray_module:
    """Ray, or a one-line error saying how to install it."""
    host = urlsplit(f"//{address}").hostname if address else None
    if address is None or host in {"127.0.0.1", "localhost", "::1"}:
        os.environ.setdefault(LOOPBACK_ENV, "0")  # only read when Ray is first imported

    try:
        import ray
    except ImportError:
        raise EvalkitError(
            "--engine ray needs Ray: install the optional extra with "
            "pip install 'evalkit-gate[ray]'"
        ) from None
    return ray


def connect(address: str | None) -> ray_module:
    """Connect to the cluster at ``address`` (``auto``: the one ``ray start`` left running),
    or start a Ray instance on this machine, bound to 127.0.0.1 (no dashboard, so no job
    API: nothing listens beyond Ray's own ports on 127.0.0.1).

    Raises:
        RayUnreachable: nothing accepts a connection at ``address``, or the cluster did not
            take this driver within :data:`CONNECT_TIMEOUT_S` (Ray itself retries for many
            minutes, printing a warning every few seconds).
    """
    ray = import_ray(address)
    if not ray.is_initialized():
        if address is None:
            # Ray turns token authentication on for a cluster ray.init starts, and writes the
            # token it makes to ~/.ray/auth_token, where every later `ray start` of this user
            # finds it (a second node then fails: InvalidAuthToken). A token of this
            # process's own keeps the authentication and writes nothing under ~/.ray.
            if "RAY_AUTH_MODE" not in os.environ:
                os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))
            ray.init(
                address="local",  # never a cluster another `ray start` left on this machine
                namespace=NAMESPACE,
                include_dashboard=False,
                log_to_driver=False,
                _node_ip_address="127.0.0.1",
            )
        else:
            import logging

            require_listening(address)
            _within(
                lambda: ray.init(
                    address=address, namespace=NAMESPACE, log_to_driver=False,
                    logging_level=logging.ERROR,
                ),
                address,
            )  # fmt: skip
    return ray


#: How long a driver gives the cluster at ``--address`` to accept it, once something listens.
CONNECT_TIMEOUT_S = 30.0
#: How long the first TCP connection to ``--address`` may take.
REACH_TIMEOUT_S = 5.0
#: Ray's GCS port when an address names none (``ray start --head``'s default).
GCS_PORT = 6379


class RayUnreachable(EvalkitError):
    """The Ray cluster a driver was pointed at cannot be reached (one line, the address)."""


def require_listening(address: str, timeout_s: float = REACH_TIMEOUT_S) -> None:
    """Refuse ``address`` (``HOST:PORT`` or ``ray://HOST:PORT``; ``auto`` is Ray's to find)
    when nothing accepts a TCP connection there.

    Raises:
        RayUnreachable: naming the address and why.
    """
    import socket

    if address == "auto":
        return
    parts = urlsplit(address if "://" in address else f"//{address}")
    host = parts.hostname
    if not host:
        return
    try:
        port = parts.port or GCS_PORT
    except ValueError:
        raise RayUnreachable(f"--address {address}: not HOST:PORT") from None
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return
    except ConnectionRefusedError:
        why = "connection refused"
    except socket.gaierror as exc:
        why = f"host {host!r} not found ({exc.strerror or exc})"
    except TimeoutError:
        why = f"no answer to a connection within {timeout_s:g} s"
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
    raise RayUnreachable(f"Ray cluster at {address} is unreachable ({why}); {_FIX}")


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """File descriptor 2 into a discarded file meanwhile: Ray's core prints a warning every
    few seconds while a cluster does not answer (its log level is read too early to set)."""
    import tempfile

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)


_FIX = "start it (`ray start --head`) or pass the address `ray status` prints as --address"


def _within(init: Callable[[], object], address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """``init()`` (``ray.init``), given up after ``timeout_s``: it runs in a daemon thread, so
    one that never returns (a port that accepts and never answers as Ray's GCS) is left behind
    when the command exits."""
    import threading

    failure: list[BaseException] = []

    def attempt() -> None:
        try:
            init()
        except BaseException as exc:  # handed to the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=attempt, name="evalkit-ray-connect", daemon=True)
    with _quiet_stderr():
        thread.start()
        thread.join(timeout_s)
    if thread.is_alive():
        raise RayUnreachable(
            f"Ray cluster at {address} did not accept this driver within {timeout_s:g} s "
            f"(something listens there, but not a Ray cluster that answers); {_FIX}"
        )
    if failure:
        exc = failure[0]
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RayUnreachable(f"Ray cluster at {address}: {text[:300]}; {_FIX}") from None


def run_on_ray(
    suite: Suite,
    corpus: Corpus | CorpusFacts,
    store: Store,
    options: RunOptions,
    source: SuiteSource,
    root: PartsRoot,
    ray_options: RayOptions = RayOptions(),
) -> RunSummary:
    """Run ``corpus`` as Ray tasks, merging their parts into ``store``; the run's summary.
    ``corpus`` may be facts read through the case index: the driver then builds the cases of
    a chunk as it goes out (:class:`~evalkit.run.engines.ray_plan.ShareFeed`)."""
    ray = connect(ray_options.address)
    started = time.perf_counter()
    # The cache as it is now answers this session's first requests, as a local run's prefetch
    # does; what the run itself adds (merged every few seconds) never does (see _prefetch).
    cache_as_of = dt.datetime.now(dt.UTC)
    if options.resume:
        run_id = store.resolve_run(options.resume)
        manifest = store.manifest(run_id)
        fresh = run_manifest(suite, corpus, options, run_id)
        if fresh.config_hash != manifest.config_hash:
            raise EvalkitError(
                f"cannot resume {run_id}: the configuration changed since it started "
                f"(config_hash {manifest.config_hash[:12]} → {fresh.config_hash[:12]})"
            )
        if options.use_cache is False:
            manifest = manifest.with_run(cache=False)
    else:
        run_id = ray_options.run_id or new_run_id()
        manifest = run_manifest(suite, corpus, options, run_id)
    use_cache = manifest.run.cache
    # planned from the ids alone; each chunk's cases built when it goes out
    units = order_corpus_units(corpus, manifest.replays)
    if options.resume:
        shares = stored_share_count(manifest)
    else:
        manifest, shares = plan_shares(manifest, corpus, units)
    feed = ShareFeed(
        corpus=corpus, root=root, manifest=manifest, units=units, count=shares,
        chunk_size=ray_options.chunk_size,
    )  # fmt: skip
    if not options.resume:
        feed.record()
        merge_run(store, root, run_id, in_progress=True)  # the run is in the store from now on
    done = store.completed(run_id) | root.completed_keys(run_id)
    feed.plan(done)
    skipped = feed.skipped
    budgets = start_budgets(ray, suite, holder=f"{run_id}-{secrets.token_hex(4)}")
    notes = dict.fromkeys(budgets.notes)  # every budget note of the run, in order, once
    if options.on_start is not None:
        options.on_start(
            RunStart(
                run_id=run_id,
                label=manifest.run.label,
                resumed=bool(options.resume),
                expected_outputs=len(units),
                stored=skipped,
                to_do=len(units) - skipped,
                use_cache=use_cache,
                warnings=(*manifest.warnings, *notes),
            )
        )
    # Resolved once, here: a relative --parts would name another directory on each node.
    location = root.base if root.local else root.location
    shipped = replace(options, on_start=None, progress=False, resume=None)
    task = ray.remote(chunk_task).options(
        max_retries=ray_options.max_task_retries,
        retry_exceptions=False,
        num_cpus=1,
        scheduling_strategy="SPREAD",  # over every node, not the driver's first
    )
    in_flight = ray_options.chunks_in_flight or max(
        2, 2 * int(ray.cluster_resources().get("CPU", 1))
    )
    running: dict[Any, Chunk] = {}
    results: list[ChunkResult] = []
    last_merge, merge_every = time.monotonic(), ray_options.merge_every_s
    try:
        while feed or running:
            while feed and len(running) < in_flight:
                chunk, by_id = feed.take()
                as_of = cache_as_of if use_cache else None
                cache = _prefetch(store, suite, manifest, chunk, by_id, shipped, as_of)
                mine = tuple(by_id[i] for i in dict.fromkeys(u.case_id for u in chunk.units))
                ref = task.remote(
                    source, manifest, chunk, location, shipped, cache, budgets.names, mine
                )
                running[ref] = chunk
                del by_id, mine, cache  # the task has them: the driver keeps none
            ready, _ = ray.wait(list(running), num_returns=1, timeout=0.5)
            for ref in ready:
                chunk = running.pop(ref)
                feed.release(chunk)
                try:
                    results.append(ray.get(ref))
                except ray.exceptions.RayError as exc:
                    first = str(exc).strip().splitlines()[-1][:300] if str(exc).strip() else ""
                    raise EvalkitError(
                        f"chunk {chunk.chunk_id} of run {run_id} failed: {first}; what finished "
                        f"is in the parts: evalkit run --engine ray --resume {run_id}"
                    ) from None
            budgets.renew()  # the heartbeat: this run still holds its budget (or remakes it)
            notes.update(dict.fromkeys(budgets.notes))
            if time.monotonic() - last_merge >= merge_every:
                merge_started = time.monotonic()
                merge_run(store, root, run_id, in_progress=True)
                last_merge = time.monotonic()
                # a merge costs what it adds, but a slow disk or a burst of parts can make one
                # long: space them so merging stays a share of the run
                merge_every = max(
                    ray_options.merge_every_s, MERGE_SHARE * (last_merge - merge_started)
                )
    except BaseException as exc:
        for ref in running:
            ray.cancel(ref, force=True)
        status = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
        merge_run(store, root, run_id, in_progress=True)
        store.finish_run(run_id, status, {"stopped": f"{type(exc).__name__}: {exc}"[:300]})
        raise
    finally:
        stop_budgets(ray, budgets)
    session = session_counts(results, time.perf_counter() - started, skipped)
    merged = merge_run(store, root, run_id, session=session)
    # what the tasks asked goes to the team's cache once, from here (a commit per chunk would
    # be a file per chunk for every later lookup to read)
    published = publish_run_cache(store, suite, run_id)
    if published is not None and published.failure is not None:
        notes[published.failure] = None
    if budgets.recreated:
        notes[f"the rate budget vanished and this run recreated it {budgets.recreated}×"] = None
    return _with_notes(store, merged.summary, tuple(notes))


def _with_notes(store: Store, summary: RunSummary, notes: tuple[str, ...]) -> RunSummary:
    """The summary (and the stored run) with the run's budget notes among its warnings."""
    added = tuple(n for n in notes if n not in summary.warnings)
    if not added:
        return summary
    summary = replace(summary, warnings=(*summary.warnings, *added))
    store.set_warnings(summary.run_id, list(summary.warnings))
    store.finish_run(summary.run_id, store.run_status(summary.run_id), summary.to_dict())
    return summary


def _prefetch(
    store: Store,
    suite: Suite,
    manifest: RunManifest,
    chunk: Chunk,
    cases: dict[str, Case],
    options: RunOptions,
    as_of: dt.datetime | None,
) -> dict[str, str]:
    """The response-cache entries of a chunk's first requests stored before ``as_of`` (the
    session's start; ``None``: the cache is off). Workers cannot read the store.

    One behaviour for both engines: a local run looks its first requests up once, when it
    starts, so a run never answers its own duplicate requests from the cache. Without the
    cut-off, a chunk scheduled after a merge would be answered from what earlier chunks of the
    same run asked, and whether a duplicate was asked or cached (the request count, the
    ``cached`` flags, the cost spent) would depend on chunk order and merge timing.
    """
    if as_of is None:
        return {}
    work = [(cases[u.case_id], u.replay) for u in chunk.units]
    keys = list(dict.fromkeys(first_request_keys(suite, manifest, work, options)))
    if not keys:
        return {}
    rows = store.records(
        "SELECT c.cache_key, c.response FROM response_cache c "
        "JOIN (SELECT UNNEST(?::VARCHAR[]) AS cache_key) w USING (cache_key) "
        "WHERE c.created_at < ?",
        [keys, as_of],
    )
    return {row["cache_key"]: row["response"] for row in rows}


# -- the task ------------------------------------------------------------------------------

_SUITES: dict[SuiteSource, Suite] = {}
#: The team's shared store per suite source, opened once per worker process (None: none).
_TEAM_CACHES: dict[SuiteSource, SharedStore | None] = {}


def _load(source: SuiteSource) -> Suite:
    """The suite, loaded once per worker process. The cases come with each task: a worker
    never loads the corpus (that cost grew with the corpus, once per worker process and
    shard, for a chunk of a few hundred cases)."""
    if source not in _SUITES:
        _SUITES[source] = load_suite(
            source.config, overrides=list(source.overrides), prompt=source.prompt
        )
    return _SUITES[source]


def chunk_task(
    source: SuiteSource,
    manifest: RunManifest,
    chunk: Chunk,
    parts: str,
    options: RunOptions,
    cache: dict[str, str],
    budgets: tuple[str, ...],
    chunk_cases: tuple[Case, ...],
) -> ChunkResult:
    """One chunk on a Ray worker: run it and write its parts (the body of each task)."""
    import ray

    suite = _load(source)
    cases = {case.id: case for case in chunk_cases}
    use_cache = manifest.run.cache
    if use_cache and source not in _TEAM_CACHES:
        _TEAM_CACHES[source] = team_cache(suite, use_cache)
    shared = _TEAM_CACHES.get(source) if use_cache else None

    async def go() -> ChunkResult:
        provider = make_provider(suite.config.system)
        limiter = None
        if budgets:
            handle = RayBudget(ray, budgets[0])
            provider, limiter = BudgetedProvider(provider, handle), BudgetLimiter(handle)
        try:
            return await run_chunk(
                suite, cases, manifest, chunk, PartsRoot(parts), options,
                provider=provider, cache=cache, limiter=limiter, shared=shared,
            )  # fmt: skip
        finally:
            await provider.aclose()

    result = asyncio.run(go())
    return replace(result, node=ray.get_runtime_context().get_node_id())

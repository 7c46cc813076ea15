"""``evalkit run --engine ray``: a run's chunks as Ray tasks on a local or existing cluster.

Needs the optional extra (``pip install 'evalkit-gate[ray]'``, Ray core only); Ray is imported
when a Ray run starts, never by ``import evalkit``. The driver (the ``evalkit run`` process) holds
the store: it records the run, schedules the chunks (:mod:`evalkit.run.shards`) as tasks, and
merges their Parquet parts into the store every ``merge_every_s`` seconds and at the end; it
is the store's only writer. Each task loads the suite and corpus from the same files (the
cluster's nodes must see them: a shared directory, or a Ray ``working_dir``), runs its chunk
through the runner's own loop and writes the chunk's parts (:mod:`evalkit.run.sharded`).

A task lost with its node is retried by Ray on another node (``max_task_retries``); a chunk
that committed before the loss is written again under the next attempt number and the merge
keeps the first. A killed driver loses the chunks in flight: ``evalkit run --engine ray
--resume RUN_ID`` skips everything in the store or in committed parts.

With ``rate_limit:`` in the suite, one named rate-budget actor per endpoint
(:func:`evalkit.run.engines.budget.budget_name`) enforces requests/min, tokens/min and
``rate_limit.max_in_flight`` across every worker; it is detached, pinned to the head node and
restarted by Ray when it dies, and workers retry while it is briefly unavailable.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections import deque
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from evalkit.corpus.cases import Case, Corpus, load_corpus
from evalkit.corpus.selection import Selection
from evalkit.corpus.suite import Suite, load_suite
from evalkit.errors import EvalkitError, ProviderError
from evalkit.run.engines.budget import (
    BudgetedProvider,
    BudgetLimiter,
    RateBudget,
    acquire_remote,
    budget_name,
)
from evalkit.run.merging import merge_run
from evalkit.run.providers import api_key_for, make_provider
from evalkit.run.runner import RunOptions, RunStart, first_request_keys
from evalkit.run.sharded import ChunkResult, record_run, run_chunk, run_manifest, session_counts
from evalkit.run.shards import DEFAULT_CHUNK_SIZE, Chunk, make_chunks, order_units, remaining
from evalkit.run.summary import RunSummary
from evalkit.store import Store, new_run_id
from evalkit.store.parts import PartsRoot

if TYPE_CHECKING:
    import ray as ray_module

NAMESPACE = "evalkit"
#: Ray reads this before it starts: "0" keeps a cluster started on this machine on 127.0.0.1
#: rather than the machine's network address.
LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
#: How long a worker keeps asking a budget actor that is unavailable (restarting).
BUDGET_PATIENCE_S = 60.0


@dataclass(frozen=True)
class SuiteSource:
    """How a worker loads the suite: the driver's ``--config``, ``--set`` and ``--prompt``."""

    config: str
    overrides: tuple[str, ...] = ()
    prompt: str | None = None


@dataclass(frozen=True)
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
    or start a Ray instance on this machine, bound to 127.0.0.1."""
    ray = import_ray(address)
    if not ray.is_initialized():
        if address is None:
            ray.init(
                namespace=NAMESPACE,
                include_dashboard=False,
                log_to_driver=False,
                _node_ip_address="127.0.0.1",
            )
        else:
            ray.init(address=address, namespace=NAMESPACE, log_to_driver=False)
    return ray


def run_on_ray(
    suite: Suite,
    corpus: Corpus,
    store: Store,
    options: RunOptions,
    source: SuiteSource,
    root: PartsRoot,
    ray_options: RayOptions = RayOptions(),
) -> RunSummary:
    """Run ``corpus`` as Ray tasks, merging their parts into ``store``; the run's summary."""
    ray = connect(ray_options.address)
    started = time.perf_counter()
    if options.resume:
        run_id = store.resolve_run(options.resume)
        manifest = store.manifest(run_id)
        fresh = run_manifest(suite, corpus, options, run_id)
        if fresh["config_hash"] != manifest["config_hash"]:
            raise EvalkitError(
                f"cannot resume {run_id}: the configuration changed since it started "
                f"(config_hash {manifest['config_hash'][:12]} → {fresh['config_hash'][:12]})"
            )
        if options.use_cache is False:
            manifest["run"]["cache"] = False
    else:
        run_id = ray_options.run_id or new_run_id()
        manifest = run_manifest(suite, corpus, options, run_id)
        record_run(root, manifest, "driver", corpus.cases)
        merge_run(store, root, run_id, in_progress=True)  # the run is in the store from now on
    use_cache = bool(manifest["run"].get("cache", True))
    units = order_units((c.id for c in corpus.cases), int(manifest["replays"]))
    done = store.completed(run_id) | root.completed_keys(run_id)
    todo = deque(remaining(make_chunks(units, ray_options.chunk_size), done))
    skipped = len(units) - sum(len(c.units) for c in todo)
    if options.on_start is not None:
        options.on_start(
            RunStart(
                run_id, manifest["run"]["label"], bool(options.resume), len(units), skipped,
                len(units) - skipped, use_cache, tuple(manifest.get("warnings") or ()),
            )
        )  # fmt: skip
    budgets = start_budgets(ray, suite)
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
    by_id = {case.id: case for case in corpus.cases}
    running: dict[Any, Chunk] = {}
    results: list[ChunkResult] = []
    last_merge = time.monotonic()
    try:
        while todo or running:
            while todo and len(running) < in_flight:
                chunk = todo.popleft()
                cache = _prefetch(store, suite, manifest, chunk, by_id, shipped, use_cache)
                ref = task.remote(source, manifest, chunk, root.location, shipped, cache, budgets)
                running[ref] = chunk
            ready, _ = ray.wait(list(running), num_returns=1, timeout=0.5)
            for ref in ready:
                chunk = running.pop(ref)
                try:
                    results.append(ray.get(ref))
                except ray.exceptions.RayError as exc:
                    first = str(exc).strip().splitlines()[-1][:300] if str(exc).strip() else ""
                    raise EvalkitError(
                        f"chunk {chunk.chunk_id} of run {run_id} failed: {first}; what finished "
                        f"is in the parts: evalkit run --engine ray --resume {run_id}"
                    ) from None
            if time.monotonic() - last_merge >= ray_options.merge_every_s:
                merge_run(store, root, run_id, in_progress=True)
                last_merge = time.monotonic()
    except BaseException as exc:
        for ref in running:
            ray.cancel(ref, force=True)
        status = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
        merge_run(store, root, run_id, in_progress=True)
        store.finish_run(run_id, status, {"stopped": f"{type(exc).__name__}: {exc}"[:300]})
        raise
    session = session_counts(results, time.perf_counter() - started, skipped)
    merged = merge_run(store, root, run_id, session=session)
    stop_budgets(ray, budgets)
    return merged.summary


def _prefetch(
    store: Store,
    suite: Suite,
    manifest: dict[str, Any],
    chunk: Chunk,
    cases: dict[str, Case],
    options: RunOptions,
    use_cache: bool,
) -> dict[str, str]:
    """The stored response-cache entries of a chunk's first requests (workers cannot read
    the store)."""
    if not use_cache:
        return {}
    work = [(cases[u.case_id], u.replay) for u in chunk.units]
    return store.cache_get(first_request_keys(suite, manifest, work, options))


# -- rate budgets --------------------------------------------------------------------------


def start_budgets(ray: ray_module, suite: Suite) -> tuple[str, ...]:
    """One named, detached, restartable budget actor per endpoint, on the head node; their
    names (none when the suite has no ``rate_limit:``)."""
    limit = suite.config.rate_limit
    system = suite.config.system
    if limit is None or system.provider == "python":
        return ()
    name = budget_name(system.base_url, api_key_for(system))
    actor = ray.remote(RateBudget).options(
        name=name,
        namespace=NAMESPACE,
        lifetime="detached",
        get_if_exists=True,
        max_restarts=-1,
        max_task_retries=-1,
        num_cpus=0,
        resources={"node:__internal_head__": 0.001},  # pinned to the head node
    )
    handle = actor.remote(limit.requests_per_minute, limit.tokens_per_minute, limit.max_in_flight)
    ray.get(handle.stats.remote())  # up before the first task asks it
    return (name,)


def stop_budgets(ray: ray_module, names: tuple[str, ...]) -> None:
    for name in names:
        with contextlib.suppress(ValueError):  # already gone
            ray.kill(ray.get_actor(name, namespace=NAMESPACE))


class RayBudget:
    """A worker's async handle on a budget actor, asking again while it is unavailable."""

    def __init__(self, ray: ray_module, name: str) -> None:
        self._ray = ray
        self._name = name
        self._actor: Any = None

    async def _call(self, method: str, *args: Any) -> Any:
        deadline = time.monotonic() + BUDGET_PATIENCE_S
        delay = 0.05
        while True:
            try:
                if self._actor is None:
                    self._actor = self._ray.get_actor(self._name, namespace=NAMESPACE)
                return await getattr(self._actor, method).remote(*args)
            except (self._ray.exceptions.RayActorError, ValueError) as exc:
                self._actor = None
                if time.monotonic() > deadline:
                    raise ProviderError(
                        f"rate budget {self._name} unavailable for {BUDGET_PATIENCE_S:g}s: "
                        f"{type(exc).__name__}",
                        retryable=True,
                    ) from None
                await asyncio.sleep(delay)
                delay = min(1.0, delay * 2)

    async def acquire(self, tokens: int) -> int:
        return await acquire_remote(lambda: self._call("acquire", tokens))

    async def release(self, lease: int | None, throttled: bool = False) -> None:
        await self._call("release", lease, throttled)

    async def backoff(self, retry_after_s: float | None) -> None:
        await self._call("backoff", retry_after_s)


# -- the task ------------------------------------------------------------------------------

_LOADED: dict[tuple[SuiteSource, str], tuple[Suite, dict[str, Case]]] = {}


def _load(source: SuiteSource, selection: dict[str, Any]) -> tuple[Suite, dict[str, Case]]:
    """The suite and selected cases, loaded once per worker process."""
    import json

    key = (source, json.dumps(selection, sort_keys=True))
    if key not in _LOADED:
        suite = load_suite(source.config, overrides=list(source.overrides), prompt=source.prompt)
        chosen = Selection(
            selection.get("tier"),
            tuple(selection.get("tags") or ()),
            tuple(selection.get("exclude_tags") or ()),
            tuple(selection.get("skip_scorers") or ()),
            bool(selection.get("sealed")),
        )
        corpus = load_corpus(
            suite.root, sealed=chosen.sealed, user_template=suite.config.system.user_template
        )
        _LOADED[key] = (suite, {case.id: case for case in chosen.apply(corpus).cases})
    return _LOADED[key]


def chunk_task(
    source: SuiteSource,
    manifest: dict[str, Any],
    chunk: Chunk,
    parts: str,
    options: RunOptions,
    cache: dict[str, str],
    budgets: tuple[str, ...],
) -> ChunkResult:
    """One chunk on a Ray worker: run it and write its parts (the body of each task)."""
    import ray

    suite, cases = _load(source, manifest.get("selection") or {})
    missing = [u.case_id for u in chunk.units if u.case_id not in cases]
    if missing:
        raise EvalkitError(
            f"this worker's corpus lacks {len(missing)} case(s) of the run (e.g. {missing[0]}): "
            "every node must see the same corpus files"
        )

    async def go() -> ChunkResult:
        provider = make_provider(suite.config.system)
        limiter = None
        if budgets:
            handle = RayBudget(ray, budgets[0])
            provider, limiter = BudgetedProvider(provider, handle), BudgetLimiter(handle)
        try:
            return await run_chunk(
                suite, cases, manifest, chunk, PartsRoot(parts), options,
                provider=provider, cache=cache, limiter=limiter,
            )  # fmt: skip
        finally:
            await provider.aclose()

    result = asyncio.run(go())
    return replace(result, node=ray.get_runtime_context().get_node_id())

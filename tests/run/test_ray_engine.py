"""``evalkit run --engine ray`` (evalkit.run.engines.ray_engine) on a local 2-node Ray cluster:
the same outputs, scores and gate decision as a local and a sharded run; one rate budget shared
by two workers on two nodes; a node removed mid-run and a driver killed mid-run lose nothing
and duplicate nothing. The cluster (loopback only, no dashboard, a small object store) is
started once for this module and shut down at its end, checked process by process."""

from __future__ import annotations

import itertools
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from distributed_support import (
    CANDIDATE_PROMPT,
    CONFIG,
    demo_args,
    exactly_once,
    gate_signature,
    latest_run,
    run_local,
    stored,
)
from projects import make_project

from evalkit.cli import main
from evalkit.demo.server import DemoServer, start_demo_server
from evalkit.run.engines.ray_engine import LOOPBACK_ENV, NAMESPACE
from evalkit.store.parts import PartsRoot

OBJECT_STORE = 80 * 1024**2


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _children(pids: set[int]) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().split(")")[-1].split()[1])
            except (FileNotFoundError, ProcessLookupError, IndexError):
                continue
            if ppid in pids:
                found.add(int(entry.name))
    return found


class _Cluster:
    def __init__(self, cluster: Any, ray: Any) -> None:
        self.cluster = cluster
        self.ray = ray
        self.pids: set[int] = set()
        self.note_processes()

    @property
    def address(self) -> str:
        return self.cluster.address

    def note_processes(self) -> None:
        """Remember every process of the cluster (and the workers its raylets started)."""
        for node in [self.cluster.head_node, *self.cluster.worker_nodes]:
            for infos in node.all_processes.values():
                self.pids.update(info.process.pid for info in infos)
        self.pids |= _children(set(self.pids))

    def add_worker(self) -> Any:
        node = self.cluster.add_node(
            num_cpus=1, node_ip_address="127.0.0.1", object_store_memory=OBJECT_STORE
        )
        self.note_processes()
        return node


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[_Cluster]:
    os.environ[LOOPBACK_ENV] = "0"  # read when Ray is imported: keep the cluster on 127.0.0.1
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "include_dashboard": False,
            "node_ip_address": "127.0.0.1",
            "object_store_memory": OBJECT_STORE,
        },
    )
    handle = _Cluster(cluster, ray)
    handle.add_worker()
    ray.init(address=cluster.address, namespace=NAMESPACE, log_to_driver=False)
    assert {n["NodeManagerAddress"] for n in ray.nodes()} == {"127.0.0.1"}
    try:
        yield handle
    finally:
        handle.note_processes()
        ray.shutdown()
        cluster.shutdown()
        deadline = time.monotonic() + 60  # processes exit as soon as they can: a loaded box
        while any(_alive(p) for p in handle.pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = sorted(p for p in handle.pids if _alive(p))
        assert not left, f"Ray processes still running after shutdown: {left}"


@pytest.fixture(scope="module")
def noisy_server() -> Iterator[DemoServer]:
    """A process of its own: it lives through the module, the rate-window tests included,
    whose arrival times must not depend on what else this process runs."""
    with start_demo_server(noise=True) as server:
        yield server


def test_a_ray_run_equals_a_local_and_a_sharded_run(
    ray_cluster: _Cluster, noisy_server: DemoServer, tmp_path: Path
) -> None:
    db = tmp_path / "parity.duckdb"
    base = run_local(noisy_server, db, "base")
    local = run_local(noisy_server, db, "cand-local", "--prompt", CANDIDATE_PROMPT)
    parts = str(tmp_path / "parts")
    noisy_server.reset_stats()
    for k in (1, 2, 3):
        args = demo_args(noisy_server, "--prompt", CANDIDATE_PROMPT, "--shard", f"{k}/3")
        assert main(["run", *args, "--run-id", "cand-sharded", "--parts", parts, "--no-cache"]) == 0
    assert main(["runs", "merge", "cand-sharded", "--parts", parts, "--db", str(db)]) == 0
    noisy_server.reset_stats()
    args = demo_args(noisy_server, "--prompt", CANDIDATE_PROMPT, "--engine", "ray")
    ray_args = ["--address", ray_cluster.address, "--parts", parts, "--chunk-size", "8"]
    assert main(["run", *args, *ray_args, "--db", str(db), "--label", "cand-ray",
                 "--no-cache"]) == 0  # fmt: skip
    on_ray = latest_run(db, "cand-ray")
    expected = stored(db, local)
    assert expected[0].height == 91
    for other in ("cand-sharded", on_ray):
        outputs, scores = stored(db, other)
        assert outputs.equals(expected[0]) and scores.equals(expected[1])
    decision = gate_signature(db, base, local)
    assert decision[0] is True  # the v2 prompt regresses: the decision has findings to match
    assert gate_signature(db, base, "cand-sharded") == decision == gate_signature(db, base, on_ray)
    assert exactly_once(db, on_ray)[:2] == (91, 91)


def _max_per_window(arrivals: list[float], window: float = 1.0) -> int:
    """The most requests that arrived within any ``window`` seconds (a closed interval)."""
    times = sorted(arrivals)
    best, start = 0, 0
    for end, t in enumerate(times):
        while t - times[start] > window:
            start += 1
        best = max(best, end - start + 1)
    return best


def _two_workers_on_two_nodes(
    ray_cluster: _Cluster, server: DemoServer, tmp_path: Path, rpm: int, shared: bool
) -> tuple[list[float], set[str]]:
    """Two chunks of one run, each on its own node (pinned), against ``server`` with
    ``rate_limit.requests_per_minute = rpm``; the server's arrival times and the nodes used."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from evalkit.corpus.cases import load_corpus
    from evalkit.corpus.selection import resolve_selection
    from evalkit.corpus.suite import load_suite
    from evalkit.run.engines.ray_engine import SuiteSource, chunk_task, start_budgets, stop_budgets
    from evalkit.run.runner import RunOptions
    from evalkit.run.sharded import record_run, run_manifest
    from evalkit.run.shards import make_chunks, order_units

    ray = ray_cluster.ray
    overrides = (
        f"system.base_url={server.base_url}", f"rate_limit={{requests_per_minute: {rpm}}}",
        "replays=2",
    )  # fmt: skip
    suite = load_suite(CONFIG, overrides=list(overrides))
    selection = resolve_selection(suite.config.tiers, "smoke")  # no judge: every request counts
    corpus = selection.apply(
        load_corpus(suite.root, user_template=suite.config.system.user_template)
    )
    options = RunOptions(label="budget", use_cache=False, selection=selection.to_manifest())
    run_id = f"budget-{shared}"
    manifest = run_manifest(suite, corpus, options, run_id)
    root = PartsRoot(tmp_path / "parts")
    record_run(root, manifest, "driver", corpus.cases)
    units = order_units((c.id for c in corpus.cases), 2)
    chunks = make_chunks(units, math.ceil(len(units) / 2))
    budgets = start_budgets(ray, suite) if shared else None
    names = budgets.names if budgets else ()
    nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
    assert len(nodes) == 2 and len(chunks) == 2
    server.reset_stats()
    source = SuiteSource(CONFIG, overrides)
    refs = [
        ray.remote(chunk_task)
        .options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False), num_cpus=1)
        .remote(source, manifest, chunk, root.base, options, {}, names, _cases_of(corpus, chunk))
        for chunk, node in zip(chunks, nodes, strict=True)
    ]
    results = ray.get(refs, timeout=120)
    arrivals = server.stats()["arrivals"]
    if budgets:
        actor = ray.get_actor(names[0], namespace=NAMESPACE)
        assert ray.get(actor.stats.remote())["granted"] == len(arrivals)
        stop_budgets(ray, budgets)
    assert sum(r.outputs for r in results) == len(units)
    return arrivals, {r.node for r in results}


def _cases_of(corpus: Any, chunk: Any) -> tuple[Any, ...]:
    by_id = {case.id: case for case in corpus.cases}
    return tuple(by_id[i] for i in dict.fromkeys(u.case_id for u in chunk.units))


def test_a_chunk_task_gets_its_cases_and_never_loads_the_corpus(
    ray_cluster: _Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task's cost follows its chunk, not the corpus: the driver ships the chunk's cases
    (before, each worker process loaded and selected the whole corpus)."""
    from evalkit.corpus import cases as corpus_cases
    from evalkit.corpus.cases import load_corpus
    from evalkit.corpus.suite import load_suite
    from evalkit.run.engines import ray_engine
    from evalkit.run.runner import RunOptions
    from evalkit.run.sharded import record_run, run_manifest
    from evalkit.run.shards import make_chunks, order_units

    with start_demo_server(noise=False, in_thread=True) as server:
        overrides = (f"system.base_url={server.base_url}", f"judge.base_url={server.base_url}")
        suite = load_suite(CONFIG, overrides=list(overrides))
        corpus = load_corpus(suite.root, user_template=suite.config.system.user_template)
        options = RunOptions(label="shipped", use_cache=False)
        manifest = run_manifest(suite, corpus, options, "shipped")
        root = PartsRoot(tmp_path / "parts")
        record_run(root, manifest, "driver", corpus.cases)
        chunk = make_chunks(order_units((c.id for c in corpus.cases), 1), 5)[0]

        def refuse(*_: object, **__: object) -> None:
            raise AssertionError("a chunk task loaded the corpus")

        monkeypatch.setattr(corpus_cases, "load_corpus", refuse)
        monkeypatch.setattr(ray_engine, "load_corpus", refuse, raising=False)
        source = ray_engine.SuiteSource(CONFIG, overrides)
        result = ray_engine.chunk_task(  # here, in this process: the patch applies
            source, manifest, chunk, root.base, options, {}, (), _cases_of(corpus, chunk)
        )
    assert result.outputs == 5


def test_a_chunk_task_asks_the_teams_shared_cache(
    ray_cluster: _Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A job's run is pushed to the team's shared store; a Ray task of another run with the
    shared store configured and an empty prefetch asks the endpoint nothing of its chunk: the
    worker asks the team's cache, as a local run and a shard do."""
    from evalkit.corpus.cases import load_corpus
    from evalkit.corpus.suite import load_suite
    from evalkit.run.engines import ray_engine
    from evalkit.run.runner import RunOptions
    from evalkit.run.sharded import record_run, run_manifest
    from evalkit.run.shards import make_chunks, order_units

    uri = f"sqlite:///{tmp_path / 'team' / 'catalog.db'}?warehouse={tmp_path / 'team' / 'wh'}"
    with start_demo_server(noise=False, in_thread=True) as server:
        parts, db = str(tmp_path / "job-1"), str(tmp_path / "job-1.duckdb")
        args = demo_args(server, "--shard", "1/1", "--run-id", "job-1", "--parts", parts)
        assert main(["run", *args]) == 0
        assert main(["runs", "merge", "job-1", "--parts", parts, "--db", db]) == 0
        assert main(["push", "job-1", "--db", db, "--store", uri]) == 0
        overrides = (
            f"system.base_url={server.base_url}", f"judge.base_url={server.base_url}",
            f"store.shared={uri}",
        )  # fmt: skip
        suite = load_suite(CONFIG, overrides=list(overrides))
        corpus = load_corpus(suite.root, user_template=suite.config.system.user_template)
        options = RunOptions(label="job-2")
        manifest = run_manifest(suite, corpus, options, "job-2")
        root = PartsRoot(tmp_path / "parts")
        record_run(root, manifest, "driver", corpus.cases)
        chunk = make_chunks(order_units((c.id for c in corpus.cases), 1), 5)[0]
        server.reset_stats()
        result = ray_engine.chunk_task(  # here, in this process, with an empty prefetch
            ray_engine.SuiteSource(CONFIG, overrides), manifest, chunk, root.base, options, {},
            (), _cases_of(corpus, chunk),
        )  # fmt: skip
        asked = server.stats()["requests"]
    assert (result.outputs, result.requests, asked) == (5, 0, 0)
    assert result.shared_hits >= 5


def test_two_workers_on_two_nodes_share_one_rate_budget(
    ray_cluster: _Cluster, tmp_path: Path
) -> None:
    # 4 per second between both workers. The control below needs the two, each paced by its
    # own limiter, to reach more than 5 in a second; at 8 per second (480) it needed 10, which
    # two workers starved of CPU did not send (9, once, at load 16 on two cores).
    rpm = 240
    with start_demo_server(noise=False) as server:
        arrivals, nodes = _two_workers_on_two_nodes(ray_cluster, server, tmp_path / "a", rpm, True)
        assert len(nodes) == 2  # really two nodes
        assert len(arrivals) >= 32  # 16 cases × 2 replays, some with tool turns
        assert _max_per_window(arrivals) <= rpm / 60 + 1
        span = max(arrivals) - min(arrivals)
        assert span >= (len(arrivals) - 1) * 60 / rpm * 0.95  # paced, not merely lucky
        # the same two workers, each with its own limiter only: together twice the rate
        alone, _ = _two_workers_on_two_nodes(ray_cluster, server, tmp_path / "b", rpm, False)
        assert _max_per_window(alone) > rpm / 60 + 1


def test_the_budget_actor_lives_on_the_head_and_comes_back(ray_cluster: _Cluster) -> None:
    import asyncio

    from evalkit.corpus.suite import load_suite
    from evalkit.run.engines.ray_engine import RayBudget, start_budgets, stop_budgets

    ray = ray_cluster.ray
    limit = "rate_limit={requests_per_minute: 6000, max_in_flight: 4}"  # leases: ids from 1
    suite = load_suite(CONFIG, overrides=[limit])
    budgets = start_budgets(ray, suite)
    (name,) = budgets.names
    actor = ray.get_actor(name, namespace=NAMESPACE)
    head = ray_cluster.cluster.head_node.node_id
    where = actor.__ray_call__.remote(lambda self: ray.get_runtime_context().get_node_id())
    assert ray.get(where) == head
    ray.kill(actor, no_restart=False)  # dies; Ray restarts it (max_restarts=-1)
    handle = RayBudget(ray, name)
    assert asyncio.run(handle.acquire(0)) >= 1  # a worker's next ask waits it out
    stop_budgets(ray, budgets)


def test_a_second_driver_keeps_its_budget_after_the_first_ends_and_remakes_a_lost_one(
    ray_cluster: _Cluster,
) -> None:
    """Two drivers on one endpoint: the first leaving does not end the second's budget
    (before, it killed it: the second run then sent nothing for 75 s); a budget that vanished
    is made again by the next heartbeat; each driver hears when its own limits are not the
    ones enforced; the last to leave removes it."""
    import asyncio

    from evalkit.corpus.suite import load_suite
    from evalkit.run.engines.budget import BudgetLimits
    from evalkit.run.engines.ray_engine import RayBudget, start_budgets, stop_budgets

    ray = ray_cluster.ray
    fast = load_suite(CONFIG, overrides=["rate_limit={requests_per_minute: 6000}"])
    slow = load_suite(CONFIG, overrides=["rate_limit={requests_per_minute: 600}"])
    first = start_budgets(ray, fast, holder="first")
    second = start_budgets(ray, slow, holder="second")
    (name,) = first.names
    assert second.names == (name,) and second.notes == ()  # 600 is what it asked for
    first.renew(every_s=0)
    assert first.enforced[name] == BudgetLimits(600)  # the strictest of both runs
    assert "shared with another run: it enforces 600 requests/min" in first.notes[0]
    stop_budgets(ray, first)
    actor = ray.get_actor(name, namespace=NAMESPACE)  # still there: the second holds it
    assert ray.get(actor.holders.remote()) == ["second"]
    assert asyncio.run(RayBudget(ray, name).acquire(0)) == 0  # granted (no cap: lease 0)
    ray.kill(actor)  # lost for good (no restart): the second driver's heartbeat remakes it
    _wait_until_gone(ray, name)  # the kill is asynchronous: a loaded actor answered one more join
    second.renew(every_s=0)
    assert second.recreated == 1
    assert ray.get(ray.get_actor(name, namespace=NAMESPACE).holders.remote()) == ["second"]
    stop_budgets(ray, second)  # the last holder: the actor goes
    _wait_until_gone(ray, name)


def _wait_until_gone(ray: Any, name: str) -> None:
    """Return once no actor is named ``name``; fail after ``PROGRESS_WAIT_S``."""
    deadline = time.monotonic() + PROGRESS_WAIT_S
    while time.monotonic() < deadline:
        try:
            ray.get_actor(name, namespace=NAMESPACE)
        except ValueError:
            return
        time.sleep(0.1)
    raise AssertionError(f"budget actor {name} still alive")


def test_a_relative_parts_run_stores_every_output_and_exits_zero(
    ray_cluster: _Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--parts data/parts`` (the default) from a directory other than the one the nodes
    started in: the workers write where the driver merges (before, under the nodes' own
    directory: "0 of N outputs stored, incomplete" and exit 0)."""
    nodes_cwd = Path.cwd()  # where this module's cluster was started
    here = tmp_path / "driver"
    here.mkdir()
    monkeypatch.chdir(here)
    with start_demo_server(noise=False, in_thread=True) as server:
        args = [*demo_args(server, "--tier", "smoke"), "--engine", "ray", "--address",
                ray_cluster.address, "--chunk-size", "8", "--db", "d.duckdb", "--no-progress",
                "--label", "relative", "--run-id", "relative-parts"]  # fmt: skip
        assert main(["run", *args, "--parts", "data/parts"]) == 0
    outputs, distinct, _, _ = exactly_once(here / "d.duckdb", "relative-parts")
    assert outputs == distinct == 16
    assert len(PartsRoot(here / "data" / "parts").parts("relative-parts", "outputs")) == 2
    assert not (nodes_cwd / "data" / "parts" / "runs" / "relative-parts").exists()


#: How long a test waits for a run's chunks to commit before it calls the run stuck. It returns
#: as soon as they are there, so the bound costs nothing on a healthy run; at load 12-15 on two
#: cores (a loaded `.ci/run`) Ray's start-up alone took most of the 90 s this used to be.
PROGRESS_WAIT_S = 300.0


def _wait_for_parts(
    root: PartsRoot, run_id: str | None, at_least: int, timeout: float = PROGRESS_WAIT_S
) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = [run_id] if run_id else [p.name for p in (Path(root.base) / "runs").glob("*")]
        for run in runs:
            if len(root.parts(run, "outputs")) >= at_least:
                return run
        time.sleep(0.05)
    raise AssertionError(f"no {at_least} committed chunks within {timeout} s")


def _wait_for_a_task_on(node: Any, running: Callable[[], bool], timeout: float) -> None:
    """Until a worker process of ``node`` runs a chunk (a Ray worker's process title names the
    task it runs). Its first sighting is enough: a chunk of 6 cases can take less than a poll
    at one load and seconds at another, so asking it to stay busy for a while made the wait
    depend on timing (CI once waited the whole bound at load 8). Fails at once, saying so,
    when the run ends (``running()`` false) before any chunk ran there."""
    raylet = {info.process.pid for info in node.all_processes["raylet"]}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and running():
        for pid in _children(raylet):
            try:
                if "chunk_task" in Path(f"/proc/{pid}/cmdline").read_text():
                    return
            except (FileNotFoundError, ProcessLookupError):
                continue
        time.sleep(0.01)
    seen = {pid: Path(f"/proc/{pid}/cmdline").read_text()[:40] for pid in _children(raylet)}
    ended = "the run ended" if not running() else f"{timeout} s passed"
    raise AssertionError(f"{ended} before a chunk ran on node {node.node_id}: {seen}")


def test_a_node_removed_mid_run_loses_and_duplicates_nothing(
    ray_cluster: _Cluster, tmp_path: Path
) -> None:
    chunk, in_flight = 6, 2
    with start_demo_server(noise=False, latency_ms=80, in_thread=True) as server:
        from evalkit.corpus.cases import load_corpus
        from evalkit.corpus.suite import load_suite
        from evalkit.run.engines.ray_engine import RayOptions, SuiteSource, run_on_ray
        from evalkit.run.runner import RunOptions
        from evalkit.store import open_store

        overrides = (f"system.base_url={server.base_url}", f"judge.base_url={server.base_url}")
        suite = load_suite(CONFIG, overrides=list(overrides))
        corpus = load_corpus(suite.root, user_template=suite.config.system.user_template)
        db, root = tmp_path / "n.duckdb", PartsRoot(tmp_path / "parts")
        options = RayOptions(chunk_size=chunk, chunks_in_flight=in_flight, run_id="lost-node")
        outcome: dict[str, Any] = {}

        def drive() -> None:
            try:
                with open_store(db, write=True) as store:
                    outcome["summary"] = run_on_ray(
                        suite, corpus, store, RunOptions(label="lost", use_cache=False),
                        SuiteSource(CONFIG, overrides), root, options,
                    )  # fmt: skip
            except BaseException as exc:  # reported by the assertion below
                outcome["error"] = exc

        driver = threading.Thread(target=drive)
        driver.start()
        _wait_for_parts(root, "lost-node", 1)
        (worker,) = list(ray_cluster.cluster.worker_nodes)
        _wait_for_a_task_on(worker, driver.is_alive, PROGRESS_WAIT_S)  # lose it mid-chunk
        ray_cluster.cluster.remove_node(worker)  # its tasks die; Ray runs them again elsewhere
        assert worker not in ray_cluster.cluster.worker_nodes  # the loss really happened
        driver.join(180)
        ray_cluster.add_worker()  # two nodes again for the tests after this one
        counts = server.stats()["by_content"]
    assert "error" not in outcome, outcome.get("error")
    assert outcome["summary"].outputs == 91 and outcome["summary"].complete
    for _ in range(2):
        assert main(["runs", "merge", "lost-node", "--parts", str(root.base), "--db", str(db)]) == 0
    outputs, distinct, scores, distinct_scores = exactly_once(db, "lost-node")
    assert outputs == distinct == 91 and scores == distinct_scores
    # Only the chunks in flight on the lost node are asked again. None may be, when the node
    # went while its task was still starting (busy, but before its first request): a timing
    # CI hit once, so the bound is an upper one.
    asked_twice = sum(n - 1 for n in counts.values() if n > 1)
    assert asked_twice <= in_flight * chunk * 4


def test_a_killed_driver_resumes_and_merges_each_case_once(
    ray_cluster: _Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chunk = 6
    with start_demo_server(noise=False, latency_ms=80, in_thread=True) as server:
        db, parts = tmp_path / "d.duckdb", tmp_path / "parts"
        common = [*demo_args(server), "--engine", "ray", "--address", ray_cluster.address,
                  "--parts", str(parts), "--chunk-size", str(chunk), "--db", str(db),
                  "--no-progress"]  # fmt: skip
        command = [sys.executable, "-m", "evalkit.cli", "run", *common, "--label", "killed"]
        driver = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        run_id = _wait_for_parts(PartsRoot(parts), None, 2)
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(10)
        assert len(PartsRoot(parts).completed_keys(run_id)) < 91
        capsys.readouterr()  # the resume needs no process of its own: this one drives it
        resumed = main(["run", *common, "--resume", run_id])
        err = capsys.readouterr().err
        assert resumed == 0, err[-2000:]
        assert "resuming run" in err
        counts = server.stats()["by_content"]
    for _ in range(2):
        assert main(["runs", "merge", run_id, "--parts", str(parts), "--db", str(db)]) == 0
    outputs, distinct, scores, distinct_scores = exactly_once(db, run_id)
    assert outputs == distinct == 91 and scores == distinct_scores
    asked_twice = sum(n - 1 for n in counts.values() if n > 1)
    assert asked_twice <= 4 * chunk * 4  # the chunks in flight when it died (2 per CPU)


def test_the_distributed_bench_runs_small(ray_cluster: _Cluster, tmp_path: Path) -> None:
    """``bench/bench_distributed.py`` on this module's cluster, small: it computes its figures
    (how fast is printed, never asserted)."""
    import importlib.util
    import json

    path = Path(__file__).resolve().parents[2] / "bench" / "bench_distributed.py"
    spec = importlib.util.spec_from_file_location("evalkit_bench_distributed", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "figures.json"
    args = ["--cases", "300", "--chunk-size", "50", "--latency-ms", "5", "--concurrency", "8"]
    assert bench.main([*args, "--address", ray_cluster.address, "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert figures["local"]["outputs"] == figures["local"]["requests"] == 300
    assert figures["ray"]["outputs"] == figures["ray"]["requests"] == 300
    assert figures["local"]["passed"] == figures["ray"]["passed"] == 300
    assert (figures["merge"]["parts"], figures["merge"]["outputs"]) == (6, 300)
    assert figures["merge"]["again_parts"] == 0


_DUPLICATES = """
- id: dup-{n}
  tags: [dup]
  input:
    messages:
      - role: user
        content: I'm locked out after too many password attempts and the reset email never comes.
  expect:
    - {{scorer: json_fields, args: {{fields: {{category: account}}}}}}
"""


def test_duplicate_requests_within_a_run_are_asked_on_ray_as_locally(
    ray_cluster: _Cluster, tmp_path: Path
) -> None:
    """Four cases with the same first request, one per chunk, chunks one at a time with a merge
    after each: a Ray run asks all four, as a local run does (neither answers a run's own
    duplicates from the cache). Before, each later chunk's prefetch found what the first had
    merged: 1 request and 3 cache hits on Ray, 4 requests locally."""

    from evalkit.corpus.cases import load_corpus
    from evalkit.corpus.suite import load_suite
    from evalkit.run.engines.ray_engine import RayOptions, SuiteSource, run_on_ray
    from evalkit.run.runner import RunOptions, run_suite
    from evalkit.store import open_store

    corpus_dir = tmp_path / "corpus"
    make_project(corpus_dir, demo=True)
    (corpus_dir / "cases" / "dup.yaml").write_text(
        "".join(_DUPLICATES.format(n=n) for n in range(4))
    )
    config = str(corpus_dir / "evalkit.yaml")
    with start_demo_server(noise=False, in_thread=True) as server:
        overrides = (f"system.base_url={server.base_url}", f"judge.base_url={server.base_url}")
        suite = load_suite(config, overrides=list(overrides))
        full = load_corpus(suite.root, user_template=suite.config.system.user_template)
        dups = replace(full, cases=tuple(c for c in full.cases if c.id.startswith("dup-")))
        assert len(dups.cases) == 4
        asked = {}
        with open_store(tmp_path / "local.duckdb", write=True) as store:
            server.reset_stats()
            local = run_suite(suite, dups, store, RunOptions(label="local", use_cache=True))
            asked["local"] = server.stats()["requests"]
        ray_options = RayOptions(chunk_size=1, chunks_in_flight=1, merge_every_s=0.0)
        with open_store(tmp_path / "ray.duckdb", write=True) as store:
            server.reset_stats()
            on_ray = run_on_ray(
                suite, dups, store, RunOptions(label="ray", use_cache=True),
                SuiteSource(config, overrides), PartsRoot(tmp_path / "parts"), ray_options,
            )  # fmt: skip
            asked["ray"] = server.stats()["requests"]
    assert (local.cache_hits, local.requests, asked["local"]) == (0, 4, 4)
    assert (on_ray.cache_hits, on_ray.requests, asked["ray"]) == (0, 4, 4)
    assert on_ray.cached_outputs == local.cached_outputs == 0


def test_periodic_merges_are_spaced_by_what_the_last_one_cost(
    ray_cluster: _Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each periodic merge waits ``MERGE_SHARE`` times as long as the last took, so merging
    while the run goes on stays a share of its wall time, however many parts pile up (before:
    every ``merge_every_s``, each merge costlier than the last). Merges are made slow here."""
    from evalkit.corpus.cases import load_corpus
    from evalkit.corpus.selection import resolve_selection
    from evalkit.corpus.suite import load_suite
    from evalkit.run.engines import ray_engine
    from evalkit.run.runner import RunOptions
    from evalkit.store import open_store

    slow_s, periodic = 0.3, list[float]()
    real_merge = ray_engine.merge_run

    def slow_merge(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("in_progress"):
            periodic.append(time.monotonic())
            time.sleep(slow_s)
        return real_merge(*args, **kwargs)

    monkeypatch.setattr(ray_engine, "merge_run", slow_merge)
    with start_demo_server(noise=False, latency_ms=150) as server:
        overrides = (f"system.base_url={server.base_url}", f"judge.base_url={server.base_url}")
        suite = load_suite(CONFIG, overrides=list(overrides))
        selection = resolve_selection(suite.config.tiers, "smoke")
        corpus = selection.apply(
            load_corpus(suite.root, user_template=suite.config.system.user_template)
        )
        options = RunOptions(label="spaced", use_cache=False, selection=selection.to_manifest())
        ray_options = ray_engine.RayOptions(chunk_size=1, chunks_in_flight=1, merge_every_s=0.0)
        with open_store(tmp_path / "s.duckdb", write=True) as store:
            started = time.monotonic()
            summary = ray_engine.run_on_ray(
                suite, corpus, store, options, ray_engine.SuiteSource(CONFIG, overrides),
                PartsRoot(tmp_path / "parts"), ray_options,
            )  # fmt: skip
            wall = time.monotonic() - started
    assert summary.outputs == 16 and summary.complete
    in_run = periodic[1:]  # the first records the run, before any chunk
    assert len(in_run) >= 1
    # spaced ≥ MERGE_SHARE × slow_s apart: at most wall / 3 s of them (+1 for the first)
    assert len(in_run) <= wall / (ray_engine.MERGE_SHARE * slow_s) + 1, (len(in_run), wall)
    gaps = [b - a for a, b in itertools.pairwise(in_run)]
    assert all(gap >= ray_engine.MERGE_SHARE * slow_s * 0.95 for gap in gaps), gaps

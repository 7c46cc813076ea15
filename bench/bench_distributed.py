"""Distributed figures: one corpus run by the local runner and by the Ray engine on 2 workers.

N = 20,000 one-turn cases (``json_valid`` and ``max_words``) written to a temp dir, served by
the demo simulator on loopback with a fixed latency and no noise. Three figures:

``local``   ``run_suite`` into a fresh store: wall time, requests the server saw.
``ray``     ``run_on_ray`` on a local 2-node cluster (1 CPU each, so 2 workers; loopback, no
            dashboard), parts on local disk, merged by the driver every 10 s and at the end:
            wall time (cluster start-up shown apart), requests the server saw.
``merge``   ``evalkit runs merge`` of the Ray run's parts into another fresh store, twice: the
            first merge (every part) and the second (nothing new), each timed, each per part
            and per row (then three re-merges that find nothing new: their median).

``shards`` (``--shards``, alone: no Ray, no model calls) what one ``--shard 1/4`` costs before
            its first request, by :func:`run_shard` itself with its chunks stood in for: the
            corpus read, the manifest, the units ordered, the cases part written. Three ways,
            in one process, alternated: today's (``load_corpus`` of the whole corpus), through
            the case index cold (every file parsed once, entries written, then only the
            share's cases built) and warm (entries read, only the share's cases built); and
            what warms the index for a CI matrix, ``evalkit cases index``
            (:func:`refresh_index`) on a fresh index, in this process alone and with one
            worker process per core (when there are several files: ``--per-file``), with the
            CPU seconds of this process and of the workers (on a busy machine the kernel's
            autogroups share one session's CPU among all its processes, so only the CPU
            figures say what free cores would give); seconds, the ratios and ``uptime``'s load.

On a 2-core machine the two Ray workers, the driver and the simulator share the same two
cores, so this measures the engine's overhead, not a speed-up; on a cluster each worker has
its own machine. Figures are printed, never asserted.

Usage:
    .venv/bin/python bench/bench_distributed.py
    .venv/bin/python bench/bench_distributed.py --cases 2000 --latency-ms 50
    .venv/bin/python bench/bench_distributed.py --address 127.0.0.1:6379   # an existing cluster
    .venv/bin/python bench/bench_distributed.py --shards --cases 200000   # a shard's own cost
    .venv/bin/python bench/bench_distributed.py --shards --cases 40000 --per-file 5000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # runnable from a checkout without installing

from evalkit.corpus.cases import load_corpus  # noqa: E402
from evalkit.corpus.suite import load_suite  # noqa: E402
from evalkit.demo.server import start_demo_server  # noqa: E402
from evalkit.run.engines.ray_engine import (  # noqa: E402
    LOOPBACK_ENV,
    NAMESPACE,
    RayOptions,
    SuiteSource,
    run_on_ray,
)
from evalkit.run.merging import merge_run  # noqa: E402
from evalkit.run.runner import RunOptions, run_suite  # noqa: E402
from evalkit.store import open_store  # noqa: E402
from evalkit.store.parts import PartsRoot  # noqa: E402

SYSTEM_PROMPT = "Respond only with a JSON object. Keep the reply under 40 words.\n"


def write_corpus(root: Path, n_cases: int, concurrency: int, per_file: int = 50_000) -> Path:
    """N distinct one-turn cases, ``per_file`` to a file (a cases file may hold 20 MB at
    most: 50,000 of these); returns the suite config."""
    (root / "cases").mkdir(parents=True)
    (root / "prompts").mkdir()
    (root / "prompts" / "system.md").write_text(SYSTEM_PROMPT, encoding="utf-8")
    for first in range(0, n_cases, per_file):
        (root / "cases" / f"synthetic-{first // per_file:02d}.yaml").write_text(
            "".join(
                f"- id: synthetic-{i:05d}\n"
                "  input: {messages: [{role: user, content: "
                f"'Where is my order {10_000 + i}?'}}]}}\n"
                "  expect: [json_valid, {max_words: 200}]\n"
                for i in range(first, min(n_cases, first + per_file))
            ),
            encoding="utf-8",
        )
    config = root / "evalkit.yaml"
    config.write_text(
        "suite: bench-distributed\n"
        "system:\n"
        "  model: demo-support-1\n"
        "  base_url: http://127.0.0.1:9/v1\n"
        "  prompt: prompts/system.md\n"
        "  transport: lean\n"
        "  sampling: {temperature: 0, seed: 7, max_tokens: 200}\n"
        f"concurrency: {concurrency}\n"
        "cache: false\n",
        encoding="utf-8",
    )
    return config


def _start_cluster(workers: int) -> tuple[Any, float]:
    """A local cluster of ``workers`` 1-CPU nodes on 127.0.0.1; its start-up time."""
    os.environ.setdefault(LOOPBACK_ENV, "0")
    import ray
    from ray.cluster_utils import Cluster

    started = time.perf_counter()
    node = {"num_cpus": 1, "node_ip_address": "127.0.0.1", "object_store_memory": 80 * 1024**2}
    cluster = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
    for _ in range(workers - 1):
        cluster.add_node(**node)
    ray.init(address=cluster.address, namespace=NAMESPACE, log_to_driver=False)
    return cluster, time.perf_counter() - started


def _merge_a_straggler(db: Path, parts: PartsRoot, run_id: str) -> float:
    """Write a second attempt of the run's first chunk (as a straggler would, late) and time
    the merge that takes it (its rows are all duplicates: the first completion won)."""
    first = parts.parts(run_id, "outputs")[0]
    frames = {
        table: parts.read_frame(
            next(p for p in parts.parts(run_id, table) if (p.chunk_id, p.attempt) == key)
        )
        for table, key in (
            ("outputs", (first.chunk_id, first.attempt)),
            ("scores", (first.chunk_id, first.attempt)),
        )
    }
    parts.write_chunk(run_id, first.chunk_id, frames["outputs"], frames["scores"], {})
    started = time.perf_counter()
    with open_store(db, write=True) as store:
        merged = merge_run(store, parts, run_id)
    assert merged.result.parts_merged == 1
    return round(time.perf_counter() - started, 3)


def _shard_cost(config: Path, how: str, index: Path, run: int) -> dict[str, Any]:
    """One ``--shard 1/4``'s cost before its first request (``how``: ``whole``, today's load
    of every case; ``cold``/``warm``: read through the case index under ``index``), by
    run_shard with its chunks stood in for (no model call)."""
    from evalkit.corpus.case_facts import CorpusFacts, scan_corpus
    from evalkit.run import sharded
    from evalkit.run.shards import Shard

    async def no_chunk(*_: Any, **__: Any) -> sharded.ChunkResult:
        return sharded.ChunkResult(
            chunk_id="stood-in", attempt=1, outputs=0, requests=0, retries=0, cache_hits=0
        )

    suite = load_suite(config)
    started = time.perf_counter()
    if how == "whole":
        corpus: Any = load_corpus(config.parent, defer_scorers=True)
    else:
        corpus = scan_corpus(config.parent, index_dir=index, index_only=True)  # as a shard
    read_s = time.perf_counter() - started
    real, sharded.run_chunk = sharded.run_chunk, no_chunk  # type: ignore[assignment]
    try:
        summary = sharded.run_shard(
            suite, corpus, RunOptions(label="shard", progress=False), shard=Shard(1, 4),
            run_id=f"bench-{how}-{run}", root=PartsRoot(index.parent / f"parts-{how}-{run}"),
        )  # fmt: skip
    finally:
        sharded.run_chunk = real  # type: ignore[assignment]
    total = time.perf_counter() - started
    built = corpus.counts.cases_built if isinstance(corpus, CorpusFacts) else summary.corpus_cases
    return {"s": round(total, 2), "read_s": round(read_s, 2), "built": built,
            "share": summary.cases, "load": os.getloadavg()[0]}  # fmt: skip


def _index_cost(config: Path, index: Path, workers: int | None) -> dict[str, Any]:
    """``evalkit cases index`` on a fresh index (``workers`` None: one process per core):
    wall seconds, CPU seconds of this process and of its workers, files the workers loaded."""
    import resource
    import shutil

    from evalkit.corpus.index_refresh import refresh_index

    shutil.rmtree(index, ignore_errors=True)
    here, workers_cpu = resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN
    before = [resource.getrusage(who) for who in (here, workers_cpu)]
    started = time.perf_counter()
    done = refresh_index(config.parent, index_dir=index, workers=workers)
    wall = time.perf_counter() - started
    after = [resource.getrusage(who) for who in (here, workers_cpu)]
    pairs = zip(after, before, strict=True)
    cpu = [max(0.0, a.ru_utime + a.ru_stime - b.ru_utime - b.ru_stime) for a, b in pairs]
    return {"s": round(wall, 2), "cpu_s": round(cpu[0], 2), "workers_cpu_s": round(cpu[1], 2),
            "apart": done.counts.files_in_workers, "load": os.getloadavg()[0]}  # fmt: skip


def shard_figures(cases: int, rounds: int, per_file: int) -> dict[str, Any]:
    """``shards``: cold and warm index against today's whole load, and the index job serial
    and with workers, alternated ``rounds`` times (each cold one on a fresh index); medians."""
    import shutil

    with tempfile.TemporaryDirectory(prefix="evalkit-bench-shard-") as tmp:
        config = write_corpus(Path(tmp) / "corpus", cases, 8, per_file)
        index, job = Path(tmp) / "index", Path(tmp) / "index-job"
        runs: dict[str, list[dict[str, Any]]] = {
            "whole": [], "cold": [], "warm": [], "job_serial": [], "job_workers": []
        }  # fmt: skip
        for run in range(rounds):
            shutil.rmtree(index, ignore_errors=True)
            runs["whole"].append(_shard_cost(config, "whole", index, run))
            runs["cold"].append(_shard_cost(config, "cold", index, run))
            runs["warm"].append(_shard_cost(config, "warm", index, run))
            runs["job_serial"].append(_index_cost(config, job, 1))
            runs["job_workers"].append(_index_cost(config, job, None))
    figures: dict[str, Any] = {
        how: {key: statistics.median(r[key] for r in got) for key in got[0]}
        for how, got in runs.items()
    }
    figures["cases"] = cases
    figures["warm_vs_whole"] = round(figures["whole"]["s"] / figures["warm"]["s"], 2)
    figures["warm_vs_cold"] = round(figures["cold"]["s"] / figures["warm"]["s"], 2)
    serial, apart = figures["job_serial"], figures["job_workers"]
    figures["job_wall_ratio"] = round(serial["s"] / apart["s"], 2)
    # CPU of the work (this process's + the workers'): what the workers add
    figures["job_cpu_ratio"] = round(
        (apart["cpu_s"] + apart["workers_cpu_s"]) / (serial["cpu_s"] + serial["workers_cpu_s"]), 2
    )
    figures["per_file"] = per_file
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=20_000)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--concurrency", type=int, default=64, help="per process")
    parser.add_argument("--chunk-size", type=int, default=500)
    parser.add_argument("--workers", type=int, default=2, help="nodes of the local cluster")
    parser.add_argument("--address", help="use this running cluster instead of starting one")
    parser.add_argument("--json", metavar="FILE", help="write the figures as JSON")
    parser.add_argument(
        "--shards", action="store_true", help="only the shard figure: one --shard 1/4's own cost"
    )
    parser.add_argument("--rounds", type=int, default=2, help="with --shards: alternations")
    parser.add_argument(
        "--per-file", type=int, default=50_000, help="with --shards: cases per case file"
    )
    args = parser.parse_args(argv)
    if args.shards:
        shards = shard_figures(args.cases, args.rounds, args.per_file)
        files = -(-args.cases // args.per_file)
        print(f"{args.cases} cases in {files} files, one --shard 1/4 before its first request "
              f"(medians of {args.rounds}; {os.cpu_count()} cores):")  # fmt: skip
        for how, what in (("whole", "whole load (today)"), ("cold", "index, cold"),
                          ("warm", "index, warm")):  # fmt: skip
            fig = shards[how]
            print(f"  {what:20}: {fig['s']:7.2f} s (corpus read {fig['read_s']:.2f} s), "
                  f"{fig['built']:.0f} cases built, {fig['share']:.0f} in the share; load "
                  f"{fig['load']:.1f}")  # fmt: skip
        print(f"  warm index: {shards['warm_vs_whole']:.2f}x faster than the whole load, "
              f"{shards['warm_vs_cold']:.2f}x than a cold index")  # fmt: skip
        for how, what in (("job_serial", "cases index, serial"),
                          ("job_workers", "cases index, workers")):  # fmt: skip
            fig = shards[how]
            print(f"  {what:20}: {fig['s']:7.2f} s; CPU {fig['cpu_s']:.2f} s here + "
                  f"{fig['workers_cpu_s']:.2f} s in workers ({fig['apart']:.0f} files); load "
                  f"{fig['load']:.1f}")  # fmt: skip
        print(f"  cases index with workers: {shards['job_wall_ratio']:.2f}x faster (wall), "
              f"{shards['job_cpu_ratio']:.2f}x the CPU of serial")  # fmt: skip
        if args.json:
            Path(args.json).write_text(json.dumps({"shards": shards}, indent=2))
        return 0

    figures: dict[str, Any] = {"cases": args.cases, "latency_ms": args.latency_ms}
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="evalkit-bench-dist-") as tmp:
        root = Path(tmp)
        config = write_corpus(root / "corpus", args.cases, args.concurrency)
        with start_demo_server(noise=False, latency_ms=args.latency_ms) as server:
            overrides = (f"system.base_url={server.base_url}",)
            suite = load_suite(config, overrides=list(overrides))
            corpus = load_corpus(config.parent)

            started = time.perf_counter()
            with open_store(root / "local.duckdb", write=True) as store:
                local = run_suite(suite, corpus, store, RunOptions(label="local", progress=False))
            figures["local"] = {
                "wall_s": round(time.perf_counter() - started, 2),
                "requests": server.stats()["requests"],
                "outputs": local.outputs,
                "passed": local.passed,
            }

            cluster, startup_s = (None, 0.0) if args.address else _start_cluster(args.workers)
            try:
                server.reset_stats()
                parts = PartsRoot(root / "parts")
                options = RayOptions(address=args.address, chunk_size=args.chunk_size)
                started = time.perf_counter()
                with open_store(root / "ray.duckdb", write=True) as store:
                    on_ray = run_on_ray(
                        suite, corpus, store, RunOptions(label="ray", progress=False),
                        SuiteSource(str(config), overrides), parts, options,
                    )  # fmt: skip
                figures["ray"] = {
                    "workers": args.workers,
                    "cluster_startup_s": round(startup_s, 2),
                    "wall_s": round(time.perf_counter() - started, 2),
                    "requests": server.stats()["requests"],
                    "outputs": on_ray.outputs,
                    "passed": on_ray.passed,
                    "parts": len(parts.parts(on_ray.run_id, "outputs")),
                }
            finally:
                if cluster is not None:
                    import ray

                    ray.shutdown()
                    cluster.shutdown()
        merges = []
        for _ in range(4):  # every part, then nothing new three times (the median is shown)
            started = time.perf_counter()
            with open_store(root / "merged.duckdb", write=True) as store:
                merged = merge_run(store, parts, on_ray.run_id)
            merges.append((round(time.perf_counter() - started, 3), merged.result.parts_merged))
        late_s = _merge_a_straggler(root / "merged.duckdb", parts, on_ray.run_id)
        figures["merge"] = {
            "first_s": merges[0][0],
            "parts": merges[0][1],
            "outputs": merged.result.stored,
            "again_s": statistics.median(m[0] for m in merges[1:]),
            "again_parts": max(m[1] for m in merges[1:]),
            # the costs that must stay linear: per part and per row of the first merge
            "ms_per_part": round(1000 * merges[0][0] / max(1, merges[0][1]), 3),
            "us_per_row": round(1e6 * merges[0][0] / max(1, merged.result.stored), 2),
            # a re-merge with nothing new, per part of the run and per stored row: what must
            # stay flat (it reads no part and counts no key; it lists the parts once)
            "again_ms_per_part": round(
                1000 * statistics.median(m[0] for m in merges[1:]) / max(1, merges[0][1]), 4
            ),
            "again_us_per_row": round(
                1e6 * statistics.median(m[0] for m in merges[1:]) / max(1, merged.result.stored), 3
            ),
            # a merge that finds one new part (a straggler's late attempt of a merged chunk):
            # what a driver's periodic merge costs at this size of run
            "one_late_part_s": late_s,
        }
        figures["ray"]["ms_per_chunk"] = round(
            1000 * figures["ray"]["wall_s"] / max(1, figures["ray"]["parts"]), 2
        )
        figures["ray"]["us_per_row"] = round(
            1e6 * figures["ray"]["wall_s"] / max(1, figures["ray"]["outputs"]), 1
        )

    figures["loadavg_1min"] = [load_before, os.getloadavg()[0]]
    figures["cores"] = os.cpu_count()
    figures["ray_vs_local"] = round(figures["ray"]["wall_s"] / figures["local"]["wall_s"], 3)
    loc, ray_fig, merge = figures["local"], figures["ray"], figures["merge"]
    print(
        f"{args.cases} cases, simulator latency {args.latency_ms:g} ms; load "
        f"{load_before:.1f} -> {figures['loadavg_1min'][1]:.1f} on {figures['cores']} cores"
    )
    print(
        f"  local runner : {loc['wall_s']:8.2f} s  {loc['requests']} requests  "
        f"{loc['outputs'] / loc['wall_s']:7.0f} outputs/s"
    )
    print(
        f"  ray, {args.workers} workers: {ray_fig['wall_s']:8.2f} s  "
        f"{ray_fig['requests']} requests  "
        f"{ray_fig['outputs'] / ray_fig['wall_s']:7.0f} outputs/s  ({ray_fig['parts']} chunks; "
        f"cluster start-up {ray_fig['cluster_startup_s']:.2f} s not included)"
    )
    print(
        f"  merge        : {merge['first_s']:8.2f} s for {merge['parts']} parts "
        f"({merge['outputs']} outputs; {merge['ms_per_part']:.1f} ms/part, "
        f"{merge['us_per_row']:.1f} µs/row); again: {merge['again_s']:.3f} s, "
        f"{merge['again_parts']} parts ({merge['again_ms_per_part']:.3f} ms per part of the run, "
        f"{merge['again_us_per_row']:.3f} µs per row); one late part: "
        f"{merge['one_late_part_s']:.3f} s"
    )
    print(
        f"  ray per chunk: {ray_fig['ms_per_chunk']:.1f} ms, per row {ray_fig['us_per_row']:.0f} µs"
    )
    print(f"  ray over the local runner: {figures['ray_vs_local']:.2f}x the wall")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

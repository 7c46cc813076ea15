"""The benchmark scripts in ``bench/``, run small so they cannot rot.

Each test imports a script and calls its ``main(argv)`` with reduced sizes and ``--json``, then
checks what it computed (row counts, verdict counts, intervals), never how fast it was.
"""

from __future__ import annotations

import importlib.util
import json
import math
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _sandbox_problem() -> str | None:
    from evalkit.scorers import sandbox

    return sandbox.isolation_problem()


ROUNDS_2 = ("--rounds", "2")
MEM_ITERS = ("--mem-iters", "100", "1000", "--mem-iters-index", "10", "100")


_LOADED: list[ModuleType] = []


@pytest.fixture(autouse=True)
def _no_spawner_outlives_a_test() -> Iterator[None]:
    """bench_process keeps a spawner process until exit; stop every one a test started."""
    yield
    while _LOADED:
        stop = getattr(_LOADED.pop(), "stop_spawner", None)
        if stop is not None:
            stop()


def _script(name: str) -> ModuleType:
    """Import ``bench/<name>.py`` (the directory is not a package)."""
    spec = importlib.util.spec_from_file_location(f"evalkit_bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    _LOADED.append(module)
    return module


def _run(name: str, args: list[str], tmp_path: Path) -> dict[str, Any]:
    """``main(args + --json)`` of one script; its exit code must be 0; returns the figures."""
    out = tmp_path / f"{name}.json"
    assert _script(name).main([*args, "--json", str(out)]) == 0
    return json.loads(out.read_text())


def _evalkit_run_is_complete(fig: dict[str, Any], cases: int, scorers: int = 2) -> None:
    assert fig["outputs"] == cases  # one stored output per (case, replay)
    assert fig["passed"] == cases  # the simulator answers bare JSON: every scorer passes
    assert fig["scores"] == cases * scorers  # one score row per (output, scorer)


def test_throughput_cpu_bound_alternates_evalkit_and_the_bare_loop(tmp_path: Path) -> None:
    cases = 24
    f = _run(
        "bench_throughput",
        ["cpu", "--cases", str(cases), "--latency-ms", "5", "--concurrency", "4", "8", *ROUNDS_2],
        tmp_path,
    )
    assert f["cores"] and set(f["by_concurrency"]) == {"4", "8"}
    for block in f["by_concurrency"].values():
        assert len(block["rounds"]) == 2
        for r in block["rounds"]:
            for transport in ("openai", "lean"):
                _evalkit_run_is_complete(r[transport], cases)
                ratio = r[f"ratio_{transport}"]
                assert ratio == pytest.approx(r[transport]["wall_s"] / r["bare"]["wall_s"])
            assert r["bare"]["outputs"] == r["bare"]["passed"] == cases and r["bare"]["scores"] == 0
        ratios = [r["ratio_lean"] for r in block["rounds"]]
        assert block["summary"]["median_ratio_lean"] == pytest.approx(statistics.median(ratios))
    for concurrency, block in f["by_concurrency"].items():
        assert block["limit_s"] == pytest.approx(cases * 0.005 / int(concurrency))


def test_throughput_latency_bound_reports_the_limit(tmp_path: Path) -> None:
    f = _run(
        "bench_throughput",
        ["latency", "--cases", "16", "--latency-ms", "40", "--concurrency", "4"],
        tmp_path,
    )
    assert f["limit_s"] == pytest.approx(16 * 0.040 / 4)
    for transport in ("openai", "lean"):
        run = f["runs"][transport]
        _evalkit_run_is_complete(run, 16)
        assert run["ratio_to_limit"] == pytest.approx(run["run_phase_s"] / f["limit_s"])
    bare = f["bare"]
    assert bare["outputs"] == bare["passed"] == 16
    assert bare["ratio_to_limit"] == pytest.approx(bare["wall_s"] / f["limit_s"])


def test_throughput_progress_on_and_off_store_the_same(tmp_path: Path) -> None:
    f = _run(
        "bench_throughput",
        ["progress", "--cases", "12", "--latency-ms", "5", "--concurrency", "4", "--rounds", "1"],
        tmp_path,
    )
    assert isinstance(f["tty"], bool)
    (r,) = f["rounds"]
    _evalkit_run_is_complete(r["on"], 12)
    _evalkit_run_is_complete(r["off"], 12)
    assert r["ratio"] == pytest.approx(r["on"]["wall_s"] / r["off"]["wall_s"])


def test_analysis_counts_match_the_generator(tmp_path: Path) -> None:
    cases, replays = 400, 5
    f = _run(
        "bench_analysis",
        ["--cases", str(cases), "--replays", str(replays), "--batch-cases", "150"],
        tmp_path,
    )
    assert f["verified"] and f["measured"] == f["expected"]
    assert f["outputs"] == cases * replays * 2
    # 3 scorers on every output, a 4th on every 4th case; errored outputs have none
    assert 3 * f["outputs"] * 0.98 < f["score_rows"] < 3.25 * f["outputs"]
    for side in ("base", "cand"):
        counts = f["measured"][side]
        assert counts["passed"] + counts["failed"] + counts["error"] == cases
        assert counts["error"] == 1  # case 11 errors on every replay in both runs
    assert f["measured"]["paired"] == cases - 1  # case 7 is edited in the candidate
    assert f["all_slice"]["n"] == cases - 1 - 1  # and case 11 errored on both sides
    assert f["slices"] == 16 + 1  # every tag, then ALL
    # case 11 errors in the candidate: the gate cannot verify it, so it never says PASSED
    assert f["gate"]["status"] in {"BLOCKED", "UNVERIFIED"}
    assert set(f["critical"]) == {"tag-03", "tag-05"}


def test_bootstrap_intervals_bracket_the_true_difference(tmp_path: Path) -> None:
    f = _run(
        "bench_bootstrap",
        ["--cases", "1000", "--iters", "2000", "--repeats", "1", *MEM_ITERS],
        tmp_path,
    )
    distinct = {k: v["distinct_differences"] for k, v in f["kinds"].items()}
    assert distinct["passfail"] <= 3 and distinct["judge"] == 9  # multinomial path
    assert distinct["continuous"] == 1000  # index path
    for kind, r in f["kinds"].items():
        assert r["lo"] < r["diff"] < r["hi"], kind
        assert r["brackets_true"], kind
        want = {"10", "100"} if kind == "continuous" else {"100", "1000"}
        assert set(r["peak_mib_by_iters"]) == want
        assert all(math.isfinite(v) and v >= 0 for v in r["peak_mib_by_iters"].values())


def test_rescore_rows_match_the_stored_outputs(tmp_path: Path) -> None:
    cases, replays = 60, 3
    f = _run("bench_rescore", ["--cases", str(cases), "--replays", str(replays)], tmp_path)
    assert f["verified"] and f["measured"] == f["expected"]
    assert f["outputs"] == cases * replays
    errored = sum(1 for row in range(cases * replays) if row % 97 == 5)
    assert f["measured"]["rescored"] == cases * replays - errored
    assert f["measured"]["score_rows"] == 4 * f["measured"]["rescored"]
    assert f["carried"] == 0 and f["scoring_id"].endswith("/s1")


def _process_run_is_complete(fig: dict[str, Any], cases: int, transport: str) -> None:
    """One ``evalkit run`` process of bench_process: every request served, every output and
    score stored and passed, and the transport it used recorded in the manifest."""
    assert fig["served"] == cases  # the server's own request counter
    assert fig["outputs"] == fig["ok_outputs"] == cases
    assert fig["scores"] == fig["passed_scores"] == 2 * cases
    assert fig["transport"] == transport
    assert fig["wall_s"] > 0 and fig["cpu_s"] > 0 and fig["peak_rss_mib"] > 0


def _bare_run_is_complete(fig: dict[str, Any], cases: int) -> None:
    assert fig["served"] == fig["outputs"] == cases and fig["scores"] == 0


def test_process_whole_runs_evalkit_and_the_bare_loop_as_processes(tmp_path: Path) -> None:
    cases = 12
    args = ["whole", "--cases", str(cases), "--latency-ms", "5", "--concurrency", "4"]
    runs = ["default", "openai", "lean"]
    f = _run("bench_process", [*args, "--rounds", "1", "--transport", *runs], tmp_path)
    (r,) = f["rounds"]
    _bare_run_is_complete(r["bare"], cases)
    _bare_run_is_complete(r["floor"], cases)  # the bare aiohttp loop
    _process_run_is_complete(r["default"], cases, "lean")  # auto: lean for a named base_url
    _process_run_is_complete(r["openai"], cases, "openai")
    _process_run_is_complete(r["lean"], cases, "lean")
    for t in ["floor", *runs]:
        assert r[f"ratio_{t}"] == pytest.approx(r[t]["wall_s"] / r["bare"]["wall_s"])
        assert f["summary"][f"median_ratio_{t}"] == pytest.approx(r[f"ratio_{t}"])


def test_process_corpus_demo_mix_builds_only_two_cases_when_two_are_selected(
    tmp_path: Path,
) -> None:
    sizes = [91, 300]  # 91: every demo case's expect list once
    args = ["corpus", "--mix", "demo", "--sizes", *map(str, sizes), "--rounds", "1"]
    f = _run("bench_process", args, tmp_path)
    assert f["mix"] == "demo"
    for n in sizes:
        entry = f["by_size"][str(n)]
        assert entry["loaded"] == entry["built"] == n  # every case's scorers built
        assert entry["runs"][0]["two_selected"] == entry["two_built"] == 2  # deferred: two


def test_process_corpus_loads_every_case_at_every_size(tmp_path: Path) -> None:
    sizes = [30, 60, 10_050]  # the last spans two files (10,000 cases per file)
    f = _run(
        "bench_process",
        ["corpus", "--sizes", *map(str, sizes), "--rounds", "1"],
        tmp_path,
    )
    first = f["by_size"][str(sizes[0])]
    for n in sizes:
        entry = f["by_size"][str(n)]
        assert entry["loaded"] == n  # every case read and validated
        assert entry["ms_per_case"] == pytest.approx(1000 * entry["median_load_s"] / n)
        ratio = entry["ms_per_case"] / first["ms_per_case"]
        assert entry["ms_per_case_vs_smallest"] == pytest.approx(ratio)


def test_process_startup_runs_one_case(tmp_path: Path) -> None:
    f = _run("bench_process", ["startup", "--rounds", "1"], tmp_path)
    (r,) = f["rounds"]
    assert r["served"] == r["outputs"] == 1
    assert r["above_import_openai_s"] == pytest.approx(r["run_one_case_s"] - r["import_openai_s"])


def test_process_rss_and_curve_count_what_they_measure(tmp_path: Path) -> None:
    sizes = [10, 30]
    common = ["--sizes", *map(str, sizes), "--latency-ms", "5", "--concurrency", "4"]
    common += ["--rounds", "1", "--transport", "lean"]
    rss = _run("bench_process", ["rss", *common], tmp_path)
    curve = _run("bench_process", ["curve", *common], tmp_path)
    for n in sizes:
        (r,) = rss["by_size"][str(n)]["rounds"]
        _bare_run_is_complete(r["bare"], n)
        _process_run_is_complete(r["lean"], n, "lean")
        (c,) = curve["by_size"][str(n)]["rounds"]
        _bare_run_is_complete(c["bare"], n)
        _process_run_is_complete(c["lean"], n, "lean")
    small, large = (rss["by_size"][str(n)]["median_rss_mib_lean"] for n in sizes)
    assert rss["kib_per_case"]["lean"] == pytest.approx(1024 * (large - small) / (30 - 10))
    # linearity is computed from the figures per case, the smallest size being 1.0
    entries = [curve["by_size"][str(n)] for n in sizes]
    assert entries[0]["cpu_ms_per_case_lean_vs_smallest"] == pytest.approx(1.0)
    for e, n in zip(entries, sizes, strict=True):
        assert e["cpu_ms_per_case_lean"] == pytest.approx(1000 * e["median_cpu_s_lean"] / n)


def test_process_measures_a_childs_own_peak_rss_not_the_benchmarks() -> None:
    """A child forked from a big process reports that process's RSS as its own floor; forked
    from bench_process's spawner it does not (the bare loop read 76 MiB for this reason)."""
    ballast = bytearray(160 * 1024 * 1024)
    ballast[::4096] = b"\x01" * len(ballast[::4096])  # touch every page: it is resident
    small = _script("bench_process").measure([sys.executable, "-c", "x = bytearray(40 << 20)"])
    assert 40 < small.peak_rss_mib < 100, small
    assert len(ballast) == 160 * 1024 * 1024


def test_judge_bench_serves_and_scores_both_calls_and_rescores_from_the_cache(
    tmp_path: Path,
) -> None:
    cases = 12  # more than the 2c workers: a worker's judge call precedes its next system call
    args = ["--cases", str(cases), "--concurrency", "2", "--latency-ms", "5", "--rounds", "1"]
    f = _run("bench_judge", args, tmp_path)
    (r,) = f["rounds"]
    for side in ("bare", "evalkit"):
        assert r[side]["system_requests"] == r[side]["judge_requests"] == cases
        assert r[side]["passed_scores"] == cases  # the server's verdict is 5, min_score 4
    e = r["evalkit"]
    assert e["outputs"] == e["scores"] == cases and e["score_errors"] == 0
    assert e["overlap"]  # judge calls run while system calls are still being sent
    assert e["rescore"]["system_requests"] == e["rescore"]["judge_requests"] == 0  # cached
    assert e["rescore"]["judge_scores_after"] == 2 * cases  # a new scoring beside the run's
    assert f["summary"]["rescore_requests"] == 0
    assert e["rescore_changed_judge"]["judge_requests"] == cases  # the snapshot is in the key
    assert r["ratio"] == pytest.approx(e["wall_s"] / r["bare"]["wall_s"])


def test_agent_bench_serves_every_tool_step_and_scores_every_replay(tmp_path: Path) -> None:
    cases, replays = 6, 2
    args = ["--cases", str(cases), "--concurrency", "2", "--latency-ms", "2", "--rounds", "1"]
    f = _run("bench_agent", [*args, "--replays", str(replays), "--server", "both"], tmp_path)
    assert set(f["servers"]) == {"raw", "aiohttp"}  # the same checks hold against either server
    for server in f["servers"].values():
        (r,) = server["rounds"]
        expected = (("agent", cases), ("single", 4 * cases), ("replays", replays * cases))
        for side, outputs in expected:
            run = r[side]
            assert run["outputs"] == run["ok_outputs"] == outputs
            assert run["scores"] == run["passed_scores"] == 2 * outputs  # two scorers, all pass
            assert run["cpu_ms_per_request"] == pytest.approx(1000 * run["cpu_s"] / run["served"])
        assert r["agent"]["served"] == r["single"]["served"] == 4 * cases  # 3 tool steps + answer
        assert r["agent"]["tool_calls"] == 3 * cases and r["single"]["tool_calls"] == 0
        assert r["replays"]["served"] == 4 * cases * replays
        limit = 4 * cases * 0.002 / 2
        assert r["ratio_to_limit"] == pytest.approx(r["agent"]["wall_s"] / limit)
        # the bare aiohttp floor ran the same tool loop: every step served, every fixture answered
        bare = r["bare"]
        assert bare["served"] == 4 * cases and bare["tool_calls"] == 3 * cases
        assert bare["outputs"] == cases
        assert r["agent_vs_bare"] == pytest.approx(r["agent"]["wall_s"] / bare["wall_s"])
        # so did the bare AsyncOpenAI loop, the reference a user would write
        openai = r["openai"]
        assert openai["served"] == 4 * cases and openai["tool_calls"] == 3 * cases
        assert openai["outputs"] == cases
        assert r["agent_vs_openai"] == pytest.approx(r["agent"]["wall_s"] / openai["wall_s"])
        for side in ("bare", "openai", "agent", "single", "replays"):  # both processes probed
            run = r[side]
            assert run["server_cpu_s"] > 0 and 0 < run["loop_cpu_s"] <= run["cpu_s"]
            assert 0 < run["loop_wall_s"] <= run["wall_s"]
            assert run["loop_lag_max_ms"] >= run["loop_lag_mean_ms"] >= 0
            assert run["server_lag_max_ms"] >= run["server_lag_mean_ms"] >= 0


def test_memory_bench_runs_every_stage_and_each_stores_the_whole_run(tmp_path: Path) -> None:
    n = 300
    (f,) = _run("bench_memory", ["--sizes", str(n), "--chunk", "120"], tmp_path)
    assert f["outputs"] == n
    for stage in ("push", "pull", "merge", "gate"):
        assert f[stage]["code"] == 0 and f[stage]["peak_mib"] > 0 and f[stage]["cpu_s"] > 0
    assert f["pull"]["outputs"] == n  # the pulled store holds the candidate's every output
    assert f["merge"]["outputs"] == n  # the merged parts (3 chunks) are the whole run


def test_memory_bench_stages_get_the_callers_allocator_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bench = _script("bench_memory")
    monkeypatch.setenv("_RJEM_MALLOC_CONF", "dirty_decay_ms:500")  # as importing polars sets
    said = tmp_path / "conf.txt"
    show = f"import os, pathlib; pathlib.Path({str(said)!r}).write_text(repr(os.environ.get("
    show += "'_RJEM_MALLOC_CONF')))"
    monkeypatch.setattr(bench, "_CALLERS_MALLOC_CONF", None)  # a shell that set none
    bench.run_stage([sys.executable, "-c", show], tmp_path)
    assert said.read_text() == "None"  # evalkit.cli then sets its own (freed pages returned)
    monkeypatch.setattr(bench, "_CALLERS_MALLOC_CONF", "narenas:1")
    bench.run_stage([sys.executable, "-c", show], tmp_path)
    assert said.read_text() == "'narenas:1'"


def test_corpus_memory_loads_every_case_each_way(tmp_path: Path) -> None:
    n = 40
    rows = _run("bench_corpus_memory", ["--cases", str(n)], tmp_path)
    ways = [(r["deferred"], r["whole_file"]) for r in rows]
    assert ways == [(False, False), (True, False), (True, True)]
    for r in rows:
        assert r["cases"] == n  # each fresh process loaded the whole corpus
        assert r["peak_bytes"] >= r["kept_bytes"] > 0
        assert r["bytes_per_case"] == pytest.approx(r["kept_bytes"] / n)


@pytest.mark.skipif(_sandbox_problem() is not None, reason=f"no isolation: {_sandbox_problem()}")
def test_sandbox_bench_runs_both_modes_alternately(tmp_path: Path) -> None:
    f = _run("bench_sandbox", ["--runs", "2"], tmp_path)
    assert f["runs"] == 2
    assert f["ratio"] == pytest.approx(f["isolated_s"] / f["unsafe_local_s"])


def test_cold_shards_count_what_each_shard_read_and_built(tmp_path: Path) -> None:
    """``bench_cold_shards``: a shard reading as before builds every case; a cold one builds
    its share alone; shards started together index every case once in all."""
    f = _run("bench_cold_shards", ["--cases", "200", "--shards", "4", "--per-file", "25"], tmp_path)
    (kept,), (alone,), (warm,) = f["kept"], f["alone"], f["warm"]
    assert (kept["built"], kept["indexed"]) == (200, 0)
    assert (alone["built"], alone["indexed"], alone["files_parsed"]) == (50, 200, 8)
    together = f["together"]
    assert len(together) == 4 and sum(s["indexed"] for s in together) == 200
    assert sum(s["files_parsed"] for s in together) == 8
    assert [s["built"] for s in together] == [s["share"] for s in together] == [50] * 4
    assert (warm["built"], warm["indexed"], warm["files_parsed"]) == (50, 0, 0)
    assert [(s["built"], s["files_parsed"]) for s in f["together_kept"]] == [(200, 8)] * 4


def test_periodic_merge_bench_reads_each_part_once_and_stores_every_output(
    tmp_path: Path,
) -> None:
    figures = _run("bench_periodic_merge", ["--sizes", "2400", "--every", "3"], tmp_path)
    small = figures["2400"]
    assert small["merges"] == 4 and small["complete"] and small["stored"] == 2400
    assert small["files_read"] == small["part_files"] == 3 * 12 + 2


def test_shared_store_pushes_bench_pulls_every_mark_and_keeps_few_snapshots(
    tmp_path: Path,
) -> None:
    from evalkit.store.shared.compaction import KEEP_SNAPSHOTS

    figures = _run(
        "bench_shared_store", ["--only", "pushes", "--pushes", "12", "--push-cases", "20"], tmp_path
    )
    marks = figures["pushes"]
    assert [m["pushes"] for m in marks] == [1, 10, 12]
    assert all(m["push_cpu_s"] > 0 and m["pull_cpu_s"] > 0 for m in marks)
    # every table's old snapshots expired after each push: the count stops growing
    assert all(m["most_snapshots"] <= KEEP_SNAPSHOTS for m in marks)

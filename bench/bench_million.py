"""End to end at a million cases: the real pipeline, each stage its own ``evalkit`` process,
with wall, CPU and peak RSS per stage and the CPU per case at each size, so growth shows.

Per size N: N one-turn cases (``bench_distributed``'s, written 2,000 to a file as importers
write them, ``evalkit.corpus.file_parts``) and a suite pointed at a loopback mock (a bare
``asyncio.Protocol`` responder, :data:`loopback.RAW_SERVE`: a reply built once, so the figures
are evalkit's, not the server's; it logs when the first request arrives). Then, each as an
``evalkit`` CLI process whose CPU and peak RSS the kernel gives (``wait4``):

``index``        ``evalkit cases index``: the case index a CI matrix keeps warm;
``first shard``  ``evalkit run --shard 1/4`` on the warm index up to its first request, then
                 stopped (not in the default stages): its CPU and peak RSS by then (from
                 ``/proc``, Linux only) and the seconds from its start: what a shard costs
                 before it sends anything, without running the whole share (a 1M run's
                 four shards take long on a loaded machine);
``shards``       ``evalkit run --shard K/4`` for K = 1..4, one after another (each as on a CI
                 machine of its own), into Parquet parts: CPU and wall summed, the largest peak
                 RSS, and each warm shard's seconds from its start to its first request
                 (``first req``: the slowest of the four) with the CPU it had used by then
                 (read from ``/proc`` when the mock first answers: not stretched by load);
``merge``        ``evalkit runs merge`` of the parts into the baseline's store;
``push``         ``evalkit push`` of that run to a team store (SQLite catalog, directory
                 warehouse);
``pull``         ``evalkit pull`` of it into a fresh store (the CI job's);
``cand shards``  the candidate: the same four shards with another system prompt (``--prompt``,
                 the variable under test; the mock answers it with no JSON for one case in
                 100: regressions for the gate), then
``cand merge``   merged into the CI job's store;
``gate``         ``evalkit compare BASE CAND`` there: the gate's decision and report (``--json``);
``ray driver``   with ``--ray``: ``evalkit run --engine ray`` on the guide's two-node loopback
                 cluster (``loopback.RayLoopbackCluster``; its start-up not counted), and
``ray cluster``  the cluster's processes: CPU summed, the largest peak RSS.

``--replays R`` runs every case R times (the 200k x 5 case: ``--sizes 200000 --replays 5``);
per-case figures are per output (case x replay), the index's per case. ``x100k`` is a stage's
CPU per output against the same stage's at 100k cases (the target: 1M within 1.2x), from this
invocation or from ``--against`` (an earlier ``--json``). Figures are printed (one line per
stage as it ends, then one table) and written with ``--json``, never asserted.

Usage:
    .venv/bin/python bench/bench_million.py --sizes 10000 100000
    .venv/bin/python bench/bench_million.py --sizes 10000 100000 1000000 --json million.json
    .venv/bin/python bench/bench_million.py --sizes 200000 --replays 5
    .venv/bin/python bench/bench_million.py --sizes 10000 --ray
    .venv/bin/python bench/bench_million.py --sizes 1000000 --stages merge --against m.json
    .venv/bin/python bench/bench_million.py --sizes 100000 1000000 --stages "first shard"
    .venv/bin/python bench/bench_million.py --sizes 1000000 --keep DIR
    .venv/bin/python bench/bench_million.py --from DIR --stages gate

``--keep DIR`` (one size) keeps that size's corpus, parts and stores in DIR (empty or new)
rather than a temporary folder; ``--from DIR`` runs only the stages asked (default: the gate)
on such a folder, at its size, taking the stages they need as done: the gate measured again
without the shards' hour.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))  # runnable from a checkout without installing
sys.path.insert(0, str(BENCH))

import loopback  # noqa: E402  (the mock's HTTP responder, the Ray cluster)
from bench_distributed import write_corpus  # noqa: E402  (the one-turn cases and suite)
from bench_memory import count_rows, run_stage  # noqa: E402  (a stage's wait4 figures)

from evalkit.corpus.file_parts import WRITTEN_FILE_CASES  # noqa: E402

STAGES = ("index", "first shard", "shards", "merge", "push", "pull", "cand shards",
          "cand merge", "gate", "ray driver", "ray cluster")  # fmt: skip
#: What each stage needs run before it (asking for ``gate`` alone runs the pipeline up to it).
NEEDS = {
    "index": (),
    "first shard": ("index",),
    "shards": ("index",),
    "merge": ("shards",),
    "push": ("merge",),
    "pull": ("push",),
    "cand shards": ("index",),
    "cand merge": ("cand shards", "pull"),
    "gate": ("cand merge",),
}
SHARDS = 4
#: The candidate's system prompt (the base's is ``bench_distributed.SYSTEM_PROMPT``).
CANDIDATE_PROMPT = "Respond only with a JSON object, in under 30 words (bench-cand).\n"
#: The reference size of the ``x100k`` column.
REFERENCE = 100_000
#: In a ``--keep`` folder: the size kept (``{"cases": N, "replays": R}``), for ``--from``.
KEPT = "kept.json"

#: ``python -c MOCK latency_ms``: one reply (bare JSON, passes both scorers) built once; the
#: reply to the candidate's prompt has no JSON for orders ending in 77 (one case in 100).
#: ``/stats``: requests since ``/reset`` and when the first arrived (epoch seconds).
MOCK = (
    loopback.RAW_HEAD
    + """
import time
latency = float(sys.argv[1]) / 1000
count = {"requests": 0, "first_at": None}

def completion(text):
    return ok_response(json.dumps({
        "id": "x", "object": "chat.completion", "created": 0, "model": "bench",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 40, "completion_tokens": 8, "total_tokens": 48},
    }).encode())

GOOD = completion('{"status": "shipped", "eta_days": 2}')
BAD = completion("It has shipped and arrives in two days.")

def route(method, path, body):
    if path == b"/v1/chat/completions" and method == b"POST":
        if count["first_at"] is None:
            count["first_at"] = time.time()
        count["requests"] += 1
        bad = b"bench-cand" in body and b'77?"' in body
        return latency, BAD if bad else GOOD
    if path == b"/stats":
        return 0, ok_response(json.dumps(count).encode())
    if path == b"/reset" and method == b"POST":
        count.update(requests=0, first_at=None)
        return 0, ok_response(json.dumps(count).encode())
    return 0, NOT_FOUND
"""
    + loopback.RAW_SERVE
)

EVALKIT = (sys.executable, "-m", "evalkit.cli")


def _shards(
    server: loopback.LoopbackServer, common: list[str], run_id: str, folder: Path
) -> dict[str, Any]:
    """``evalkit run --shard K/4`` for each K, one after another: summed CPU and wall, the
    largest peak RSS, requests served, and each shard's start to its first request."""
    folder.mkdir(exist_ok=True)
    each = []
    for k in range(1, SHARDS + 1):
        server.reset()
        watch = _FirstRequestCPU(server, f"{k}/{SHARDS}", run_id)
        fig = run_stage(
            [*EVALKIT, "run", *common, "--shard", f"{k}/{SHARDS}", "--run-id", run_id,
             "--parts", str(folder / "parts"), "--db", str(folder / f"shard-{k}.duckdb"),
             "--label", run_id, "--no-progress"],
            folder,
        )  # fmt: skip
        served = server.stats()
        fig["first_request_cpu_s"] = watch.result()
        fig["requests"] = served["requests"]
        # a shard that asked nothing (an empty share) has no first request: infinite
        fig["first_request_s"] = (
            served["first_at"] - fig["started_at"] if served["first_at"] else float("inf")
        )
        each.append(fig)
    return {
        "wall_s": sum(f["wall_s"] for f in each),
        "cpu_s": sum(f["cpu_s"] for f in each),
        "peak_mib": max(f["peak_mib"] for f in each),
        "requests": sum(f["requests"] for f in each),
        "first_request_s": max(f["first_request_s"] for f in each),
        "each": each,
    }


def _first_shard(
    server: loopback.LoopbackServer, common: list[str], folder: Path
) -> dict[str, Any]:
    """``evalkit run --shard 1/4`` up to its first request, then killed: the seconds from its
    start, and its CPU and peak RSS (``VmHWM``) read from ``/proc`` when the mock first
    answers (polled every 0.05 s: at most that late)."""
    import signal
    import time

    server.reset()
    env = {**os.environ, "PYTHONPATH": str(BENCH.parent)}
    command = [*EVALKIT, "run", *common, "--shard", f"1/{SHARDS}", "--run-id", "first",
               "--parts", str(folder / "parts-first"), "--db", str(folder / "first.duckdb"),
               "--label", "first", "--no-progress"]  # fmt: skip
    started = time.time()
    shard = subprocess.Popen(command, cwd=folder, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)  # fmt: skip
    figures: dict[str, Any] = {}
    try:
        while shard.poll() is None and not server.stats()["first_at"]:
            time.sleep(0.05)
        figures = _proc_figures(shard.pid)
        first_at = server.stats()["first_at"]
    finally:
        if shard.poll() is None:
            shard.send_signal(signal.SIGKILL)
        _, err = shard.communicate()
    if not first_at or not figures:
        raise RuntimeError(f"the shard sent no request (exit {shard.returncode}): {err[-600:]}")
    first = first_at - started
    return {**figures, "wall_s": first, "first_request_s": first,
            "first_request_cpu_s": figures["cpu_s"], "load": os.getloadavg()[0]}  # fmt: skip


def _proc_figures(pid: int) -> dict[str, Any]:
    """CPU seconds and peak RSS (MiB) of process ``pid`` so far ({}: gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    peak = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM"))
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return {"cpu_s": cpu, "peak_mib": peak / 1024}


class _FirstRequestCPU:
    """The CPU seconds the shard ``--shard K/N`` of ``run_id`` had used when the mock saw its
    first request (polled every 0.1 s: at most that late; from ``/proc``, so Linux only,
    else None): unlike the wall to the first request, not stretched by the machine's load."""

    def __init__(self, server: loopback.LoopbackServer, shard: str, run_id: str) -> None:
        import threading

        self._marks = ("--shard", shard, "--run-id", run_id)
        self._cpu: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, args=(server,), daemon=True)
        self._thread.start()

    def result(self) -> float | None:
        self._stop.set()
        self._thread.join(10)
        return self._cpu

    def _watch(self, server: loopback.LoopbackServer) -> None:
        while not self._stop.wait(0.1):
            if server.stats()["first_at"]:
                self._cpu = self._shard_cpu()
                return

    def _shard_cpu(self) -> float | None:
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                words = (proc / "cmdline").read_bytes().split(b"\0")
                if b"run" not in words or not all(m.encode() in words for m in self._marks):
                    continue
                fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if words[1:2] != [b"-m"] or _parent(int(fields[1])) != os.getpid():
                continue  # the wait4 wrapper (``python -c``), or another bench's shard
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return None


def _parent(pid: int) -> int | None:
    """The parent of process ``pid`` (None: gone)."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _ray(common: list[str], folder: Path) -> dict[str, Any]:
    """``evalkit run --engine ray`` on the two-node loopback cluster: the driver's figures, and
    the cluster's under ``cluster`` (read before it stops)."""
    with loopback.RayLoopbackCluster() as cluster:
        driver = run_stage(
            [*EVALKIT, "run", *common, "--engine", "ray", "--address", cluster.address,
             "--run-id", "ray", "--parts", str(folder / "parts-ray"),
             "--db", str(folder / "ray.duckdb"), "--label", "ray", "--no-progress"],
            folder,
        )  # fmt: skip
        used = cluster.usage()
        startup_s = cluster.startup_s
    driver["outputs"] = count_rows(folder / "ray.duckdb", "outputs", "ray")
    driver["cluster"] = used | {"wall_s": driver["wall_s"], "startup_s": startup_s}
    return driver


def bench_size(
    folder: Path,
    cases: int,
    replays: int,
    stages: Sequence[str],
    latency_ms: float,
    concurrency: int,
    say: Callable[[str, dict[str, Any]], None],
    got: dict[str, Any],
    kept: bool = False,
) -> dict[str, Any]:
    """Every stage of ``stages`` (and what they need) at ``cases`` cases of ``replays``, into
    ``got`` (``say`` is told of each as it ends). ``kept``: ``folder`` holds a run kept
    before (its corpus and stores): only ``stages`` run, what they need taken as done."""
    wanted = set(stages)
    grew = not kept
    while grew:
        more = {need for stage in wanted for need in NEEDS.get(stage, ())} - wanted
        wanted |= more
        grew = bool(more)
    if kept:
        config = folder / "corpus" / "evalkit.yaml"
    else:
        config = write_corpus(folder / "corpus", cases, concurrency, WRITTEN_FILE_CASES)
    store = f"sqlite:///{folder}/catalog.db?warehouse={folder}/warehouse"
    base_db, ci_db = folder / "base.duckdb", folder / "ci.duckdb"

    def stage(name: str, run: Callable[[], dict[str, Any]]) -> None:
        """Run one stage unless it was not asked for or a stage it needs failed (a failure is
        recorded and printed: a long run keeps the stages that do not need it)."""
        if name not in wanted:
            return
        if any("error" in got.get(need, {}) for need in NEEDS.get(name, ())):
            got[name] = {"error": "a stage it needs failed"}
        else:
            try:
                got[name] = run()
            except (RuntimeError, subprocess.CalledProcessError, OSError, ValueError) as exc:
                got[name] = {"error": str(exc)[-800:]}
        say(name, got[name])

    with loopback.LoopbackServer(MOCK, latency_ms) as server:
        common = ["--config", str(config), "--set", f"system.base_url={server.base_url}",
                  "--replays", str(replays)]  # fmt: skip
        prompt = folder / "candidate.md"
        prompt.write_text(CANDIDATE_PROMPT, encoding="utf-8")
        cand = [*common, "--prompt", str(prompt)]
        stage("index", lambda: run_stage([*EVALKIT, "cases", "index", *common[:4]], folder))
        stage("first shard", lambda: _first_shard(server, common, folder))
        stage("shards", lambda: _shards(server, common, "base", folder / "base"))
        stage("merge", lambda: _merged("base", folder / "base", base_db))
        push = [*EVALKIT, "push", "base", "--db", str(base_db), "--store", store]
        stage("push", lambda: run_stage(push, folder))
        stage("pull", lambda: _pulled(store, ci_db, folder))
        stage("cand shards", lambda: _shards(server, cand, "cand", folder / "cand"))
        stage("cand merge", lambda: _merged("cand", folder / "cand", ci_db))
        stage("gate", lambda: _gate(ci_db, folder))
        if "ray driver" in wanted or "ray cluster" in wanted:
            stage("ray driver", lambda: _ray(common, folder))
            if "error" not in got["ray driver"]:
                got["ray cluster"] = got["ray driver"].pop("cluster")
                say("ray cluster", got["ray cluster"])
    return got


def _merged(run_id: str, folder: Path, db: Path) -> dict[str, Any]:
    fig = run_stage(
        [*EVALKIT, "runs", "merge", run_id, "--parts", str(folder / "parts"), "--db", str(db)],
        folder.parent,
    )
    fig["outputs"] = count_rows(db, "outputs", run_id)
    return fig


def _pulled(store: str, db: Path, folder: Path) -> dict[str, Any]:
    fig = run_stage([*EVALKIT, "pull", "base", "--db", str(db), "--store", store], folder)
    fig["outputs"] = count_rows(db, "outputs", "base")
    return fig


def _gate(db: Path, folder: Path) -> dict[str, Any]:
    out = folder / "gate.json"
    fig = run_stage([*EVALKIT, "compare", "base", "cand", "--db", str(db), "--json", str(out)],
                    folder)  # fmt: skip
    report = json.loads(out.read_text(encoding="utf-8"))
    decision = report.get("decision") or {}
    fig["verdict"] = decision.get("verdict") or decision.get("status")
    fig["paired"], fig["broken"] = report.get("n_paired"), report.get("n_broken")
    return fig


def _units(stage: str, result: dict[str, Any]) -> int:
    """What a stage's per-case cost is per: cases for the index, outputs for the rest."""
    return result["cases"] if stage == "index" else result["cases"] * result["replays"]


def table(results: Sequence[dict[str, Any]], reference: Sequence[dict[str, Any]] = ()) -> str:
    """One row per stage and size: wall, CPU, peak RSS, CPU per case and against 100k."""
    refs = {(r["cases"], r["replays"]): r for r in [*reference, *results]}
    lines = [
        f"{'stage':<12}{'cases':>10}{'x':>3}{'wall s':>9}{'CPU s':>9}{'peak MiB':>10}"
        f"{'CPU us/case':>13}{'x100k':>7}{'first req s':>13}"
    ]
    for stage in STAGES:
        for result in results:
            fig = result["stages"].get(stage)
            if fig is None or "error" in fig:
                if fig is not None:
                    lines.append(f"{stage:<12}{result['cases']:>10,}{result['replays']:>3}  failed")
                continue
            per = fig["cpu_s"] / _units(stage, result) * 1e6
            ref = refs.get((REFERENCE, result["replays"]))
            ratio = ""
            ref_fig = ref["stages"].get(stage, {}) if ref is not None else {}
            if "cpu_s" in ref_fig and result["cases"] != REFERENCE:
                ref_per = ref_fig["cpu_s"] / _units(stage, ref) * 1e6
                ratio = f"{per / ref_per:.2f}"
            first = fig.get("first_request_s")
            lines.append(
                f"{stage:<12}{result['cases']:>10,}{result['replays']:>3}{fig['wall_s']:>9.1f}"
                f"{fig['cpu_s']:>9.1f}{fig['peak_mib']:>10.0f}{per:>13.1f}{ratio:>7}"
                f"{'' if first is None else f'{first:.2f}':>13}"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the pipeline at each size; print each stage as it ends, then the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--replays", type=int, default=1, help="runs of each case")
    default = [stage for stage in STAGES[:9] if stage != "first shard"]
    parser.add_argument("--stages", nargs="+", choices=STAGES,
                        help="what to run (and what it needs); default: all but Ray")  # fmt: skip
    parser.add_argument("--ray", action="store_true", help="add the Ray run")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="the mock's per reply")
    parser.add_argument("--concurrency", type=int, default=64, help="per process")
    parser.add_argument("--against", metavar="FILE", help="an earlier --json: its 100k figures")
    parser.add_argument("--json", metavar="FILE", help="write the figures as JSON")
    parser.add_argument("--keep", metavar="DIR", help="keep one size's corpus and stores here")
    parser.add_argument("--from", dest="kept", metavar="DIR",
                        help="run only --stages (default: gate) on a --keep folder")  # fmt: skip
    args = parser.parse_args(argv)
    if args.keep and len(args.sizes) != 1:
        parser.error("--keep keeps one size: give one --sizes")
    if args.keep and args.kept:
        parser.error("--keep and --from: give one")
    if args.keep and Path(args.keep).exists() and any(Path(args.keep).iterdir()):
        parser.error(f"--keep {args.keep}: not empty")
    if args.kept:  # the kept folder's size, not --sizes'
        kept = json.loads((Path(args.kept) / KEPT).read_text(encoding="utf-8"))
        args.sizes, args.replays = [kept["cases"]], kept["replays"]
    asked = args.stages or (["gate"] if args.kept else default)
    stages = [*asked, *(("ray driver", "ray cluster") if args.ray else ())]
    reference = json.loads(Path(args.against).read_text()) if args.against else []
    results: list[dict[str, Any]] = []
    print(f"{os.cpu_count()} CPUs; stages in order, then the table", flush=True)
    for cases in args.sizes:
        result: dict[str, Any] = {"cases": cases, "replays": args.replays, "stages": {}}
        result["load"] = [os.getloadavg()[0]]
        results.append(result)

        def say(stage: str, fig: dict[str, Any], cases: int = cases) -> None:
            head = f"  {cases:,} x{args.replays} {stage:<12}"
            if "error" in fig:
                print(f"{head} FAILED: {fig['error']}", flush=True)
            else:
                each = fig.get("each", ())
                shards = [f["first_request_s"] for f in each]
                cpu = ", ".join(f"{f.get('first_request_cpu_s') or 0:.1f}" for f in each)
                peaks = ", ".join(f"{f['peak_mib']:.0f}" for f in each)
                first = (f"  first request at {', '.join(f'{s:.1f}' for s in shards)} s"
                         f" (CPU by then {cpu} s), peaks {peaks} MiB")  # fmt: skip
                print(f"{head} wall {fig['wall_s']:8.1f} s  CPU {fig['cpu_s']:8.1f} s  peak "
                      f"{fig['peak_mib']:6.0f} MiB  load {os.getloadavg()[0]:.1f}"
                      f"{first if shards else ''}", flush=True)  # fmt: skip
            if args.json:  # after each stage: a long run's finished stages outlive its end
                Path(args.json).write_text(json.dumps(results, indent=2), encoding="utf-8")

        if args.keep or args.kept:
            folder = Path(args.keep or args.kept)
            if args.keep:
                folder.mkdir(parents=True, exist_ok=True)
                size = {"cases": cases, "replays": args.replays}
                (folder / KEPT).write_text(json.dumps(size), encoding="utf-8")
            bench_size(folder.resolve(), cases, args.replays, stages, args.latency_ms,
                       args.concurrency, say, result["stages"], kept=bool(args.kept))  # fmt: skip
        else:
            with tempfile.TemporaryDirectory(prefix="evalkit-bench-million-") as tmp:
                bench_size(Path(tmp), cases, args.replays, stages, args.latency_ms,
                           args.concurrency, say, result["stages"])  # fmt: skip
        result["load"].append(os.getloadavg()[0])
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=2), encoding="utf-8")
    loads = [x for r in results for x in r["load"]]
    print(f"\nload average {min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} CPUs")
    print(table(results, reference))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

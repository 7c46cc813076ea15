"""Throughput figures: evalkit against the network limit and against a bare client loop.

Three benchmarks on a synthetic corpus of N simple cases (``json_valid`` and ``max_words``)
written to a temp dir, served by the demo simulator on loopback with a fixed latency and no
noise (the server runs in its own process, so its CPU is not in this process's figures; it is
read from ``/proc/<pid>/stat`` and printed beside them):

``latency``
    N = 320 cases at 500 ms per request and concurrency 16: the run-phase wall time against the
    limit N x latency / concurrency (10 s). Target: at most 1.10x the limit.
``cpu``
    N = 2000 cases at 50 ms and concurrency 32, 64 and 256, where the client's CPU, not the
    network, is the limit on 2 cores. evalkit (which also scores and stores every output) and a
    bare ``AsyncOpenAI`` loop with a semaphore (which does neither) run alternately, A B A B, for
    ``--rounds`` rounds; per round the ratio evalkit / bare wall time, then the median, plus CPU
    seconds per case of this process for both. Each evalkit transport given with
    ``--transport`` is measured (``openai``: the official client; ``lean``: one aiohttp session).
``progress``
    The cost of the progress bar: the same evalkit run with ``progress`` on and off, alternately.
    The bar renders only when stderr is a terminal, so run it under a pseudo-tty
    (``script -qc "..." /dev/null``); the script says whether the bar was live.

Usage:
    .venv/bin/python bench/bench_throughput.py                  # all three, default sizes
    .venv/bin/python bench/bench_throughput.py latency
    .venv/bin/python bench/bench_throughput.py cpu --transport openai lean --rounds 3
    script -qc ".venv/bin/python bench/bench_throughput.py progress" /dev/null
    .venv/bin/python bench/bench_throughput.py cpu --cases 50 --concurrency 8 --rounds 1 --json f
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # runnable from a checkout without installing

from evalkit.corpus.cases import Corpus, load_corpus  # noqa: E402
from evalkit.corpus.messages import render_messages  # noqa: E402
from evalkit.corpus.suite import Suite, load_suite  # noqa: E402
from evalkit.demo.server import DemoServer, start_demo_server  # noqa: E402
from evalkit.run.runner import RunOptions, run_suite  # noqa: E402
from evalkit.store import open_store  # noqa: E402

SYSTEM_PROMPT = "Respond only with a JSON object. Keep the reply under 40 words.\n"
SAMPLING = {"temperature": 0, "seed": 7, "max_tokens": 200}


@dataclass(frozen=True)
class Measured:
    """One timed run: wall time, this process's CPU and the server's CPU over it."""

    wall_s: float
    cpu_s: float
    server_cpu_s: float
    outputs: int  # answers received (bare) or output rows stored (evalkit)
    passed: int  # outputs that passed every scorer (evalkit) or had content (bare)
    scores: int  # score rows stored (evalkit; 0 for bare)
    run_phase_s: float  # evalkit: requests + final flush, without manifest/setup (bare: = wall)


def write_corpus(root: Path, n_cases: int, concurrency: int) -> Path:
    """N distinct one-turn cases scored by ``json_valid`` and ``max_words``; returns the config.

    The system prompt asks the simulator for bare JSON, so every output passes both scorers.
    """
    (root / "cases").mkdir(parents=True)
    (root / "prompts").mkdir()
    (root / "prompts" / "system.md").write_text(SYSTEM_PROMPT, encoding="utf-8")
    lines = [
        f"- id: synthetic-{i:05d}\n"
        f"  input: {{messages: [{{role: user, content: 'Where is my order {10_000 + i}?'}}]}}\n"
        "  expect: [json_valid, {max_words: 200}]\n"
        for i in range(n_cases)
    ]
    (root / "cases" / "synthetic.yaml").write_text("".join(lines), encoding="utf-8")
    config = root / "evalkit.yaml"
    config.write_text(
        "suite: bench-throughput\n"
        "system:\n"
        "  model: demo-support-1\n"
        "  base_url: http://127.0.0.1:9/v1\n"
        "  prompt: prompts/system.md\n"
        "  timeout_s: 30\n"
        f"  sampling: {json.dumps(SAMPLING)}\n"
        f"concurrency: {concurrency}\n"
        "cache: false\n",
        encoding="utf-8",
    )
    return config


def server_cpu_s(server: DemoServer) -> float:
    """CPU seconds (user + system) the server process has used so far, from /proc; 0 elsewhere."""
    try:
        fields = Path(f"/proc/{server.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _self_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _timed(server: DemoServer, body: Callable[[], Measured]) -> Measured:
    """Run ``body`` and fill in wall time, this process's CPU and the server's CPU."""
    cpu0, srv0, t0 = _self_cpu_s(), server_cpu_s(server), time.perf_counter()
    result = body()
    wall = time.perf_counter() - t0
    cpu, srv = _self_cpu_s() - cpu0, server_cpu_s(server) - srv0
    run_phase = result.run_phase_s or wall
    return Measured(wall, cpu, srv, result.outputs, result.passed, result.scores, run_phase)


def run_evalkit(
    suite: Suite, corpus: Corpus, server: DemoServer, db: Path, transport: str, progress: bool
) -> Measured:
    """``run_suite`` over the corpus into a fresh store file (opened outside the clock)."""
    suite = load_suite(
        suite.path,
        overrides=[f"system.base_url={server.base_url}", f"system.transport={transport}"],
    )
    db.unlink(missing_ok=True)
    with open_store(db, write=True) as store:

        def body() -> Measured:
            summary = run_suite(suite, corpus, store, RunOptions(label="bench", progress=progress))
            return Measured(0, 0, 0, summary.outputs, summary.passed, 0, summary.wall_s)

        measured = _timed(server, body)
        scores = store.query("SELECT count(*) AS n FROM scores")["n"][0]
    db.unlink(missing_ok=True)
    return Measured(**(asdict(measured) | {"scores": int(scores)}))


def run_bare(suite: Suite, corpus: Corpus, server: DemoServer, concurrency: int) -> Measured:
    """The floor: a bare ``AsyncOpenAI`` loop with a semaphore; no scoring, no storing."""
    import openai

    model = suite.config.system.model
    messages = [render_messages(c, suite.system_prompt, None) for c in corpus.cases]

    async def loop() -> list[str | None]:
        client = openai.AsyncOpenAI(
            base_url=server.base_url, api_key="bench", max_retries=0, timeout=60
        )
        semaphore = asyncio.Semaphore(concurrency)

        async def one(msgs: list[dict[str, Any]]) -> str | None:
            async with semaphore:
                response = await client.chat.completions.create(
                    model=model,
                    messages=msgs,  # type: ignore[arg-type]
                    **SAMPLING,  # type: ignore[arg-type]
                )
                return response.choices[0].message.content

        try:
            return await asyncio.gather(*(one(m) for m in messages))
        finally:
            await client.close()

    def body() -> Measured:
        texts = asyncio.run(loop())
        return Measured(0, 0, 0, len(texts), sum(bool(t) for t in texts), 0, 0)

    return _timed(server, body)


def _fig(m: Measured, cases: int) -> dict[str, Any]:
    return asdict(m) | {
        "cpu_ms_per_case": 1000 * m.cpu_s / cases,
        "server_cpu_ms_per_case": 1000 * m.server_cpu_s / cases,
        "rps": m.outputs / m.run_phase_s if m.run_phase_s else 0.0,
    }


def bench_latency(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """evalkit's run-phase wall time against N x latency / concurrency."""
    config = write_corpus(root / "corpus", args.cases, args.concurrency[0])
    suite, corpus = load_suite(config), load_corpus(config.parent)
    limit = args.cases * args.latency_ms / 1000 / args.concurrency[0]
    out: dict[str, Any] = {"limit_s": limit, "runs": {}}
    with start_demo_server(noise=False, latency_ms=args.latency_ms) as server:
        for transport in args.transport:
            m = run_evalkit(suite, corpus, server, root / "run.duckdb", transport, args.progress)
            fig = _fig(m, args.cases) | {"ratio_to_limit": m.run_phase_s / limit}
            fig["end_to_end_ratio"] = m.wall_s / limit
            out["runs"][transport] = fig
        bare = run_bare(suite, corpus, server, args.concurrency[0])  # the floor, for reference
        out["bare"] = _fig(bare, args.cases) | {"ratio_to_limit": bare.wall_s / limit}
    return out


def bench_cpu(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """evalkit and the bare loop alternately, per concurrency, ``rounds`` times."""
    out: dict[str, Any] = {"by_concurrency": {}}
    config = write_corpus(root / "corpus", args.cases, args.concurrency[0])
    suite, corpus = load_suite(config), load_corpus(config.parent)
    db = root / "run.duckdb"
    with start_demo_server(noise=False, latency_ms=args.latency_ms) as server:
        run_bare(suite, corpus, server, args.concurrency[0])  # warm-up: imports, first sockets
        for concurrency in args.concurrency:
            conf = load_suite(config, overrides=[f"concurrency={concurrency}"])
            rounds: list[dict[str, Any]] = []
            for _ in range(args.rounds):
                row: dict[str, Any] = {}
                for transport in args.transport:
                    m = run_evalkit(conf, corpus, server, db, transport, args.progress)
                    row[transport] = _fig(m, args.cases)
                row["bare"] = _fig(run_bare(conf, corpus, server, concurrency), args.cases)
                for transport in args.transport:
                    row[f"ratio_{transport}"] = row[transport]["wall_s"] / row["bare"]["wall_s"]
                    row[f"run_phase_ratio_{transport}"] = (
                        row[transport]["run_phase_s"] / row["bare"]["wall_s"]
                    )
                rounds.append(row)
            summary = {
                f"median_ratio_{t}": statistics.median(r[f"ratio_{t}"] for r in rounds)
                for t in args.transport
            }
            for side in [*args.transport, "bare"]:
                cpu = [r[side]["cpu_ms_per_case"] for r in rounds]
                summary[f"median_cpu_ms_per_case_{side}"] = statistics.median(cpu)
                srv = [r[side]["server_cpu_ms_per_case"] for r in rounds]
                summary[f"median_server_cpu_ms_per_case_{side}"] = statistics.median(srv)
            out["by_concurrency"][str(concurrency)] = {"rounds": rounds, "summary": summary}
            out["by_concurrency"][str(concurrency)]["limit_s"] = (
                args.cases * args.latency_ms / 1000 / concurrency
            )
    return out


def bench_progress(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """The same evalkit run with the progress bar on and off, alternately."""
    config = write_corpus(root / "corpus", args.cases, args.concurrency[0])
    suite, corpus = load_suite(config), load_corpus(config.parent)
    rounds = []
    with start_demo_server(noise=False, latency_ms=args.latency_ms) as server:
        transport = args.transport[0]
        run_evalkit(suite, corpus, server, root / "w.duckdb", transport, False)  # warm-up
        for _ in range(args.rounds):
            on = run_evalkit(suite, corpus, server, root / "on.duckdb", transport, True)
            off = run_evalkit(suite, corpus, server, root / "off.duckdb", transport, False)
            rounds.append(
                {
                    "on": _fig(on, args.cases),
                    "off": _fig(off, args.cases),
                    "ratio": on.wall_s / off.wall_s,
                    "cpu_ratio": on.cpu_s / off.cpu_s,
                }
            )
    return {
        "tty": sys.stderr.isatty(),
        "rounds": rounds,
        "median_ratio": statistics.median(r["ratio"] for r in rounds),
        "median_cpu_ratio": statistics.median(r["cpu_ratio"] for r in rounds),
    }


def _print(mode: str, figures: dict[str, Any]) -> None:
    s = figures["settings"]
    load = figures["loadavg_1min"]
    print(
        f"cores: {figures['cores']} (1-min load average {load[0]:.2f} before, {load[1]:.2f} after)"
    )
    print(
        f"{mode}: {s['cases']} cases, latency {s['latency_ms']:g} ms, concurrency "
        f"{s['concurrency']}, transports {s['transport']}"
    )
    if mode == "latency":
        print(f"limit N x latency / concurrency: {figures['limit_s']:.2f} s")
        for transport, f in figures["runs"].items():
            print(
                f"  {transport:7} run phase {f['run_phase_s']:.2f} s = "
                f"{f['ratio_to_limit']:.3f}x the limit (end to end {f['wall_s']:.2f} s = "
                f"{f['end_to_end_ratio']:.3f}x); outputs {f['outputs']}, passed {f['passed']}, "
                f"score rows {f['scores']}; CPU {f['cpu_ms_per_case']:.2f} ms/case"
            )
        b = figures["bare"]
        print(
            f"  bare AsyncOpenAI loop {b['wall_s']:.2f} s = {b['ratio_to_limit']:.3f}x the limit "
            f"(answers {b['outputs']}; CPU {b['cpu_ms_per_case']:.2f} ms/case)"
        )
    elif mode == "cpu":
        for conc, block in figures["by_concurrency"].items():
            print(f"concurrency {conc} (network limit {block['limit_s']:.2f} s):")
            for i, r in enumerate(block["rounds"], 1):
                parts = [f"bare {r['bare']['wall_s']:.2f} s"]
                for t in s["transport"]:
                    parts.append(
                        f"{t} {r[t]['wall_s']:.2f} s (run phase {r[t]['run_phase_s']:.2f}) "
                        f"ratio {r[f'ratio_{t}']:.3f}"
                    )
                print(f"  round {i}: " + "; ".join(parts))
            summ = block["summary"]
            for t in s["transport"]:
                print(f"  median ratio evalkit[{t}] / bare: {summ[f'median_ratio_{t}']:.3f}")
            for side in [*s["transport"], "bare"]:
                print(
                    f"  CPU per case {side:7} {summ[f'median_cpu_ms_per_case_{side}']:.3f} ms "
                    f"(server {summ[f'median_server_cpu_ms_per_case_{side}']:.3f} ms)"
                )
    else:
        print(f"stderr is a terminal (bar live): {figures['tty']}")
        for i, r in enumerate(figures["rounds"], 1):
            print(
                f"  round {i}: on {r['on']['wall_s']:.2f} s / off {r['off']['wall_s']:.2f} s "
                f"= {r['ratio']:.3f}; CPU on {r['on']['cpu_s']:.2f} s / off "
                f"{r['off']['cpu_s']:.2f} s = {r['cpu_ratio']:.3f}"
            )
        print(
            f"  median wall ratio on/off {figures['median_ratio']:.3f}, "
            f"median CPU ratio {figures['median_cpu_ratio']:.3f}"
        )


_DEFAULTS = {
    "latency": {"cases": 320, "latency_ms": 500.0, "concurrency": [16]},
    "cpu": {"cases": 2000, "latency_ms": 50.0, "concurrency": [32, 64, 256]},
    "progress": {"cases": 2000, "latency_ms": 50.0, "concurrency": [64], "transport": ["lean"]},
}


def _one(mode: str, args: argparse.Namespace) -> dict[str, Any]:
    """One benchmark with ``args``, its unset sizes filled from the mode's defaults."""
    args = argparse.Namespace(**vars(args))
    for key, value in ({"transport": ["openai", "lean"]} | _DEFAULTS[mode]).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    bench = {"latency": bench_latency, "cpu": bench_cpu, "progress": bench_progress}[mode]
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="evalkit-bench-throughput-") as tmp:
        figures = bench(args, Path(tmp))
    figures["cores"] = os.cpu_count()
    figures["loadavg_1min"] = [load_before, os.getloadavg()[0]]
    figures["settings"] = {
        k: getattr(args, k) for k in ("cases", "latency_ms", "concurrency", "transport", "rounds")
    }
    _print(mode, figures)
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    """Run one benchmark (or all three) and print its figures (``--json``: also as JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", nargs="?", default="all", choices=[*sorted(_DEFAULTS), "all"])
    parser.add_argument("--cases", type=int, help="synthetic cases")
    parser.add_argument("--latency-ms", type=float, help="server latency per request")
    parser.add_argument("--concurrency", type=int, nargs="+", help="one or more concurrencies")
    parser.add_argument(
        "--transport", nargs="+", choices=["openai", "lean"], help="evalkit transports"
    )
    parser.add_argument("--rounds", type=int, default=3, help="A B rounds (cpu, progress)")
    parser.add_argument("--progress", action="store_true", help="progress bar on (latency, cpu)")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args(argv)
    if args.mode == "all":
        figures = {mode: _one(mode, args) for mode in ("latency", "cpu", "progress")}
    else:
        figures = _one(args.mode, args)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

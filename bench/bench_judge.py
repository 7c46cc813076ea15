"""Judge-heavy throughput: every case is one system call plus one model-judge call.

Against a loopback server (:data:`SERVER`, aiohttp, in its own process) that answers both: the
system model with a JSON reply and the judge model (``bench-judge``) with the reason-before-score
JSON ``{"reason": ..., "score": 5}``, each after a fixed latency, recording when each kind of
request arrived. Measured, as fresh processes from bench_process's spawner (wall, CPU, peak RSS):

* ``evalkit run`` of N cases, each ``expect: [{judge: rubrics/tone.md}]``, concurrency c;
* the bare loop: ``AsyncOpenAI``, per case the system call then the judge call with the same
  prompt evalkit sends (:func:`evalkit.scorers.judge_client.pointwise_prompt`'s text),
  ``json.loads`` of the verdict; a semaphore of c for system calls and another of c for judge
  calls, which is evalkit's own bound (``concurrency`` bounds the system's requests; judge
  calls are bounded by the worker pool of 2c);
* ``evalkit runs rescore`` of the stored run with the judge unchanged: judge calls served from the
  response cache (target 0 requests at the server); then with ``judge.snapshot`` changed,
  which is part of the cache key, so every verdict is asked again (N judge requests).

Checked, not assumed: the server saw N system and N judge requests per run, the store holds N
outputs and N judge scores, all passed; overlap: the first judge request arrived before the last
system request (no phase barrier), and the share of judge requests that arrived before it.

Usage:
    .venv/bin/python bench/bench_judge.py --cases 1000 --concurrency 32 --rounds 3
    .venv/bin/python bench/bench_judge.py --cases 40 --concurrency 4 --latency-ms 5 --rounds 1
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
from dataclasses import asdict
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
import bench_process  # noqa: E402  (the spawner and its rusage figures)
import loopback  # noqa: E402  (the server script's tail and its process)

REPO = bench_process.REPO
JUDGE_MODEL = "bench-judge"
SYSTEM_MODEL = "bench-system"
SYSTEM_PROMPT = "Reply with a JSON object: category and reply.\n"
RUBRIC = (
    "Grade the reply's tone.\n1: rude or off-topic\n2: curt\n3: acceptable\n4: polite\n"
    "5: polite, specific and complete\n"
)

#: ``python -c SERVER latency_ms``: prints its port, serves until stdin closes.
SERVER = (
    """
import asyncio, json, sys, threading, time
from aiohttp import web

latency = float(sys.argv[1]) / 1000
arrivals = {"judge": [], "system": []}
VERDICT = json.dumps({"reason": "Polite and specific.", "score": 5})
REPLY = json.dumps({"category": "billing", "reply": "Refund issued for the duplicate charge."})

async def chat(request):
    body = json.loads(await request.read())
    kind = "judge" if body["model"] == "bench-judge" else "system"
    arrivals[kind].append(time.time())
    await asyncio.sleep(latency)
    content = VERDICT if kind == "judge" else REPLY
    return web.json_response({
        "id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 12, "total_tokens": 62},
    })

async def stats(request):
    return web.json_response(arrivals)

async def reset(request):
    for times in arrivals.values():
        times.clear()
    return web.json_response({})

"""
    + loopback.SERVE
)

#: ``python -c BARE_LOOP base_url cases concurrency``: both calls per case, no evalkit.
BARE_LOOP = f"""
import asyncio, json, sys
import openai

base_url, n, concurrency = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
system = {SYSTEM_PROMPT!r}
rubric = {RUBRIC!r}
judge_system = {{judge_system!r}}

async def main():
    client = openai.AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0, timeout=60)
    calls, verdicts = asyncio.Semaphore(concurrency), asyncio.Semaphore(concurrency)

    async def one(i):
        question = f"Order {{10_000 + i}} was charged twice. Refund one?"
        async with calls:
            response = await client.chat.completions.create(
                model="{SYSTEM_MODEL}", temperature=0,
                messages=[{{"role": "system", "content": system}},
                          {{"role": "user", "content": question}}],
            )
        answer = response.choices[0].message.content
        user = f"Conversation:\\nUSER: {{question}}\\n\\nAssistant's final answer:\\n{{answer}}"
        async with verdicts:
            verdict = await client.chat.completions.create(
                model="{JUDGE_MODEL}", temperature=0,
                messages=[{{"role": "system", "content": judge_system}},
                          {{"role": "user", "content": user}}],
            )
        return json.loads(verdict.choices[0].message.content)["score"] >= 4

    try:
        passed = await asyncio.gather(*(one(i) for i in range(n)))
    finally:
        await client.close()
    print(sum(passed))

asyncio.run(main())
"""


class Server(loopback.LoopbackServer):
    """The loopback server process (stopped on exit of the ``with`` block)."""

    def __init__(self, latency_ms: float) -> None:
        super().__init__(SERVER, latency_ms)

    def arrivals(self) -> dict[str, list[float]]:
        return self.stats()


def stop_spawner() -> None:
    """Stop bench_process's spawner (a test that imports this module calls it)."""
    bench_process.stop_spawner()


def judge_system_prompt() -> str:
    """The judge's system prompt as evalkit sends it for :data:`RUBRIC`."""
    from evalkit.scorers.judge_client import POINTWISE_SYSTEM

    return POINTWISE_SYSTEM.format(rubric=RUBRIC.strip())


def write_suite(root: Path, n_cases: int, concurrency: int) -> Path:
    """N one-turn cases scored by the judge alone; returns the config path."""
    (root / "cases").mkdir(parents=True)
    (root / "prompts").mkdir()
    (root / "rubrics").mkdir()
    (root / "prompts" / "system.md").write_text(SYSTEM_PROMPT, encoding="utf-8")
    (root / "rubrics" / "tone.md").write_text(RUBRIC, encoding="utf-8")
    lines = [
        f"- id: judged-{i:06d}\n"
        f"  input: {{messages: [{{role: user, content: 'Order {10_000 + i} was charged twice. "
        "Refund one?'}]}\n"
        "  expect: [{scorer: judge, args: {rubric: rubrics/tone.md, min_score: 4}}]\n"
        for i in range(n_cases)
    ]
    (root / "cases" / "judged.yaml").write_text("".join(lines), encoding="utf-8")
    config = root / "evalkit.yaml"
    config.write_text(
        "suite: bench-judge\n"
        "system:\n"
        f"  model: {SYSTEM_MODEL}\n"
        "  base_url: http://127.0.0.1:9/v1\n"
        "  prompt: prompts/system.md\n"
        "  timeout_s: 60\n"
        "  sampling: {temperature: 0}\n"
        f"judge:\n  model: {JUDGE_MODEL}\n  base_url: http://127.0.0.1:9/v1\n  max_retries: 0\n"
        f"concurrency: {concurrency}\n",
        encoding="utf-8",
    )
    return config


def _counted(server: Server, n_cases: int) -> dict[str, Any]:
    """Requests per kind and whether judge calls overlapped the system calls."""
    arrivals = server.arrivals()
    system, judge = sorted(arrivals["system"]), sorted(arrivals["judge"])
    last_system = system[-1] if system else 0.0
    before = sum(t < last_system for t in judge)
    return {
        "system_requests": len(system),
        "judge_requests": len(judge),
        "overlap": bool(judge) and judge[0] < last_system,
        "judge_share_before_last_system": before / len(judge) if judge else 0.0,
        "first_judge_after_first_system_s": judge[0] - system[0] if judge and system else None,
    }


def run_bare(server: Server, n_cases: int, concurrency: int) -> dict[str, Any]:
    server.reset()
    script = BARE_LOOP.replace("{judge_system!r}", repr(judge_system_prompt()))
    proc = bench_process.measure(
        [sys.executable, "-c", script, server.base_url, str(n_cases), str(concurrency)]
    )
    passed = int(proc.stdout.split()[-1])
    return _row(proc) | _counted(server, n_cases) | {"scores": n_cases, "passed_scores": passed}


def _evalkit(server: Server, config: Path, db: Path, verb: list[str], *sets: str) -> dict[str, Any]:
    command = [
        sys.executable, "-m", "evalkit.cli", *verb, "--config", str(config), "--db", str(db),
        "--set", f"system.base_url={server.base_url}", "--set", f"judge.base_url={server.base_url}",
        *(part for item in sets for part in ("--set", item)),
    ]  # fmt: skip
    server.reset()
    return _row(bench_process.measure(command)) | _counted(server, 0)


def run_evalkit(server: Server, config: Path, db: Path, concurrency: int) -> dict[str, Any]:
    """``evalkit run`` into a fresh store, then ``evalkit runs rescore`` of that run."""
    db.unlink(missing_ok=True)
    verb = ["run", "--no-progress", "--label", "bench", "--concurrency", str(concurrency)]
    row = _evalkit(server, config, db, verb) | _stored(db)
    rescore = _evalkit(server, config, db, ["runs", "rescore", "bench"])
    row["rescore"] = rescore | {"judge_scores_after": _stored(db)["scores"]}
    # a judge pinned to another snapshot is another cache key: every verdict asked again
    changed = _evalkit(
        server, config, db, ["runs", "rescore", "bench"], "judge.snapshot=bench-judge-v2"
    )
    row["rescore_changed_judge"] = changed
    db.unlink(missing_ok=True)
    return row


def _row(proc: bench_process.Proc) -> dict[str, Any]:
    return {k: v for k, v in asdict(proc).items() if k != "stdout"}


def _stored(db: Path) -> dict[str, Any]:
    import duckdb

    with duckdb.connect(str(db), read_only=True) as con:
        outputs = con.execute("SELECT count(*) FROM outputs WHERE error IS NULL").fetchone()[0]
        scores, passed, errors = con.execute(
            "SELECT count(*), count(*) FILTER (WHERE passed), count(*) FILTER (WHERE error) "
            "FROM scores WHERE scorer = 'judge'"
        ).fetchone()
    return {"outputs": outputs, "scores": scores, "passed_scores": passed, "score_errors": errors}


def bench(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    n, conc = args.cases, args.concurrency
    config = write_suite(root / "suite", n, conc)
    db = root / "bench.duckdb"
    rounds = []
    with Server(args.latency_ms) as server:
        run_bare(server, min(n, 32), conc)  # warm-up: page cache, first sockets
        for _ in range(args.rounds):
            bare = run_bare(server, n, conc)
            evalkit = run_evalkit(server, config, db, conc)
            rounds.append(
                {"bare": bare, "evalkit": evalkit, "ratio": evalkit["wall_s"] / bare["wall_s"]}
            )
    limit = 2 * n * args.latency_ms / 1000 / conc  # latency x requests / (2 semaphores of c)

    def med(side: str, key: str) -> float:
        return statistics.median(r[side][key] for r in rounds)

    summary = {
        "median_ratio": statistics.median(r["ratio"] for r in rounds),
        "median_wall_s_bare": med("bare", "wall_s"),
        "median_wall_s_evalkit": med("evalkit", "wall_s"),
        "median_cpu_s_bare": med("bare", "cpu_s"),
        "median_cpu_s_evalkit": med("evalkit", "cpu_s"),
        "latency_limit_s": limit,
        "overlap_every_round": all(r["evalkit"]["overlap"] for r in rounds),
        "median_judge_share_before_last_system": med("evalkit", "judge_share_before_last_system"),
        "rescore_requests": max(
            r["evalkit"]["rescore"]["system_requests"] + r["evalkit"]["rescore"]["judge_requests"]
            for r in rounds
        ),
        "rescore_changed_judge_requests": min(
            r["evalkit"]["rescore_changed_judge"]["judge_requests"] for r in rounds
        ),
        "median_rescore_wall_s": statistics.median(
            r["evalkit"]["rescore"]["wall_s"] for r in rounds
        ),
        "median_rescore_cpu_s": statistics.median(r["evalkit"]["rescore"]["cpu_s"] for r in rounds),
        "median_rescore_changed_judge_wall_s": statistics.median(
            r["evalkit"]["rescore_changed_judge"]["wall_s"] for r in rounds
        ),
    }
    return {"cases": n, "concurrency": conc, "rounds": rounds, "summary": summary}


def _print(f: dict[str, Any]) -> None:
    s = f["summary"]
    print(
        f"judge: {f['cases']} cases x (1 system + 1 judge call), c={f['concurrency']}, "
        f"{f['latency_ms']:g} ms; load {f['loadavg_1min'][0]:.1f} on {f['cores']} cores; medians"
    )
    for i, r in enumerate(f["rounds"]):
        e, b = r["evalkit"], r["bare"]
        print(
            f"  round {i}: bare {b['wall_s']:.2f} s, evalkit {e['wall_s']:.2f} s "
            f"({r['ratio']:.3f}x); served {e['system_requests']}+{e['judge_requests']}; "
            f"stored {e['outputs']} outputs, {e['scores']} judge scores ({e['passed_scores']} "
            f"passed); rescore {e['rescore']['wall_s']:.2f} s, "
            f"{e['rescore']['system_requests'] + e['rescore']['judge_requests']} requests"
        )
    print(
        f"  median ratio {s['median_ratio']:.3f}x (bare {s['median_wall_s_bare']:.2f} s, "
        f"evalkit {s['median_wall_s_evalkit']:.2f} s; latency limit {s['latency_limit_s']:.2f} s);"
        f" CPU bare {s['median_cpu_s_bare']:.2f} s, evalkit {s['median_cpu_s_evalkit']:.2f} s"
    )
    print(
        f"  judge calls overlap system calls: {s['overlap_every_round']} "
        f"({s['median_judge_share_before_last_system']:.0%} of judge calls arrived before the "
        f"last system call); rescore with the judge unchanged: {s['rescore_requests']} requests, "
        f"with judge.snapshot changed: {s['rescore_changed_judge_requests']} judge requests"
    )
    print(
        f"  rescore with the judge unchanged: {s['median_rescore_wall_s']:.2f} s wall, "
        f"{s['median_rescore_cpu_s']:.2f} s CPU (the whole process); with judge.snapshot "
        f"changed: {s['median_rescore_changed_judge_wall_s']:.2f} s"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()[0]
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="evalkit-bench-judge-") as tmp:
        figures = bench(args, Path(tmp))
    figures |= {
        "cores": os.cpu_count(),
        "loadavg_1min": [load_before, os.getloadavg()[0]],
        "latency_ms": args.latency_ms,
        "elapsed_s": time.time() - started,
    }
    _print(figures)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

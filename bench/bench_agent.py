"""Agent throughput: cases of 3 tool calls each, served from fixtures (4 model requests a case).

A loopback server (:data:`SERVER`, aiohttp, its own process) plays the agent: while a request
offering tools carries fewer than 3 tool results it asks for the next tool (``lookup_order``,
``lookup_customer``, ``issue_refund``), then answers with JSON; a request offering no tools is
answered at once. Each answer comes after a fixed latency. evalkit serves every tool call from
the case's fixtures. Measured as fresh processes from bench_process's spawner (wall, CPU, peak
RSS), in one invocation:

* ``agent``: ``evalkit run`` of N agent cases at concurrency c; wall over the limit that
  latency x requests / concurrency sets (4N x latency / c); target <= 1.1x.
* ``single``: ``evalkit run`` of 4N one-turn cases (the same number of requests); CPU per
  request of the agent run over this one's; target <= 1.5x.
* ``replays``: the agent run with ``--replays 5``: peak RSS beside the single-replay run's
  (flat: the same cases, five times the outputs).
* ``bare``: the floor on this machine, in the same invocation: an aiohttp loop (no evalkit)
  doing the same tool loop (N cases, 4 requests each, the tools offered, tool results from the
  same fixtures, a semaphore of c per request). On a loaded machine the limit is out of reach
  for anything (both sides wait for the CPU); the agent run over the bare loop is what evalkit
  itself costs.

Checked, not assumed: the server's request count is 4N (1 x 4N, 5 x 4N; the bare loop's too),
the store holds every output with 3 tool calls and a passing score for each scorer, and the
bare loop made 3N tool calls and parsed N final answers.

Usage:
    .venv/bin/python bench/bench_agent.py --cases 1000 --concurrency 32 --rounds 3
    .venv/bin/python bench/bench_agent.py --cases 20 --concurrency 4 --latency-ms 5 --rounds 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
import bench_process  # noqa: E402  (the spawner and its rusage figures)
import loopback  # noqa: E402  (the server script's tail and its process)

TOOLS = ("lookup_order", "lookup_customer", "issue_refund")
STEPS = len(TOOLS) + 1  # model requests per agent case
SCORERS = 2

#: ``python -c SERVER latency_ms``: prints its port, serves until stdin closes.
SERVER = (
    """
import asyncio, json, sys, threading
from aiohttp import web

latency = float(sys.argv[1]) / 1000
TOOLS = ("lookup_order", "lookup_customer", "issue_refund")
count = {"requests": 0}
FINAL = json.dumps({"category": "billing", "refund": True})

async def chat(request):
    body = json.loads(await request.read())
    count["requests"] += 1
    done = sum(m.get("role") == "tool" for m in body["messages"])
    await asyncio.sleep(latency)
    if body.get("tools") and done < len(TOOLS):
        call = {"id": f"call_{done}", "type": "function",
                "function": {"name": TOOLS[done], "arguments": json.dumps({"order_id": "8812"})}}
        message, finish = {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
    else:
        message, finish = {"role": "assistant", "content": FINAL}, "stop"
    return web.json_response({
        "id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
        "choices": [{"index": 0, "finish_reason": finish, "message": message}],
        "usage": {"prompt_tokens": 60, "completion_tokens": 12, "total_tokens": 72},
    })

async def stats(request):
    return web.json_response(count)

async def reset(request):
    count["requests"] = 0
    return web.json_response(count)

"""
    + loopback.SERVE
)


#: ``python -c BARE_LOOP base_url cases concurrency tools.json``: the same tool loop, no
#: evalkit; prints the tool calls made and the final answers parsed.
BARE_LOOP = """
import asyncio, json, sys
import aiohttp

base_url, n, concurrency = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
tools = json.loads(open(sys.argv[4], encoding="utf-8").read())
FIXTURES = {"lookup_order": {"status": "delivered", "charges": 2},
            "lookup_customer": {"verified": True},
            "issue_refund": {"refund_id": "RF-1", "status": "issued"}}

async def main():
    slots = asyncio.Semaphore(concurrency)
    url = base_url + "/chat/completions"
    headers = {"Authorization": "Bearer bench"}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        async def one(i):
            messages = [{"role": "user", "content": f"Refund the double charge on {i}."}]
            calls = 0
            while True:
                body = {"model": "bench-agent-1", "messages": messages, "tools": tools,
                        "temperature": 0}
                async with slots:
                    async with session.post(url, json=body, headers=headers) as response:
                        reply = json.loads(await response.read())
                message = reply["choices"][0]["message"]
                if not message.get("tool_calls"):
                    json.loads(message["content"])
                    return calls
                messages.append(message)
                for call in message["tool_calls"]:
                    json.loads(call["function"]["arguments"])
                    content = json.dumps(FIXTURES[call["function"]["name"]])
                    messages.append({"role": "tool", "tool_call_id": call["id"],
                                     "content": content})
                    calls += 1

        done = await asyncio.gather(*(one(i) for i in range(n)))
    print(sum(done), len(done))

asyncio.run(main())
"""


class Server(loopback.LoopbackServer):
    """The loopback agent server process (stopped on exit of the ``with`` block)."""

    def __init__(self, latency_ms: float) -> None:
        super().__init__(SERVER, latency_ms)

    def requests(self) -> int:
        return int(self.stats()["requests"])


def stop_spawner() -> None:
    """Stop bench_process's spawner (a test that imports this module calls it)."""
    bench_process.stop_spawner()


def write_suite(root: Path, n_cases: int, concurrency: int, agent: bool) -> Path:
    """N agent cases (tool fixtures; ``tool_order`` and ``json_valid``) or one-turn cases
    (``json_valid`` and ``max_words``); returns the config path."""
    (root / "cases").mkdir(parents=True)
    (root / "tools").mkdir()
    schemas = [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": f"{name} for an order",
                "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
            },
        }
        for name in TOOLS
    ]
    (root / "tools" / "support.json").write_text(json.dumps(schemas), encoding="utf-8")
    fixtures = (
        "  fixtures: {tools: {lookup_order: {status: delivered, charges: 2}, "
        "lookup_customer: {verified: true}, issue_refund: {refund_id: RF-1, status: issued}}}\n"
    )
    expect = (
        "  expect: [{scorer: tool_order, args: {sequence: [lookup_order, issue_refund]}}, "
        "json_valid]\n"
        if agent
        else "  expect: [json_valid, {max_words: 50}]\n"
    )
    lines = [
        f"- id: {'agent' if agent else 'single'}-{i:06d}\n"
        f"  input: {{messages: [{{role: user, content: 'Refund the double charge on {i}.'}}]}}\n"
        + (fixtures if agent else "")
        + expect
        for i in range(n_cases)
    ]
    (root / "cases" / "cases.yaml").write_text("".join(lines), encoding="utf-8")
    config = root / "evalkit.yaml"
    config.write_text(
        "suite: bench-agent\n"
        "system:\n"
        "  model: bench-agent-1\n"
        "  base_url: http://127.0.0.1:9/v1\n"
        "  tools: tools/support.json\n"
        "  timeout_s: 60\n"
        "  sampling: {temperature: 0}\n"
        f"concurrency: {concurrency}\n"
        "cache: false\n",
        encoding="utf-8",
    )
    return config


def run_evalkit(
    server: Server, config: Path, db: Path, concurrency: int, replays: int = 1
) -> dict[str, Any]:
    """``evalkit run`` into a fresh store; what the server served and the store holds."""
    db.unlink(missing_ok=True)
    command = [
        sys.executable, "-m", "evalkit.cli", "run", "--config", str(config), "--db", str(db),
        "--no-progress", "--label", "bench", "--concurrency", str(concurrency),
        "--replays", str(replays), "--set", f"system.base_url={server.base_url}",
    ]  # fmt: skip
    server.reset()
    proc = bench_process.measure(command)
    row = {k: v for k, v in asdict(proc).items() if k != "stdout"}
    row |= {"served": server.requests()} | _stored(db)
    db.unlink(missing_ok=True)
    return row


def run_bare(server: Server, tools: Path, n_cases: int, concurrency: int) -> dict[str, Any]:
    """The bare aiohttp tool loop (:data:`BARE_LOOP`): what the server served, the tool calls
    made and the final answers parsed."""
    server.reset()
    command = [sys.executable, "-c", BARE_LOOP, server.base_url, str(n_cases), str(concurrency)]
    proc = bench_process.measure([*command, str(tools)])
    calls, answers = (int(word) for word in proc.stdout.split()[-2:])
    row = {k: v for k, v in asdict(proc).items() if k != "stdout"}
    return row | {"served": server.requests(), "tool_calls": calls, "outputs": answers}


def _stored(db: Path) -> dict[str, Any]:
    import duckdb

    with duckdb.connect(str(db), read_only=True) as con:
        outputs, ok = con.execute(
            "SELECT count(*), count(*) FILTER (WHERE error IS NULL AND fail_reason IS NULL) "
            "FROM outputs"
        ).fetchone()
        scores, passed = con.execute(
            "SELECT count(*), count(*) FILTER (WHERE passed) FROM scores"
        ).fetchone()
        calls = con.execute(
            "SELECT coalesce(sum(json_array_length(tool_calls::JSON)), 0) FROM outputs"
        ).fetchone()[0]
    return {
        "outputs": outputs,
        "ok_outputs": ok,
        "scores": scores,
        "passed_scores": passed,
        "tool_calls": calls,
    }


def bench(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    n, conc = args.cases, args.concurrency
    agent = write_suite(root / "agent", n, conc, agent=True)
    single = write_suite(root / "single", STEPS * n, conc, agent=False)
    db = root / "bench.duckdb"
    rounds = []
    with Server(args.latency_ms) as server:
        run_evalkit(server, single, db, conc)  # warm-up: page cache, first sockets
        for _ in range(args.rounds):
            row = {
                "bare": run_bare(server, agent.parent / "tools" / "support.json", n, conc),
                "agent": run_evalkit(server, agent, db, conc),
                "single": run_evalkit(server, single, db, conc),
                "replays": run_evalkit(server, agent, db, conc, replays=args.replays),
            }
            for side in row.values():
                side["cpu_ms_per_request"] = 1000 * side["cpu_s"] / max(side["served"], 1)
            row["ratio_to_limit"] = row["agent"]["wall_s"] / (
                STEPS * n * args.latency_ms / 1000 / conc
            )
            row["bare_ratio_to_limit"] = row["bare"]["wall_s"] / (
                STEPS * n * args.latency_ms / 1000 / conc
            )
            row["agent_vs_bare"] = row["agent"]["wall_s"] / row["bare"]["wall_s"]
            row["cpu_per_request_vs_single"] = (
                row["agent"]["cpu_ms_per_request"] / row["single"]["cpu_ms_per_request"]
            )
            row["rss_replays_vs_one"] = (
                row["replays"]["peak_rss_mib"] / row["agent"]["peak_rss_mib"]
            )
            rounds.append(row)

    def med(key: str) -> float:
        return statistics.median(r[key] for r in rounds)

    summary = {
        "limit_s": STEPS * n * args.latency_ms / 1000 / conc,
        "median_ratio_to_limit": med("ratio_to_limit"),
        "median_bare_ratio_to_limit": med("bare_ratio_to_limit"),
        "median_agent_vs_bare": med("agent_vs_bare"),
        "median_cpu_per_request_vs_single": med("cpu_per_request_vs_single"),
        "median_rss_replays_vs_one": med("rss_replays_vs_one"),
    }
    for side in ("bare", "agent", "single", "replays"):
        for key in ("wall_s", "cpu_s", "peak_rss_mib", "cpu_ms_per_request"):
            summary[f"median_{key}_{side}"] = statistics.median(r[side][key] for r in rounds)
    return {"cases": n, "concurrency": conc, "replays": args.replays, "rounds": rounds} | {
        "summary": summary
    }


def _print(f: dict[str, Any]) -> None:
    s = f["summary"]
    print(
        f"agent: {f['cases']} cases x {STEPS} requests (3 tool calls from fixtures), "
        f"c={f['concurrency']}, {f['latency_ms']:g} ms; load {f['loadavg_1min'][0]:.1f} on "
        f"{f['cores']} cores; medians"
    )
    for i, r in enumerate(f["rounds"]):
        a = r["agent"]
        print(
            f"  round {i}: agent {a['wall_s']:.2f} s ({r['ratio_to_limit']:.3f}x the limit), "
            f"served {a['served']}, {a['tool_calls']} tool calls, {a['passed_scores']}/"
            f"{a['scores']} scores passed; CPU/request {a['cpu_ms_per_request']:.3f} ms vs "
            f"single-turn {r['single']['cpu_ms_per_request']:.3f} ms "
            f"({r['cpu_per_request_vs_single']:.2f}x); peak RSS {a['peak_rss_mib']:.0f} MiB, "
            f"x{f['replays']} replays {r['replays']['peak_rss_mib']:.0f} MiB; bare loop "
            f"{r['bare']['wall_s']:.2f} s ({r['bare_ratio_to_limit']:.3f}x the limit), agent "
            f"{r['agent_vs_bare']:.3f}x the bare loop"
        )
    print(
        f"  median: {s['median_wall_s_agent']:.2f} s against the limit {s['limit_s']:.2f} s = "
        f"{s['median_ratio_to_limit']:.3f}x; CPU per request "
        f"{s['median_cpu_ms_per_request_agent']:.3f} ms = "
        f"{s['median_cpu_per_request_vs_single']:.2f}x single-turn's "
        f"{s['median_cpu_ms_per_request_single']:.3f} ms; peak RSS "
        f"{s['median_peak_rss_mib_agent']:.0f} MiB, with {f['replays']} replays "
        f"{s['median_peak_rss_mib_replays']:.0f} MiB ({s['median_rss_replays_vs_one']:.2f}x)"
    )
    print(
        f"  bare aiohttp tool loop (same invocation): {s['median_wall_s_bare']:.2f} s = "
        f"{s['median_bare_ratio_to_limit']:.3f}x the limit; agent run "
        f"{s['median_agent_vs_bare']:.3f}x the bare loop"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--replays", type=int, default=5, help="replays of the memory run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="evalkit-bench-agent-") as tmp:
        figures = bench(args, Path(tmp))
    figures |= {
        "cores": os.cpu_count(),
        "loadavg_1min": [load_before, os.getloadavg()[0]],
        "latency_ms": args.latency_ms,
    }
    _print(figures)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Agent throughput: cases of 3 tool calls each, served from fixtures (4 model requests a case).

A loopback server (its own process) plays the agent: while a request offering tools carries
fewer than 3 tool results it asks for the next tool (``lookup_order``, ``lookup_customer``,
``issue_refund``), then answers with JSON; a request offering no tools is answered at once.
Each answer comes after a fixed latency. ``--server raw`` (the default, :data:`RAW_SERVER`) is
a bare asyncio.Protocol HTTP/1.1 keep-alive responder that still parses every request and counts
it, writing one of four answers serialized once: about 0.08 ms of CPU per request against the
aiohttp web app's 0.21 ms (``--server aiohttp``, :data:`AIOHTTP_SERVER`), CPU the server would
otherwise take from the client on the same cores; ``--server both`` runs the two interleaved.
evalkit serves every tool call from the case's fixtures. Measured as fresh processes from
bench_process's spawner (wall, CPU, peak RSS), in one invocation:

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
* ``openai``: the bare loop a user would write, the reference for "evalkit at most 1.0x the bare
  loop": the official client's ``AsyncOpenAI`` doing the same tool loop (the same requests,
  tools and fixtures, a semaphore of c per request), storing and scoring nothing.

Where the time goes, per side: the client's CPU per request (the process, and its event loop
alone: imports and set-up left out), its loop's lag (how late a 10 ms timer fires) and the
loop's own wall over the limit; the server's CPU per request (its rusage) and its loop's lag;
and both processes' CPU as a share of the cores.

Checked, not assumed: the server's request count is 4N (1 x 4N, 5 x 4N; the bare loops' too),
the store holds every output with 3 tool calls and a passing score for each scorer, and each
bare loop made 3N tool calls and parsed N final answers.

Usage:
    .venv/bin/python bench/bench_agent.py --cases 1000 --concurrency 32 --rounds 3
    .venv/bin/python bench/bench_agent.py --cases 1000 --concurrency 32 --rounds 3 --server both
    .venv/bin/python bench/bench_agent.py --cases 20 --concurrency 4 --latency-ms 5 --rounds 1
"""

from __future__ import annotations

import argparse
import contextlib
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

#: The agent both servers play: the completion for a request body (a dict).
AGENT = """
latency = float(sys.argv[1]) / 1000
TOOLS = ("lookup_order", "lookup_customer", "issue_refund")
count = {"requests": 0}
FINAL = json.dumps({"category": "billing", "refund": True})

def step_of(body):
    \"\"\"The tool this request is answered with (its index), or len(TOOLS): the final answer.\"\"\"
    done = sum(m.get("role") == "tool" for m in body["messages"])
    return done if body.get("tools") and done < len(TOOLS) else len(TOOLS)

def completion(model, step):
    if step < len(TOOLS):
        call = {"id": f"call_{step}", "type": "function",
                "function": {"name": TOOLS[step], "arguments": json.dumps({"order_id": "8812"})}}
        message, finish = {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
    else:
        message, finish = {"role": "assistant", "content": FINAL}, "stop"
    return {
        "id": "x", "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "finish_reason": finish, "message": message}],
        "usage": {"prompt_tokens": 60, "completion_tokens": 12, "total_tokens": 72},
    }
"""

#: ``python -c AIOHTTP_SERVER latency_ms``: the agent as an aiohttp web app; prints its port,
#: serves until stdin closes.
AIOHTTP_SERVER = (
    """
import asyncio, json, sys, threading
from aiohttp import web
"""
    + loopback.PROBE
    + AGENT
    + """
probe = LoopProbe()

async def chat(request):
    body = json.loads(await request.read())
    count["requests"] += 1
    await asyncio.sleep(latency)
    return web.json_response(completion(body["model"], step_of(body)))

async def stats(request):
    return web.json_response(count | probe.figures())

async def reset(request):
    count["requests"] = 0
    probe.reset()
    return web.json_response(count)

"""
    + loopback.SERVE
)

#: ``python -c RAW_SERVER latency_ms``: the same agent over a bare asyncio.Protocol responder
#: (:data:`loopback.RAW_SERVE`); each request body is still parsed (the step is the count of
#: its tool messages) and counted, and each of the four answers is serialized once per model.
RAW_SERVER = (
    loopback.RAW_HEAD
    + loopback.PROBE
    + AGENT
    + """
probe = LoopProbe()
ANSWERS = {}

def route(method, path, body):
    if path == b"/v1/chat/completions" and method == b"POST":
        request = json.loads(body)
        count["requests"] += 1
        key = (request["model"], step_of(request))
        if key not in ANSWERS:
            ANSWERS[key] = ok_response(json.dumps(completion(*key)).encode())
        return latency, ANSWERS[key]
    if path == b"/stats":
        return 0, ok_response(json.dumps(count | probe.figures()).encode())
    if path == b"/reset" and method == b"POST":
        count["requests"] = 0
        probe.reset()
        return 0, ok_response(json.dumps(count).encode())
    return 0, NOT_FOUND
"""
    + loopback.RAW_SERVE
)

#: The loopback servers ``--server`` picks from.
SERVERS = {"raw": RAW_SERVER, "aiohttp": AIOHTTP_SERVER}


#: What both bare tool loops start with: their arguments and the tools' fixed answers.
_LOOP_START = """
import asyncio, json, sys

base_url, n, concurrency = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
tools = json.loads(open(sys.argv[4], encoding="utf-8").read())
FIXTURES = {"lookup_order": {"status": "delivered", "charges": 2},
            "lookup_customer": {"verified": True},
            "issue_refund": {"refund_id": "RF-1", "status": "issued"}}
"""

#: ``python -c BARE_LOOP base_url cases concurrency tools.json``: the same tool loop, no
#: evalkit; prints the tool calls made, the final answers parsed and its loop's probe (JSON).
BARE_LOOP = (
    loopback.PROBE
    + _LOOP_START
    + """
import aiohttp

async def main():
    probe = LoopProbe()
    probe.reset()
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
    print(sum(done), len(done), json.dumps(probe.figures()))

asyncio.run(main())
"""
)

#: ``python -c OPENAI_LOOP base_url cases concurrency tools.json``: the same tool loop through
#: the official client's ``AsyncOpenAI`` (what a user's own loop would be); prints as
#: :data:`BARE_LOOP` does.
OPENAI_LOOP = (
    loopback.PROBE
    + _LOOP_START
    + """
import openai

async def main():
    probe = LoopProbe()
    probe.reset()
    slots = asyncio.Semaphore(concurrency)
    client = openai.AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0, timeout=60)

    async def one(i):
        messages = [{"role": "user", "content": f"Refund the double charge on {i}."}]
        calls = 0
        while True:
            async with slots:
                response = await client.chat.completions.create(
                    model="bench-agent-1", messages=messages, tools=tools, temperature=0
                )
            message = response.choices[0].message
            if not message.tool_calls:
                json.loads(message.content)
                return calls
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                json.loads(call.function.arguments)
                content = json.dumps(FIXTURES[call.function.name])
                messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
                calls += 1

    try:
        done = await asyncio.gather(*(one(i) for i in range(n)))
    finally:
        await client.close()
    print(sum(done), len(done), json.dumps(probe.figures()))

asyncio.run(main())
"""
)

#: ``python -c CLIENT_PROBE probe.json module args...``: ``python -m module args`` with a
#: :data:`loopback.PROBE` on the loop its ``asyncio.run`` runs; the probe's figures (the CPU
#: and lag of the loop's lifetime, imports and setup before it excluded) go to probe.json.
CLIENT_PROBE = (
    loopback.PROBE
    + """
import json, runpy, sys

figures_path, module = sys.argv[1], sys.argv[2]
sys.argv = [module, *sys.argv[3:]]
unprobed_run = asyncio.run

def probed_run(main, **kwargs):
    async def probed():
        probe = LoopProbe()
        probe.reset()
        try:
            return await main
        finally:
            probe.task.cancel()
            with open(figures_path, "w", encoding="utf-8") as out:
                json.dump(probe.figures(), out)
    return unprobed_run(probed(), **kwargs)

asyncio.run = probed_run
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""
)


class Server(loopback.LoopbackServer):
    """The loopback agent server process (stopped on exit of the ``with`` block); ``kind`` is
    a key of :data:`SERVERS`."""

    def __init__(self, latency_ms: float, kind: str = "raw") -> None:
        super().__init__(SERVERS[kind], latency_ms)

    def requests(self) -> int:
        return int(self.stats()["requests"])

    def served(self) -> dict[str, float]:
        """Requests served since the last reset, the server's CPU in that time (its own
        rusage), its CPU per request and its event loop's lag."""
        got = self.stats()
        requests = int(got["requests"])
        return {
            "served": requests,
            "server_cpu_s": got["cpu_s"],
            "server_cpu_ms_per_request": 1000 * got["cpu_s"] / max(requests, 1),
            "server_lag_mean_ms": got["lag_mean_ms"],
            "server_lag_max_ms": got["lag_max_ms"],
        }


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
    """``evalkit run`` into a fresh store (its loop probed, :data:`CLIENT_PROBE`); what the
    server served and spent and the store holds."""
    db.unlink(missing_ok=True)
    figures = db.with_suffix(".probe.json")
    command = [
        sys.executable, "-c", CLIENT_PROBE, str(figures), "evalkit.cli",
        "run", "--config", str(config), "--db", str(db),
        "--no-progress", "--label", "bench", "--concurrency", str(concurrency),
        "--replays", str(replays), "--set", f"system.base_url={server.base_url}",
    ]  # fmt: skip
    server.reset()
    proc = bench_process.measure(command)
    row = {k: v for k, v in asdict(proc).items() if k not in ("stdout", "marks")}
    row |= server.served() | _client_loop(json.loads(figures.read_text(encoding="utf-8")))
    row |= _stored(db)
    db.unlink(missing_ok=True)
    return row


def run_bare(
    server: Server, tools: Path, n_cases: int, concurrency: int, loop: str = BARE_LOOP
) -> dict[str, Any]:
    """A bare tool loop (:data:`BARE_LOOP`, aiohttp, or :data:`OPENAI_LOOP`): what the server
    served and spent, the tool calls made, the final answers parsed and the loop's probe."""
    server.reset()
    command = [sys.executable, "-c", loop, server.base_url, str(n_cases), str(concurrency)]
    proc = bench_process.measure([*command, str(tools)])
    calls, answers, probe = proc.stdout.strip().splitlines()[-1].split(" ", 2)
    row = {k: v for k, v in asdict(proc).items() if k not in ("stdout", "marks")}
    row |= server.served() | _client_loop(json.loads(probe))
    return row | {"tool_calls": int(calls), "outputs": int(answers)}


def _client_loop(probe: dict[str, float]) -> dict[str, float]:
    return {
        "loop_wall_s": probe["wall_s"],
        "loop_cpu_s": probe["cpu_s"],
        "loop_lag_mean_ms": probe["lag_mean_ms"],
        "loop_lag_max_ms": probe["lag_max_ms"],
    }


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
    tools = agent.parent / "tools" / "support.json"
    db = root / "bench.duckdb"
    limit_s = STEPS * n * args.latency_ms / 1000 / conc
    kinds = list(SERVERS) if args.server == "both" else [args.server]
    rounds: dict[str, list[dict[str, Any]]] = {kind: [] for kind in kinds}
    with contextlib.ExitStack() as stack:
        servers = {kind: stack.enter_context(Server(args.latency_ms, kind)) for kind in kinds}
        run_evalkit(servers[kinds[0]], single, db, conc)  # warm-up: page cache, first sockets
        for _ in range(args.rounds):
            for kind, server in servers.items():  # interleaved: both see the same load drift
                row = {
                    "bare": run_bare(server, tools, n, conc),
                    "openai": run_bare(server, tools, n, conc, OPENAI_LOOP),
                    "agent": run_evalkit(server, agent, db, conc),
                    "single": run_evalkit(server, single, db, conc),
                    "replays": run_evalkit(server, agent, db, conc, replays=args.replays),
                }
                for side in row.values():
                    served = max(side["served"], 1)
                    side["cpu_ms_per_request"] = 1000 * side["cpu_s"] / served
                    side["loop_cpu_ms_per_request"] = 1000 * side["loop_cpu_s"] / served
                    # both processes' CPU over what the cores could give in that wall time
                    side["cpu_share_of_cores"] = (side["cpu_s"] + side["server_cpu_s"]) / (
                        side["wall_s"] * (os.cpu_count() or 1)
                    )
                for side in row.values():  # the loop alone: process start and exit left out
                    side["loop_ratio_to_limit"] = side["loop_wall_s"] / (
                        limit_s * side["served"] / (STEPS * n)
                    )
                row["ratio_to_limit"] = row["agent"]["wall_s"] / limit_s
                row["bare_ratio_to_limit"] = row["bare"]["wall_s"] / limit_s
                row["agent_vs_bare"] = row["agent"]["wall_s"] / row["bare"]["wall_s"]
                row["agent_vs_openai"] = row["agent"]["wall_s"] / row["openai"]["wall_s"]
                row["openai_ratio_to_limit"] = row["openai"]["wall_s"] / limit_s
                row["cpu_per_request_vs_single"] = (
                    row["agent"]["cpu_ms_per_request"] / row["single"]["cpu_ms_per_request"]
                )
                row["loop_cpu_per_request_vs_single"] = (
                    row["agent"]["loop_cpu_ms_per_request"]
                    / row["single"]["loop_cpu_ms_per_request"]
                )
                row["rss_replays_vs_one"] = (
                    row["replays"]["peak_rss_mib"] / row["agent"]["peak_rss_mib"]
                )
                rounds[kind].append(row)
    by_server = {kind: {"rounds": rows, "summary": _summary(rows)} for kind, rows in rounds.items()}
    return {
        "cases": n,
        "concurrency": conc,
        "replays": args.replays,
        "limit_s": limit_s,
        "servers": by_server,
    }


_SIDE_FIGURES = (
    "wall_s", "loop_wall_s", "loop_ratio_to_limit", "cpu_s", "peak_rss_mib", "cpu_ms_per_request",
    "loop_cpu_ms_per_request",
    "loop_lag_mean_ms", "loop_lag_max_ms", "server_cpu_ms_per_request", "server_lag_mean_ms",
    "server_lag_max_ms", "cpu_share_of_cores",
)  # fmt: skip


def _summary(rounds: list[dict[str, Any]]) -> dict[str, float]:
    """Medians over the rounds of one server: the ratios, then each side's figures."""
    summary = {
        f"median_{key}": statistics.median(r[key] for r in rounds)
        for key in (
            "ratio_to_limit", "bare_ratio_to_limit", "agent_vs_bare", "agent_vs_openai",
            "openai_ratio_to_limit", "cpu_per_request_vs_single",
            "loop_cpu_per_request_vs_single", "rss_replays_vs_one",
        )
    }  # fmt: skip
    for side in ("bare", "openai", "agent", "single", "replays"):
        for key in _SIDE_FIGURES:
            summary[f"median_{key}_{side}"] = statistics.median(r[side][key] for r in rounds)
    return summary


def _print(f: dict[str, Any]) -> None:
    print(
        f"agent: {f['cases']} cases x {STEPS} requests (3 tool calls from fixtures), "
        f"c={f['concurrency']}, {f['latency_ms']:g} ms, limit {f['limit_s']:.2f} s; load "
        f"{f['loadavg_1min'][0]:.1f} -> {f['loadavg_1min'][1]:.1f} on {f['cores']} cores"
    )
    for kind, figures in f["servers"].items():
        print(f" server {kind}:")
        for i, r in enumerate(figures["rounds"]):
            a, b = r["agent"], r["bare"]
            print(
                f"  round {i}: agent {a['wall_s']:.2f} s ({r['ratio_to_limit']:.3f}x the limit, "
                f"{r['agent_vs_bare']:.3f}x the bare loop's {b['wall_s']:.2f} s = "
                f"{r['bare_ratio_to_limit']:.3f}x), {r['agent_vs_openai']:.3f}x the "
                f"AsyncOpenAI loop's {r['openai']['wall_s']:.2f} s, served {a['served']}, "
                f"{a['tool_calls']} "
                f"tool calls, {a['passed_scores']}/{a['scores']} scores passed; "
                f"x{f['replays']} replays peak RSS {r['replays']['peak_rss_mib']:.0f} vs "
                f"{a['peak_rss_mib']:.0f} MiB"
            )
        s = figures["summary"]
        print(
            f"  median: agent {s['median_wall_s_agent']:.2f} s = "
            f"{s['median_ratio_to_limit']:.3f}x the limit, {s['median_agent_vs_bare']:.3f}x the "
            f"bare loop ({s['median_wall_s_bare']:.2f} s = {s['median_bare_ratio_to_limit']:.3f}x "
            f"the limit), {s['median_agent_vs_openai']:.3f}x the bare AsyncOpenAI loop "
            f"({s['median_wall_s_openai']:.2f} s = {s['median_openai_ratio_to_limit']:.3f}x the "
            f"limit); CPU/request {s['median_cpu_ms_per_request_agent']:.3f} ms = "
            f"{s['median_cpu_per_request_vs_single']:.2f}x single-turn's "
            f"{s['median_cpu_ms_per_request_single']:.3f} ms (in the loop "
            f"{s['median_loop_cpu_ms_per_request_agent']:.3f} vs "
            f"{s['median_loop_cpu_ms_per_request_single']:.3f} ms = "
            f"{s['median_loop_cpu_per_request_vs_single']:.2f}x); peak RSS x{f['replays']} "
            f"replays {s['median_rss_replays_vs_one']:.2f}x one"
        )
        for side in ("bare", "openai", "agent", "single"):
            print(
                f"    {side:>6}: wall {s[f'median_wall_s_{side}']:.2f} s, its loop "
                f"{s[f'median_loop_wall_s_{side}']:.2f} s = "
                f"{s[f'median_loop_ratio_to_limit_{side}']:.3f}x the limit; client CPU/request "
                f"{s[f'median_cpu_ms_per_request_{side}']:.3f} "
                f"ms (loop {s[f'median_loop_cpu_ms_per_request_{side}']:.3f}), loop lag mean "
                f"{s[f'median_loop_lag_mean_ms_{side}']:.2f} max "
                f"{s[f'median_loop_lag_max_ms_{side}']:.1f} ms; server CPU/request "
                f"{s[f'median_server_cpu_ms_per_request_{side}']:.3f} ms, lag mean "
                f"{s[f'median_server_lag_mean_ms_{side}']:.2f} max "
                f"{s[f'median_server_lag_max_ms_{side}']:.1f} ms; both processes "
                f"{100 * s[f'median_cpu_share_of_cores_{side}']:.0f}% of the cores"
            )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--replays", type=int, default=5, help="replays of the memory run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--server",
        choices=[*SERVERS, "both"],
        default="raw",
        help="the loopback server: raw (asyncio.Protocol, the default), aiohttp, or both",
    )
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

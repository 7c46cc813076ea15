"""The judge-heavy workload through evalkit, a bare loop, DeepEval, promptfoo and Inspect.

Every case is one system call plus one judge call (a rubric, reason before score), against one
loopback server (aiohttp, 127.0.0.1, in its own process, fixed latency, no noise) that speaks the
OpenAI chat completions API. The server tells the calls apart by model name and answers each
judge in the shape its tool parses:

* ``bench-system``: the system's JSON reply (every tool's system call);
* ``bench-judge``: evalkit's ``{"reason", "score"}`` on 1-5 (evalkit and the bare loop);
* ``judge-geval``: DeepEval GEval's ``{"reason", "score"}`` on 0-10 (``ReasonScore``), or
  ``{"steps": [...]}`` if GEval asks for its evaluation steps;
* ``judge-rubric``: promptfoo llm-rubric's ``{"reason", "pass", "score"}``;
* ``judge-inspect``: Inspect model_graded_qa's ``GRADE: C``.

Each tool runs as a fresh process from bench_process's spawner (wall, child CPU and peak RSS
from ``wait4``), at its own concurrency setting set to c:

* bare: bench_judge's two-call ``AsyncOpenAI`` loop (semaphores of c);
* evalkit: ``evalkit run`` of bench_judge's generated suite (``judge`` scorer), ``concurrency``;
* DeepEval: the system calls through ``AsyncOpenAI`` (a semaphore of c: DeepEval's ``evaluate``
  takes finished test cases, so its judge calls start after the last system call, a phase
  barrier of the tool's making), then ``evaluate([...], [GEval(...)],
  async_config=AsyncConfig(max_concurrent=c))`` with the judge as ``GPTModel(base_url=...)``;
  GEval is given its ``evaluation_steps``, as a rubric is, so it asks no steps-generation call
  (the server would answer one and count it as ``judge-geval:steps``). ``deepeval-nowrite``
  (only with ``--only``) is the same with ``CacheConfig(write_cache=False)``: by default each
  finished case re-reads and re-writes the whole test-run file under a lock;
* promptfoo: ``promptfoo eval --max-concurrency c --no-cache`` of a config whose provider is
  ``openai:chat:bench-system`` and whose ``llm-rubric`` grader is ``openai:chat:judge-rubric``,
  both with ``apiBaseUrl`` at the server;
* Inspect: ``inspect eval --max-connections c`` of a task with ``system_message`` and
  ``generate()`` solvers and ``model_graded_qa(model="openai/judge-inspect")``; both models on
  chat completions (``responses_api=False``: the server speaks no Responses API). Inspect pools
  connections per (key, model), so the grader has its own c, as evalkit's judge has.

The tools are installed by this script, pinned, from the package registries, into
``bench/.rivals/`` (git-ignored): a venv each for deepeval and inspect-ai, ``npm install`` for
promptfoo; reused when present. Every tool's telemetry and update checks are off, its home,
config and log directories are inside ``bench/.rivals/``, its key a dummy and its base URL the
loopback server. The server counts the requests of each kind; a tool's row says what it was
served, so one that makes more judge calls than N shows it.

Rounds alternate the tools; figures are medians over rounds, ratios to the bare loop of the
same round.

Beside the judge-heavy workload, in the same invocation and the same rounds
(``--workloads``, all three by default), evalkit against the bare ``AsyncOpenAI`` loop on the
two other workloads (the other tools are not run on them):

* ``single``: single-turn, bench_process's N one-turn cases (``json_valid``, ``max_words``)
  against the demo simulator (fixed latency, no noise) and bench_process's bare loop;
* ``agent``: bench_agent's N cases of 3 tool calls from fixtures (4 model requests a case)
  against its raw agent server and its bare ``AsyncOpenAI`` tool loop (:data:`OPENAI_LOOP`).

Usage:
    .venv/bin/python bench/bench_judge_rivals.py --cases 1000 --concurrency 32 --rounds 3
    .venv/bin/python bench/bench_judge_rivals.py --workloads judge --only evalkit
    .venv/bin/python bench/bench_judge_rivals.py --cases 50 --rounds 1 --only deepeval,bare
    .venv/bin/python bench/bench_judge_rivals.py --only deepeval,deepeval-nowrite --skip-install
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
import bench_agent  # noqa: E402  (the agent workload: its suite, server and AsyncOpenAI loop)
import bench_judge  # noqa: E402  (the suite, the bare loop and the judge prompt evalkit sends)
import bench_process  # noqa: E402  (the spawner and its rusage figures)
import loopback  # noqa: E402  (the server script's tail and its process)

REPO = bench_process.REPO
RIVALS = BENCH / ".rivals"
SYSTEM_MODEL = bench_judge.SYSTEM_MODEL  # every tool's system call
EVALKIT_JUDGE = bench_judge.JUDGE_MODEL  # evalkit and the bare loop
GEVAL_JUDGE = "judge-geval"
RUBRIC_JUDGE = "judge-rubric"
INSPECT_JUDGE = "judge-inspect"
# GEval's steps for the rubric, given as a rubric is: without them GEval asks the judge for steps
GEVAL_STEPS = [
    "Read the reply to the customer's question.",
    "Judge whether its tone is polite, specific and complete.",
]


@dataclass(frozen=True)
class Tool:
    """One rival: its pinned package and how it is installed."""

    name: str
    package: str
    version: str
    installer: str  # "pip" (a venv of its own) or "npm"
    extras: tuple[str, ...] = ()  # pinned packages it needs beside itself

    @property
    def home(self) -> Path:
        return RIVALS / f"{self.package}-{self.version}"

    @property
    def installed_mark(self) -> Path:
        return self.home / ".installed"

    @property
    def python(self) -> Path:
        return self.home / "bin" / "python"


DEEPEVAL = Tool("deepeval", "deepeval", "4.3.1", "pip")
# Inspect's openai provider needs the openai package, which inspect-ai does not depend on
INSPECT = Tool("inspect", "inspect-ai", "0.3.285", "pip", extras=("openai==3.57.0",))
# 0.122 and later need node >= 22.22; 0.121.x is the newest that runs on this machine's node 20.20
PROMPTFOO = Tool("promptfoo", "promptfoo", "0.121.20", "npm")
RIVAL_TOOLS = (DEEPEVAL, PROMPTFOO, INSPECT)
# "deepeval-nowrite": DeepEval with CacheConfig(write_cache=False). By default each finished
# test case re-reads and re-writes the whole test-run file under a lock (deepeval
# test_run.update_test_run), so its cost per case grows with N; this row shows the tool without
# that. Run only when asked (--only).
EXTRA_NAMES = ("deepeval-nowrite",)
DEFAULT_NAMES = ("bare", "evalkit", *(tool.name for tool in RIVAL_TOOLS))
ALL_NAMES = (*DEFAULT_NAMES, *EXTRA_NAMES)

#: ``python -c SERVER latency_ms``: prints its port, serves until stdin closes.
SERVER = (
    """
import asyncio, json, sys, threading, time
from aiohttp import web

latency = float(sys.argv[1]) / 1000
arrivals = {"judge": [], "system": []}
by_model = {}
REPLY = json.dumps({"category": "billing", "reply": "Refund issued for the duplicate charge."})
VERDICTS = {
    "bench-judge": json.dumps({"reason": "Polite and specific.", "score": 5}),
    "judge-geval": json.dumps({"reason": "Polite and specific.", "score": 9}),
    "judge-rubric": json.dumps({"reason": "Polite and specific.", "pass": True, "score": 1.0}),
    "judge-inspect": "The reply is polite, specific and complete.\\n\\nGRADE: C",
}
STEPS = json.dumps({"steps": ["Read the reply.", "Judge its tone."]})

def text_of(body):
    parts = []
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, list):
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        parts.append(str(content or ""))
    return "\\n".join(parts)

async def chat(request):
    body = json.loads(await request.read())
    model = body["model"]
    kind = "system" if model == "bench-system" else "judge"
    arrivals[kind].append(time.time())
    content = REPLY if kind == "system" else VERDICTS.get(model, VERDICTS["bench-judge"])
    if model == "judge-geval" and '"steps"' in text_of(body):
        content = STEPS
        model_key = model + ":steps"
    else:
        model_key = model
    by_model[model_key] = by_model.get(model_key, 0) + 1
    await asyncio.sleep(latency)
    return web.json_response({
        "id": "chatcmpl-bench", "object": "chat.completion", "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                     "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 12, "total_tokens": 62},
    })

async def stats(request):
    return web.json_response(arrivals | {"by_model": by_model})

async def reset(request):
    for times in arrivals.values():
        times.clear()
    by_model.clear()
    return web.json_response({})

"""
    + loopback.SERVE
)

#: DeepEval, as ``python -c DEEPEVAL_RUN base_url cases concurrency``: the system calls, then
#: ``evaluate`` with GEval; prints the number of passed test cases.
DEEPEVAL_RUN = f"""
import asyncio, sys
import openai
from deepeval import evaluate
from deepeval.evaluate import AsyncConfig, CacheConfig, DisplayConfig
from deepeval.metrics import GEval
from deepeval.models import GPTModel
from deepeval.test_case import LLMTestCase, LLMTestCaseParams

base_url, n, concurrency = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
write_cache = sys.argv[4] == "write"  # DeepEval's default: True
system = {bench_judge.SYSTEM_PROMPT!r}

async def answers():
    client = openai.AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0, timeout=60)
    calls = asyncio.Semaphore(concurrency)

    async def one(i):
        question = f"Order {{10_000 + i}} was charged twice. Refund one?"
        async with calls:
            response = await client.chat.completions.create(
                model="{SYSTEM_MODEL}", temperature=0,
                messages=[{{"role": "system", "content": system}},
                          {{"role": "user", "content": question}}],
            )
        return LLMTestCase(input=question, actual_output=response.choices[0].message.content)

    try:
        return await asyncio.gather(*(one(i) for i in range(n)))
    finally:
        await client.close()

test_cases = asyncio.run(answers())
judge = GPTModel(model="{GEVAL_JUDGE}", base_url=base_url, api_key="bench",
                 cost_per_input_token=0.0, cost_per_output_token=0.0)
tone = GEval(
    name="Tone", criteria={bench_judge.RUBRIC!r}, evaluation_steps={GEVAL_STEPS!r},
    evaluation_params=[LLMTestCaseParams.INPUT, LLMTestCaseParams.ACTUAL_OUTPUT],
    model=judge, threshold=0.6, async_mode=True,
)
result = evaluate(
    test_cases, [tone],
    async_config=AsyncConfig(run_async=True, max_concurrent=concurrency),
    display_config=DisplayConfig(show_indicator=False, print_results=False,
                                 inspect_after_run=False),
    cache_config=CacheConfig(write_cache=write_cache),
)
print(sum(r.success for r in result.test_results))
"""

#: Inspect's task file: N samples, the system prompt, ``generate()``, ``model_graded_qa``.
INSPECT_TASK = f"""
from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import get_model
from inspect_ai.scorer import model_graded_qa
from inspect_ai.solver import generate, system_message

N_CASES = {{n_cases}}


@task
def bench_judge():
    samples = [
        Sample(input=f"Order {{10_000 + i}} was charged twice. Refund one?",
               target={bench_judge.RUBRIC!r})
        for i in range(N_CASES)
    ]
    return Task(
        dataset=MemoryDataset(samples),
        solver=[system_message({bench_judge.SYSTEM_PROMPT!r}), generate()],
        # chat completions, as the server speaks (Inspect's openai provider may pick Responses)
        scorer=model_graded_qa(model=get_model("openai/{INSPECT_JUDGE}", responses_api=False)),
    )
"""


def install(tool: Tool) -> None:
    """Install ``tool`` at its pinned version into ``bench/.rivals/`` unless it is there."""
    if tool.installed_mark.exists():
        return
    shutil.rmtree(tool.home, ignore_errors=True)
    tool.home.mkdir(parents=True)
    log = RIVALS / f"{tool.name}-install.log"
    print(f"installing {tool.package}=={tool.version} into {tool.home} (log: {log})", flush=True)
    with log.open("w", encoding="utf-8") as out:
        if tool.installer == "pip":
            steps = [
                [sys.executable, "-m", "venv", str(tool.home)],
                [str(tool.python), "-m", "pip", "install", "--disable-pip-version-check",
                 f"{tool.package}=={tool.version}", *tool.extras],
            ]  # fmt: skip
        else:
            (tool.home / "package.json").write_text('{"private": true}\n', encoding="utf-8")
            steps = [
                ["npm", "install", "--no-audit", "--no-fund", f"{tool.package}@{tool.version}"]
            ]
        for step in steps:
            subprocess.run(step, cwd=tool.home, stdout=out, stderr=subprocess.STDOUT, check=True)
    tool.installed_mark.write_text(tool.version + "\n", encoding="utf-8")


def installed_version(tool: Tool) -> str:
    """The version the tool reports about itself (not only the pin asked for)."""
    if tool.installer == "npm":
        manifest = tool.home / "node_modules" / tool.package / "package.json"
        return json.loads(manifest.read_text(encoding="utf-8"))["version"]
    script = f"import importlib.metadata as m; print(m.version({tool.package!r}))"
    return subprocess.run(
        [str(tool.python), "-c", script], capture_output=True, text=True, check=True
    ).stdout.strip()


class Server(loopback.LoopbackServer):
    """The loopback server process (stopped on exit of the ``with`` block)."""

    def __init__(self, latency_ms: float) -> None:
        super().__init__(SERVER, latency_ms)

    def served(self) -> dict[str, Any]:
        got = self.stats()
        system, judge = sorted(got["system"]), sorted(got["judge"])
        last_system = system[-1] if system else 0.0
        return {
            "system_requests": len(system),
            "judge_requests": len(judge),
            "requests_by_model": got["by_model"],
            # no phase barrier: the first judge call arrived before the last system call
            "overlap": bool(judge) and judge[0] < last_system,
        }


def tool_env(work: Path, base_url: str) -> dict[str, str]:
    """Every rival's environment: no telemetry or update checks, a dummy key, the loopback
    server as its OpenAI base URL, and home/config/log directories inside ``work``."""
    home = work / "home"
    home.mkdir(exist_ok=True)
    return {
        "PYTHONPATH": "",  # the spawner adds the repository; a rival's venv needs none of it
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "OPENAI_API_KEY": "bench",
        "OPENAI_BASE_URL": base_url,
        "NO_PROXY": "127.0.0.1,localhost",
        # DeepEval
        "DEEPEVAL_TELEMETRY_OPT_OUT": "1",
        "DEEPEVAL_UPDATE_WARNING_OPT_IN": "0",
        "DEEPEVAL_NO_INSPECT_PROMPT": "1",
        "DEEPEVAL_DISABLE_DOTENV": "1",
        "DEEPEVAL_HOME": str(home / ".deepeval"),
        "DEEPEVAL_RESULTS_FOLDER": "",
        # promptfoo
        "PROMPTFOO_DISABLE_TELEMETRY": "1",
        "PROMPTFOO_DISABLE_UPDATE": "1",
        "PROMPTFOO_DISABLE_SHARING": "1",
        "PROMPTFOO_CONFIG_DIR": str(home / ".promptfoo"),
        "PROMPTFOO_CACHE_ENABLED": "false",
        # Inspect
        "INSPECT_LOG_DIR": str(work / "inspect-logs"),
        "DO_NOT_TRACK": "1",
    }


def promptfoo_config(work: Path, base_url: str, n_cases: int) -> Path:
    """promptfoo's config: the chat prompt, the system provider, llm-rubric with its grader."""
    prompt = work / "prompt.json"
    messages = [
        {"role": "system", "content": bench_judge.SYSTEM_PROMPT},
        {"role": "user", "content": "{{question}}"},
    ]
    prompt.write_text(json.dumps(messages), encoding="utf-8")

    def provider(model: str) -> dict[str, Any]:
        return {
            "id": f"openai:chat:{model}",
            "config": {"apiBaseUrl": base_url, "apiKey": "bench", "temperature": 0},
        }

    config = {
        "description": "bench-judge",
        "prompts": [f"file://{prompt}"],
        "providers": [provider(SYSTEM_MODEL)],
        "defaultTest": {
            "options": {"provider": provider(RUBRIC_JUDGE)},
            "assert": [{"type": "llm-rubric", "value": bench_judge.RUBRIC}],
        },
        "tests": [
            {"vars": {"question": f"Order {10_000 + i} was charged twice. Refund one?"}}
            for i in range(n_cases)
        ],
    }
    path = work / "promptfooconfig.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


@dataclass(frozen=True)
class Workload:
    """What every run of one invocation shares."""

    server: Server
    work: Path
    evalkit_config: Path
    n_cases: int
    concurrency: int


def run_bare(w: Workload) -> dict[str, Any]:
    script = bench_judge.BARE_LOOP.replace(
        "{judge_system!r}", repr(bench_judge.judge_system_prompt())
    )
    proc = bench_process.measure(
        [sys.executable, "-c", script, w.server.base_url, str(w.n_cases), str(w.concurrency)]
    )
    return _row(proc) | {"passed": int(proc.stdout.split()[-1])}


def run_evalkit(w: Workload) -> dict[str, Any]:
    db = w.work / "evalkit.duckdb"
    db.unlink(missing_ok=True)
    command = [
        sys.executable, "-m", "evalkit.cli", "run", "--no-progress", "--label", "bench",
        "--concurrency", str(w.concurrency), "--config", str(w.evalkit_config), "--db", str(db),
        "--set", f"system.base_url={w.server.base_url}",
        "--set", f"judge.base_url={w.server.base_url}",
    ]  # fmt: skip
    proc = bench_process.measure(command)
    passed = bench_judge._stored(db)["passed_scores"]
    db.unlink(missing_ok=True)
    return _row(proc) | {"passed": passed}


def run_deepeval(w: Workload, write_cache: bool = True) -> dict[str, Any]:
    cwd = w.work / "deepeval"
    shutil.rmtree(cwd, ignore_errors=True)
    cwd.mkdir()  # DeepEval writes its .deepeval folder in the working directory
    command = [
        str(DEEPEVAL.python), "-c", DEEPEVAL_RUN, w.server.base_url, str(w.n_cases),
        str(w.concurrency), "write" if write_cache else "nowrite",
    ]  # fmt: skip
    proc = bench_process.measure(command, cwd=cwd, env=tool_env(w.work, w.server.base_url))
    return _row(proc) | {"passed": int(proc.stdout.split()[-1])}


def run_promptfoo(w: Workload) -> dict[str, Any]:
    config = promptfoo_config(w.work, w.server.base_url, w.n_cases)
    out = w.work / "promptfoo-results.json"
    out.unlink(missing_ok=True)
    main_js = PROMPTFOO.home / "node_modules" / "promptfoo" / "dist" / "src" / "main.js"
    command = [
        "node", str(main_js), "eval", "-c", str(config), "--max-concurrency", str(w.concurrency),
        "--no-cache", "--no-table", "--no-progress-bar", "--no-share", "-o", str(out),
    ]  # fmt: skip
    proc = bench_process.measure(command, cwd=w.work, env=tool_env(w.work, w.server.base_url))
    results = json.loads(out.read_text(encoding="utf-8"))["results"]
    return _row(proc) | {"passed": results["stats"]["successes"]}


def run_inspect(w: Workload) -> dict[str, Any]:
    task = w.work / "inspect_bench_task.py"
    task.write_text(INSPECT_TASK.replace("{n_cases}", str(w.n_cases)), encoding="utf-8")
    logs = w.work / "inspect-logs"
    shutil.rmtree(logs, ignore_errors=True)
    command = [
        # the task file relative to cwd: Inspect globs it, and a glob must be relative
        str(INSPECT.home / "bin" / "inspect"), "eval", task.name,
        "--model", f"openai/{SYSTEM_MODEL}", "-M", "responses_api=false",
        "--max-connections", str(w.concurrency),
        "--log-dir", str(logs), "--display", "none",
    ]  # fmt: skip
    proc = bench_process.measure(command, cwd=w.work, env=tool_env(w.work, w.server.base_url))
    return _row(proc) | {"passed": _inspect_passed(logs)}


def _inspect_passed(logs: Path) -> int | None:
    """Correct grades in the run's log, read by Inspect's own log reader."""
    script = (
        "import sys\nfrom inspect_ai.log import list_eval_logs, read_eval_log\n"
        "log = read_eval_log(list_eval_logs(sys.argv[1])[0])\n"
        "print(sum(s.scores['model_graded_qa'].value == 'C' for s in log.samples))\n"
    )
    got = subprocess.run(
        [str(INSPECT.python), "-c", script, str(logs)], capture_output=True, text=True
    )
    return int(got.stdout.split()[-1]) if got.returncode == 0 and got.stdout.strip() else None


RUNNERS: dict[str, Callable[[Workload], dict[str, Any]]] = {
    "bare": run_bare,
    "evalkit": run_evalkit,
    "deepeval": run_deepeval,
    "deepeval-nowrite": lambda w: run_deepeval(w, write_cache=False),
    "promptfoo": run_promptfoo,
    "inspect": run_inspect,
}


def _row(proc: bench_process.Proc) -> dict[str, Any]:
    return {"wall_s": proc.wall_s, "cpu_s": proc.cpu_s, "peak_rss_mib": proc.peak_rss_mib}


def measured(w: Workload, name: str) -> dict[str, Any]:
    """One run of one tool, with what the server served it; a failure is a row, not a stop."""
    w.server.reset()
    try:
        row = RUNNERS[name](w)
    except Exception as error:  # a rival that cannot run is a row of the table, not a stop
        return {"error": str(error)[-1500:]} | w.server.served()
    return row | w.server.served()


WORKLOADS = ("single", "judge", "agent")


def _pair_runners(
    workload: str, latency_ms: float, work: Path, n: int, conc: int, stack: contextlib.ExitStack
) -> dict[str, Callable[[], dict[str, Any]]]:
    """The bare AsyncOpenAI loop and ``evalkit run`` of the single-turn or agent workload,
    each against its own loopback server (started in ``stack``), as row makers."""
    db = work / f"{workload}.duckdb"
    if workload == "single":
        config = bench_process.write_corpus(work / "single", n, conc)
        demo = stack.enter_context(
            bench_process.start_demo_server(noise=False, latency_ms=latency_ms)
        )
        return {
            "bare": lambda: bench_process.run_bare(demo, n, conc),
            "evalkit": lambda: bench_process.run_evalkit(demo, config, db, conc, None),
        }
    config = bench_agent.write_suite(work / "agent", n, conc, agent=True)
    tools = config.parent / "tools" / "support.json"
    agent = stack.enter_context(bench_agent.Server(latency_ms, "raw"))
    return {
        "bare": lambda: bench_agent.run_bare(agent, tools, n, conc, bench_agent.OPENAI_LOOP),
        "evalkit": lambda: bench_agent.run_evalkit(agent, config, db, conc),
    }


def _pair_row(got: dict[str, Any], requests: int) -> dict[str, Any]:
    """A pair's run as a row: its figures, and whether every request was served."""
    row = {k: got[k] for k in ("wall_s", "cpu_s", "peak_rss_mib")}
    return row | {"served": got["served"], "complete": got["served"] == requests}


def bench(args: argparse.Namespace, names: list[str], work: Path) -> dict[str, Any]:
    n, conc = args.cases, args.concurrency
    evalkit_config = bench_judge.write_suite(work / "suite", n, conc)
    rounds: list[dict[str, dict[str, Any]]] = []
    pairs: dict[str, list[dict[str, Any]]] = {}
    with Server(args.latency_ms) as server, contextlib.ExitStack() as stack:
        runners = {
            workload: _pair_runners(workload, args.latency_ms, work, n, conc, stack)
            for workload in args.workloads
            if workload != "judge"
        }
        requests = {"single": n, "agent": bench_agent.STEPS * n}
        w = Workload(server, work, evalkit_config, n, conc)
        warm = Workload(server, work, evalkit_config, min(n, 32), conc)
        run_bare(warm)  # page cache, first sockets
        for index in range(args.rounds):
            # alternate the order so that no tool always runs first after the warm-up
            order = names if index % 2 == 0 else list(reversed(names))
            if "judge" in args.workloads:
                rounds.append({name: measured(w, name) for name in order})
                print(f"  round {index} judge: " + _round_line(rounds[-1]), flush=True)
            for workload, pair in runners.items():
                sides = ["bare", "evalkit"] if index % 2 == 0 else ["evalkit", "bare"]
                row = {side: _pair_row(pair[side](), requests[workload]) for side in sides}
                row["ratio"] = row["evalkit"]["wall_s"] / row["bare"]["wall_s"]
                pairs.setdefault(workload, []).append(row)
                print(
                    f"  round {index} {workload}: bare {row['bare']['wall_s']:.2f} s, evalkit "
                    f"{row['evalkit']['wall_s']:.2f} s = {row['ratio']:.3f}x",
                    flush=True,
                )
    return {"cases": n, "concurrency": conc, "rounds": rounds, "pairs": pairs}


def pair_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over rounds of a single-turn or agent pair: evalkit over the bare loop."""
    out: dict[str, Any] = {"ratio": statistics.median(r["ratio"] for r in rows)}
    for side in ("bare", "evalkit"):
        for key in ("wall_s", "cpu_s", "peak_rss_mib"):
            out[f"{key}_{side}"] = statistics.median(r[side][key] for r in rows)
        out[f"complete_{side}"] = all(r[side]["complete"] for r in rows)
    return out


def _round_line(r: dict[str, dict[str, Any]]) -> str:
    return ", ".join(
        f"{name} {row['wall_s']:.2f} s" if "wall_s" in row else f"{name} failed"
        for name, row in r.items()
    )


def summary(figures: dict[str, Any], names: list[str]) -> list[dict[str, Any]]:
    """Per tool: medians over the rounds it completed, ratio to the same round's bare loop."""
    rows: list[dict[str, Any]] = []
    if not figures["rounds"]:
        return rows
    for name in names:
        done = [r for r in figures["rounds"] if "wall_s" in r[name]]
        row: dict[str, Any] = {"tool": name, "version": figures["versions"].get(name, "")}
        if not done:
            row["error"] = figures["rounds"][-1][name].get("error", "")
            row |= {
                k: figures["rounds"][-1][name][k] for k in ("system_requests", "judge_requests")
            }
            rows.append(row)
            continue

        def med(key: str, done: list[dict[str, Any]] = done, name: str = name) -> float:
            return statistics.median(r[name][key] for r in done)

        ratios = [
            r[name]["wall_s"] / r["bare"]["wall_s"] for r in done if "wall_s" in r.get("bare", {})
        ]
        row |= {
            "rounds": len(done),
            "wall_s": med("wall_s"),
            "ratio_to_bare": statistics.median(ratios) if ratios else None,
            "cpu_s": med("cpu_s"),
            "peak_rss_mib": med("peak_rss_mib"),
            "system_requests": max(r[name]["system_requests"] for r in done),
            "judge_requests": max(r[name]["judge_requests"] for r in done),
            "requests_by_model": done[-1][name]["requests_by_model"],
            "passed": done[-1][name]["passed"],
            "overlap": all(r[name]["overlap"] for r in done),
        }
        rows.append(row)
    return rows


def _print(figures: dict[str, Any]) -> None:
    n = figures["cases"]
    for workload, pair in figures["pair_summary"].items():
        requests = f"{bench_agent.STEPS} requests" if workload == "agent" else "1 request"
        print(
            f"{workload}: {n} cases x {requests}, c={figures['concurrency']}, "
            f"{figures['latency_ms']:g} ms: evalkit {pair['ratio']:.3f}x the bare AsyncOpenAI "
            f"loop (wall {pair['wall_s_evalkit']:.2f} s against {pair['wall_s_bare']:.2f} s; "
            f"CPU {pair['cpu_s_evalkit']:.2f} s against {pair['cpu_s_bare']:.2f} s; peak RSS "
            f"{pair['peak_rss_mib_evalkit']:.0f} against {pair['peak_rss_mib_bare']:.0f} MiB); "
            f"every request served: {pair['complete_evalkit'] and pair['complete_bare']}"
        )
    if not figures["summary"]:
        return
    print(
        f"judge rivals: {n} cases x (1 system + 1 judge call), c={figures['concurrency']}, "
        f"{figures['latency_ms']:g} ms; load {figures['loadavg_1min'][0]:.1f} -> "
        f"{figures['loadavg_1min'][1]:.1f} on {figures['cores']} cores; medians of "
        f"{figures['rounds_asked']} rounds"
    )
    head = (
        f"{'tool':<16} {'version':<12} {'wall s':>7} {'x bare':>7} {'CPU s':>7} {'RSS MiB':>8} "
        f"{'served sys+judge':>17} {'passed':>7}  overlap"
    )
    print(head)
    for row in figures["summary"]:
        served = f"{row['system_requests']}+{row['judge_requests']}"
        if "error" in row:
            print(f"{row['tool']:<16} {row['version']:<12} failed (served {served}): ")
            print("    " + row["error"].strip().replace("\n", "\n    ")[-800:])
            continue
        ratio = f"{row['ratio_to_bare']:.2f}" if row["ratio_to_bare"] is not None else "-"
        flag = "" if (row["system_requests"], row["judge_requests"]) == (n, n) else " (!)"
        print(
            f"{row['tool']:<16} {row['version']:<12} {row['wall_s']:>7.2f} {ratio:>7} "
            f"{row['cpu_s']:>7.2f} {row['peak_rss_mib']:>8.0f} {served + flag:>17} "
            f"{row['passed']!s:>7}  {row['overlap']}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--only", default=",".join(DEFAULT_NAMES),
        help=f"comma-separated tools to run, of {','.join(ALL_NAMES)} (bare always runs)",
    )  # fmt: skip
    parser.add_argument(
        "--skip-install", action="store_true",
        help="use the tools already in bench/.rivals/; skip any that is not there",
    )  # fmt: skip
    parser.add_argument(
        "--workloads", default=",".join(WORKLOADS),
        help="comma-separated, of single,judge,agent (only judge runs the other tools)",
    )  # fmt: skip
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args(argv)
    args.workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    if set(args.workloads) - set(WORKLOADS) or not args.workloads:
        parser.error(f"--workloads: of {','.join(WORKLOADS)}")
    asked = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = set(asked) - set(ALL_NAMES)
    if unknown:
        parser.error(f"unknown tools: {', '.join(sorted(unknown))}")
    names = ["bare", *(name for name in ALL_NAMES if name in asked and name != "bare")]

    versions: dict[str, str] = {"bare": _openai_version(), "evalkit": _evalkit_version()}
    if "judge" not in args.workloads:
        names = ["bare", "evalkit"]  # the other tools run the judge workload only
    for tool in RIVAL_TOOLS:
        rows = [name for name in names if name.split("-")[0] == tool.name]  # deepeval-nowrite
        if not rows:
            continue
        if not args.skip_install:
            try:
                install(tool)
            except (OSError, subprocess.CalledProcessError) as error:
                print(f"{tool.name}: install failed ({error}); skipped")
        if not tool.installed_mark.exists():
            print(f"{tool.name}: not installed in {tool.home}; skipped")
            names = [name for name in names if name not in rows]
            continue
        versions |= dict.fromkeys(rows, installed_version(tool))

    load_before = os.getloadavg()[0]
    started = time.time()
    RIVALS.mkdir(exist_ok=True)
    # everything the tools write (configs, logs, homes) stays inside the repository
    with tempfile.TemporaryDirectory(prefix="work-", dir=RIVALS) as tmp:
        figures = bench(args, names, Path(tmp))
    figures |= {
        "versions": versions,
        "cores": os.cpu_count(),
        "loadavg_1min": [load_before, os.getloadavg()[0]],
        "latency_ms": args.latency_ms,
        "rounds_asked": args.rounds,
        "elapsed_s": time.time() - started,
    }
    figures["summary"] = summary(figures, names)
    figures["pair_summary"] = {w: pair_summary(rows) for w, rows in figures["pairs"].items()}
    _print(figures)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2), encoding="utf-8")
    return 0


def _openai_version() -> str:
    import importlib.metadata

    return "openai " + importlib.metadata.version("openai")


def _evalkit_version() -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version("evalkit-gate")
    except importlib.metadata.PackageNotFoundError:
        return "main"


if __name__ == "__main__":
    sys.exit(main())

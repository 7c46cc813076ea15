"""Whole-process figures: ``evalkit run`` from launch to exit, against a bare client loop.

Every timed thing here is a fresh process, measured from ``Popen`` to ``wait4`` (wall, the
child's own CPU and its peak RSS from the kernel's rusage) by a small spawner process (see
:data:`SPAWNER`: a child forked from this script would inherit its RSS as a floor), so
start-up imports, reading the corpus, opening the store, the requests, scoring, storing and
the summary are all inside the clock. The bare loop is the reference: ``AsyncOpenAI`` with a
semaphore over the same messages, in its own process, no corpus, no scoring, no storing. Both
run against the same demo simulator (its own process, fixed latency, no noise), alternately, in
the same invocation; ratios are medians over ``--rounds``.

``whole``
    N = 1000 cases, concurrency 32, 50 ms: wall of ``evalkit run`` (each ``--transport``)
    over the bare loop's wall. Targets: default transport <= 1.0x, lean <= 0.8x. Beside them
    the floor: a bare *aiohttp* loop (the same requests, nothing but ``json.loads`` of each
    reply), the fastest a Python client gets against this server; its ratio bounds what any
    transport can reach.
``corpus``
    ``load_corpus`` (read + validate + build every case's scorers) of 1k / 10k / 100k synthetic
    cases (files of at most 10,000 cases), in a fresh process each: ms per case and the
    per-case ratio of each size to the smallest (1.0 = linear). ``--mix demo`` (the default)
    gives the cases the demo corpus's own ``expect`` lists in turn (json_schema, json_fields,
    regex, judge, trajectory scorers, with its schema and rubric files); ``--mix simple`` the
    ``json_valid`` + ``max_words`` pair. Beside it, what ``evalkit run --tag`` pays: a deferred
    load and a selection of two cases (``two_s``, scorers built for those two only). Target:
    <= 0.15 ms per case at 10k and 100k. ``--against CHECKOUT`` (a tree of another commit,
    e.g. ``git archive HEAD | tar -x -C /tmp/evalkit-before``) loads the same corpus with
    that evalkit in the same rounds, in turn: before and after in one invocation, as ratios.
``startup``
    ``evalkit run`` of one case at zero latency (imports, config, corpus, store, one request,
    summary) against ``python -c 'import openai'``. Target: <= 0.5 s above it.
``rss``
    Peak RSS of ``evalkit run`` at 1k and 10k cases (c = 32, 50 ms) and the growth per case
    between them, beside the bare loop's. Targets: <= 150 MiB at 1k, <= ~10 KiB per case.
``curve``
    1k / 10k / 100k cases at concurrency 256 against the demo server: wall, CPU and peak RSS of
    ``evalkit run`` and of the bare loop, per case, with the per-case ratio to the smallest size.
``timeline``
    Where the fixed cost of ``evalkit run`` goes: 20 and 1000 cases (``--sizes``), c = 32,
    50 ms, each round the floor, the bare loop and ``evalkit run`` in turn. The phases come
    from the processes themselves: run with ``EVALKIT_TIMELINE=1``, evalkit prints
    ``evalkit-timeline <phase> <CLOCK_MONOTONIC>`` to stderr at the end of each phase
    (:mod:`evalkit.run.timeline`; off by default, one flag test per mark), and the two loops
    print the same after their imports and their last answer; the spawner takes
    ``time.monotonic()`` at launch and after ``wait4``, the same system-wide clock, so each
    phase is the time between two marks (:data:`PHASES`: startup, parse, imports, corpus,
    store_open, run_record, first_request, first_answer, answers, last_batch, summary, close,
    print, exit). The gap to the floor is evalkit's wall minus the floor's, per round. Target:
    <= 0.35 s at 20 cases. ``--against CHECKOUT`` also runs that tree's ``evalkit run`` in
    each round (first in every other round): before and after a change in one invocation.

Correctness is checked, not assumed: the server's request counter must equal N for every run
(bare or evalkit), and the store must hold N outputs and 2N score rows, all passed.

Usage:
    .venv/bin/python bench/bench_process.py whole --rounds 3
    .venv/bin/python bench/bench_process.py corpus --sizes 1000 10000 100000
    .venv/bin/python bench/bench_process.py corpus --mix simple
    .venv/bin/python bench/bench_process.py corpus --against /tmp/evalkit-before
    .venv/bin/python bench/bench_process.py startup
    .venv/bin/python bench/bench_process.py rss
    .venv/bin/python bench/bench_process.py curve --sizes 1000 10000 100000 --rounds 1
    .venv/bin/python bench/bench_process.py timeline --sizes 20 1000 --rounds 3
    .venv/bin/python bench/bench_process.py timeline --sizes 20 --against /tmp/evalkit-before
    .venv/bin/python bench/bench_process.py whole --cases 40 --rounds 1 --json out.json
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # runnable from a checkout without installing

from evalkit.demo.server import DemoServer, start_demo_server  # noqa: E402

SYSTEM_PROMPT = "Respond only with a JSON object. Keep the reply under 40 words.\n"
SAMPLING = {"temperature": 0, "seed": 7, "max_tokens": 200}
CASES_PER_FILE = 10_000  # one file stays under the loader's node and case limits
SCORERS_PER_CASE = 2

#: The floor, run as ``python -c BARE_LOOP base_url cases concurrency``: the official client
#: and a semaphore over the same messages evalkit sends; no corpus, no scoring, no storing.
BARE_LOOP = f"""
import asyncio, sys, time
import openai
sys.stderr.write(f"evalkit-timeline imports {{time.monotonic()}}\\n")

base_url, n, concurrency = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
system = {SYSTEM_PROMPT!r}
sampling = {SAMPLING!r}

async def main():
    client = openai.AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0, timeout=60)
    semaphore = asyncio.Semaphore(concurrency)

    async def one(i):
        messages = [
            {{"role": "system", "content": system}},
            {{"role": "user", "content": f"Where is my order {{10_000 + i}}?"}},
        ]
        async with semaphore:
            response = await client.chat.completions.create(
                model="demo-support-1", messages=messages, **sampling
            )
        return response.choices[0].message.content

    try:
        texts = await asyncio.gather(*(one(i) for i in range(n)))
    finally:
        await client.close()
    sys.stderr.write(f"evalkit-timeline answers {{time.monotonic()}}\\n")
    print(sum(bool(t) for t in texts))

asyncio.run(main())
"""

#: The floor, run as ``python -c FLOOR_LOOP base_url cases concurrency``: one aiohttp session
#: and a semaphore posting the same bodies; it only decodes each reply's JSON.
FLOOR_LOOP = f"""
import asyncio, json, sys, time
import aiohttp
sys.stderr.write(f"evalkit-timeline imports {{time.monotonic()}}\\n")

base_url, n, concurrency = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
system = {SYSTEM_PROMPT!r}
sampling = {SAMPLING!r}

async def main():
    semaphore = asyncio.Semaphore(concurrency)
    headers = {{"Authorization": "Bearer bench"}}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        async def one(i):
            body = {{"model": "demo-support-1", "messages": [
                {{"role": "system", "content": system}},
                {{"role": "user", "content": f"Where is my order {{10_000 + i}}?"}},
            ], **sampling}}
            async with semaphore:
                async with session.post(
                    base_url + "/chat/completions", json=body, headers=headers
                ) as response:
                    reply = json.loads(await response.read())
            return reply["choices"][0]["message"]["content"]

        texts = await asyncio.gather(*(one(i) for i in range(n)))
    sys.stderr.write(f"evalkit-timeline answers {{time.monotonic()}}\\n")
    print(sum(bool(t) for t in texts))

asyncio.run(main())
"""

#: ``python -c LOAD_CORPUS checkout root [id id]``: load and validate the corpus with the
#: evalkit of ``checkout`` (building every case's scorers), or with two ids a deferred load and
#: a selection of those two (``evalkit run --tag``); prints cases loaded, seconds, cases
#: selected, cases whose scorers were built and CPU seconds.
LOAD_CORPUS = """
import sys, time
sys.path.insert(0, sys.argv[1])
from evalkit.corpus.case_scorers import is_pending
from evalkit.corpus.cases import load_corpus
t0, c0 = time.perf_counter(), time.process_time()
ids = sys.argv[3:]
corpus = load_corpus(sys.argv[2], defer_scorers=bool(ids))
chosen = corpus.select(ids=ids) if ids else corpus
seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
built = sum(not is_pending(c) for c in corpus.cases)
print(len(corpus.cases), seconds, len(chosen.cases), built, cpu)
"""


@dataclass(frozen=True)
class Proc:
    """One child process: wall from launch to exit, its CPU and peak RSS (from ``wait4``)."""

    wall_s: float
    cpu_s: float
    peak_rss_mib: float
    stdout: str
    # (phase, seconds after launch) of each ``evalkit-timeline`` line on its stderr, then
    # ("exit", wall from launch to the end of wait4)
    marks: tuple[tuple[str, float], ...] = ()


#: Runs each measured command, as ``python -c SPAWNER``: one JSON job per stdin line, one JSON
#: result per stdout line. A child's ``ru_maxrss`` starts at the RSS of the process that forked
#: it (Linux folds the forking process's high-water mark in at ``exec``), so children forked
#: from this script (~76 MiB: the demo server client, evalkit imports) all reported >= 76 MiB.
#: Forked from this ~13 MiB spawner instead, a child's peak RSS is its own.
SPAWNER = """
import json, os, subprocess, sys, tempfile, time
for line in sys.stdin:
    job = json.loads(line)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        launched = time.monotonic()
        child = subprocess.Popen(job["command"], stdout=out, stderr=err, cwd=job["cwd"],
                                 env=job["env"])
        _, status, usage = os.wait4(child.pid, 0)
        exited = time.monotonic()
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        stderr = err.read().decode()
        print(json.dumps({
            "wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
            "peak_rss_mib": usage.ru_maxrss / 1024, "code": os.waitstatus_to_exitcode(status),
            "stdout": out.read().decode(), "stderr": stderr[-2000:],
            "launched": launched, "exited": exited,
            "marks": [line.split()[1:] for line in stderr.splitlines()
                      if line.startswith("evalkit-timeline ")],
        }), flush=True)
"""
_spawner: subprocess.Popen[str] | None = None


def stop_spawner() -> None:
    """Close the spawner's stdin and wait for it to exit (the script's atexit does this; a test
    that imports this module calls it, so no spawner outlives the test)."""
    global _spawner
    if _spawner is not None:
        atexit.unregister(_spawner.communicate)
        _spawner.communicate()
        _spawner = None


def _spawn(job: dict[str, Any]) -> dict[str, Any]:
    """One job through the spawner (started on first use, stopped when this script exits)."""
    global _spawner
    if _spawner is None:
        _spawner = subprocess.Popen(
            [sys.executable, "-c", SPAWNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True, cwd=REPO,
        )  # fmt: skip
        atexit.register(_spawner.communicate)  # closes its stdin: it finishes and exits
    assert _spawner.stdin is not None and _spawner.stdout is not None
    _spawner.stdin.write(json.dumps(job) + "\n")
    _spawner.stdin.flush()
    line = _spawner.stdout.readline()
    if not line:
        raise RuntimeError(f"the spawner exited ({_spawner.wait()}) running {job['command'][:4]}")
    return json.loads(line)


def measure(
    command: Sequence[str], cwd: Path | None = None, env: dict[str, str] | None = None
) -> Proc:
    """Run ``command`` to completion (from the spawner); raise with its stderr when it fails.
    ``env``: variables added to this process's environment for the child."""
    env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    got = _spawn({"command": list(command), "cwd": str(cwd) if cwd else None, "env": env})
    if got["code"] != 0:
        raise RuntimeError(f"{list(command)[:4]} exited {got['code']}: {got['stderr']}")
    marks = [(phase, float(at) - got["launched"]) for phase, at in got["marks"]]
    marks.append(("exit", got["exited"] - got["launched"]))
    return Proc(got["wall_s"], got["cpu_s"], got["peak_rss_mib"], got["stdout"], tuple(marks))


def write_corpus(root: Path, n_cases: int, concurrency: int) -> Path:
    """N distinct one-turn cases scored by ``json_valid`` and ``max_words``; returns the config.

    The system prompt asks the simulator for bare JSON, so every output passes both scorers.
    """
    (root / "cases").mkdir(parents=True)
    (root / "prompts").mkdir()
    (root / "prompts" / "system.md").write_text(SYSTEM_PROMPT, encoding="utf-8")
    for start in range(0, n_cases, CASES_PER_FILE):
        lines = [
            f"- id: synthetic-{i:06d}\n"
            f"  input: {{messages: [{{role: user, content: 'Where is my order {10_000 + i}?'}}]}}\n"
            "  expect: [json_valid, {max_words: 200}]\n"
            for i in range(start, min(n_cases, start + CASES_PER_FILE))
        ]
        path = root / "cases" / f"synthetic-{start // CASES_PER_FILE:03d}.yaml"
        path.write_text("".join(lines), encoding="utf-8")
    config = root / "evalkit.yaml"
    config.write_text(
        "suite: bench-process\n"
        "system:\n"
        "  model: demo-support-1\n"
        "  base_url: http://127.0.0.1:9/v1\n"
        "  prompt: prompts/system.md\n"
        "  timeout_s: 60\n"
        f"  sampling: {json.dumps(SAMPLING)}\n"
        f"concurrency: {concurrency}\n"
        "cache: false\n",
        encoding="utf-8",
    )
    return config


def write_mix_corpus(root: Path, n_cases: int) -> list[str]:
    """N one-turn cases, each with the ``expect`` list of a demo-corpus case in turn (and the
    demo's schema, rubric and tool files); returns the case ids. Entries are written as JSON
    flow mappings, as compact as the demo's own ``- {scorer: ..., args: ...}`` lines."""
    import shutil

    import yaml

    demo: list[dict[str, Any]] = []
    for path in sorted((REPO / "corpus" / "cases").glob("*.yaml")):
        demo += yaml.safe_load(path.read_text(encoding="utf-8"))
    (root / "cases").mkdir(parents=True)
    for folder in ("schemas", "rubrics", "tools"):
        shutil.copytree(REPO / "corpus" / folder, root / folder)
    ids = [f"{demo[i % len(demo)]['id']}-{i:06d}" for i in range(n_cases)]
    for start in range(0, n_cases, CASES_PER_FILE):
        chunk = []
        for i in range(start, min(n_cases, start + CASES_PER_FILE)):
            case = demo[i % len(demo)]
            expect = "".join(f"    - {json.dumps(e)}\n" for e in case["expect"])
            chunk.append(
                f"- id: {ids[i]}\n  tags: {json.dumps(case.get('tags', []))}\n"
                f"  input: {{messages: [{{role: user, content: 'Order {10_000 + i}?'}}]}}\n"
                f"  expect:\n{expect}"
            )
        path = root / "cases" / f"mix-{start // CASES_PER_FILE:03d}.yaml"
        path.write_text("".join(chunk), encoding="utf-8")
    return ids


def _served(server: DemoServer) -> int:
    return int(server.stats()["requests"])


def run_bare(server: DemoServer, cases: int, concurrency: int) -> dict[str, Any]:
    """The bare loop in its own process; checks the server answered every request."""
    server.reset_stats()
    proc = measure([sys.executable, "-c", BARE_LOOP, server.base_url, str(cases), str(concurrency)])
    served = _served(server)
    return asdict(proc) | {"served": served, "outputs": int(proc.stdout.split()[-1]), "scores": 0}


def run_floor(server: DemoServer, cases: int, concurrency: int) -> dict[str, Any]:
    """The floor (a bare aiohttp loop) in its own process; checks every request was served."""
    server.reset_stats()
    proc = measure(
        [sys.executable, "-c", FLOOR_LOOP, server.base_url, str(cases), str(concurrency)]
    )
    served = _served(server)
    return asdict(proc) | {"served": served, "outputs": int(proc.stdout.split()[-1]), "scores": 0}


def run_evalkit(
    server: DemoServer,
    config: Path,
    db: Path,
    concurrency: int,
    transport: str | None,
    timeline: bool = False,
    checkout: Path | None = None,
) -> dict[str, Any]:
    """``evalkit run`` in its own process into a fresh store; counts what it stored.
    ``timeline``: with ``EVALKIT_TIMELINE=1``, so its phase marks are in ``marks``;
    ``checkout``: the evalkit of that tree (another commit's) rather than this one's."""
    db.unlink(missing_ok=True)
    command = [
        sys.executable, "-m", "evalkit.cli", "run", "--config", str(config), "--db", str(db),
        "--no-progress", "--label", "bench", "--concurrency", str(concurrency),
        "--set", f"system.base_url={server.base_url}",
    ]  # fmt: skip
    if transport is not None:  # None: whatever the default is
        command += ["--set", f"system.transport={transport}"]
    server.reset_stats()
    env = {"EVALKIT_TIMELINE": "1"} if timeline else {}
    if checkout is not None:  # -m puts the working directory first on sys.path: run there
        env["PYTHONPATH"] = str(checkout)
    proc = measure(command, cwd=checkout, env=env)
    served = _served(server)
    counts = _stored(db)
    db.unlink(missing_ok=True)
    return asdict(proc) | {"served": served} | counts


def _stored(db: Path) -> dict[str, Any]:
    import duckdb

    with duckdb.connect(str(db), read_only=True) as con:
        outputs, ok = con.execute(
            "SELECT count(*), count(*) FILTER (WHERE error IS NULL) FROM outputs"
        ).fetchone()
        scores, passed = con.execute(
            "SELECT count(*), count(*) FILTER (WHERE passed) FROM scores"
        ).fetchone()
        manifest = con.execute("SELECT manifest FROM runs").fetchone()[0]
    transport = json.loads(manifest).get("requests", {}).get("transport")
    return {
        "outputs": outputs,
        "ok_outputs": ok,
        "scores": scores,
        "passed_scores": passed,
        "transport": transport,
    }


def _drop_stdout(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k != "stdout"}


def _median(rows: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in rows)


# --- the benchmarks --------------------------------------------------------------------------


def bench_whole(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """``evalkit run`` (each transport) and the bare loop alternately, ``rounds`` times."""
    cases, conc = args.cases or 1000, args.concurrency or 32
    config = write_corpus(root / "corpus", cases, conc)
    rounds = []
    with start_demo_server(noise=False, latency_ms=args.latency_ms) as server:
        run_bare(server, min(cases, 32), conc)  # warm-up: page cache, first sockets
        for _ in range(args.rounds):
            row: dict[str, Any] = {"bare": _drop_stdout(run_bare(server, cases, conc))}
            row["floor"] = _drop_stdout(run_floor(server, cases, conc))
            row["ratio_floor"] = row["floor"]["wall_s"] / row["bare"]["wall_s"]
            for transport in args.transport:
                got = run_evalkit(server, config, root / "w.duckdb", conc, _t(transport))
                row[transport] = _drop_stdout(got)
                row[f"ratio_{transport}"] = got["wall_s"] / row["bare"]["wall_s"]
            rounds.append(row)
    sides = ["floor", *args.transport]
    summary = {f"median_ratio_{t}": _median(rounds, f"ratio_{t}") for t in sides}
    for side in ["bare", *sides]:
        summary[f"median_wall_s_{side}"] = statistics.median(r[side]["wall_s"] for r in rounds)
        summary[f"median_cpu_s_{side}"] = statistics.median(r[side]["cpu_s"] for r in rounds)
        summary[f"median_rss_mib_{side}"] = statistics.median(
            r[side]["peak_rss_mib"] for r in rounds
        )
    return {"cases": cases, "concurrency": conc, "rounds": rounds, "summary": summary}


def _load_corpus(checkout: Path, corpus_dir: Path, ids: Sequence[str] = ()) -> Proc:
    """``load_corpus`` in a fresh process, with the evalkit of ``checkout``."""
    command = [sys.executable, "-c", LOAD_CORPUS, str(checkout), str(corpus_dir), *ids]
    return measure(command, env={"PYTHONPATH": str(checkout)})


def bench_corpus(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """``load_corpus`` per size in a fresh process, ``rounds`` times; ms per case. With
    ``--against`` another checkout's evalkit loads the same corpus in the same rounds, each
    round running both in turn (so a load that changes during the run affects both): the
    per-size medians of the other checkout and of this one's time over it."""
    sizes = args.sizes or [1000, 10_000, 100_000]
    against = Path(args.against).resolve() if args.against else None
    by_size: dict[str, Any] = {}
    for n in sizes:
        corpus_dir = root / f"corpus-{n}"
        if args.mix == "demo":
            two = write_mix_corpus(corpus_dir, n)[:2]
        else:
            write_corpus(corpus_dir, n, 1)
            two = ["synthetic-000000", "synthetic-000001"]
        runs = []
        for number in range(args.rounds):  # alternating: every case, then two selected
            if against is not None and number % 2 == 0:  # who goes first alternates too
                other = _load_corpus(against, corpus_dir)
            every = _load_corpus(REPO, corpus_dir)
            if against is not None and number % 2 == 1:
                other = _load_corpus(against, corpus_dir)
            selected = _load_corpus(REPO, corpus_dir, two)
            loaded, seconds, _, built, cpu = every.stdout.split()
            _, two_s, chosen, two_built, _ = selected.stdout.split()
            if against is not None:
                _, other_s, _, _, other_cpu = other.stdout.split()
                vs = {"against_s": float(other_s), "against_cpu_s": float(other_cpu)}
                vs |= {"ratio": float(seconds) / vs["against_s"]}
                vs |= {"cpu_ratio": float(cpu) / vs["against_cpu_s"]}
            else:
                vs = {}
            runs.append(
                {
                    "loaded": int(loaded),
                    "load_s": float(seconds),
                    "load_cpu_s": float(cpu),  # the load's own CPU: what a loaded machine hides
                    "built": int(built),
                    "rss_mib": every.peak_rss_mib,
                    "two_s": float(two_s),
                    "two_selected": int(chosen),
                    "two_built": int(two_built),
                }
                | vs
            )
        load_s = statistics.median(r["load_s"] for r in runs)
        cpu_s = statistics.median(r["load_cpu_s"] for r in runs)
        two_s = statistics.median(r["two_s"] for r in runs)
        by_size[str(n)] = {
            "cases": n,
            "runs": runs,
            "loaded": runs[0]["loaded"],
            "built": runs[0]["built"],
            "two_built": runs[0]["two_built"],
            "median_load_s": load_s,
            "cpu_ms_per_case": 1000 * cpu_s / n,
            "ms_per_case": 1000 * load_s / n,
            "median_two_s": two_s,
            "two_ms_per_case": 1000 * two_s / n,
        }
        if against is not None:
            by_size[str(n)] |= {
                "against_ms_per_case": 1000 * statistics.median(r["against_s"] for r in runs) / n,
                "against_cpu_ms_per_case": 1000
                * statistics.median(r["against_cpu_s"] for r in runs)
                / n,
                "median_ratio": statistics.median(r["ratio"] for r in runs),
                "median_cpu_ratio": statistics.median(r["cpu_ratio"] for r in runs),
            }
    _per_case_ratios(by_size, "ms_per_case")
    return {"sizes": sizes, "mix": args.mix, "against": str(against or ""), "by_size": by_size}


def bench_startup(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """``evalkit run`` of one case at zero latency against ``python -c 'import openai'``."""
    config = write_corpus(root / "corpus", 1, 1)
    rounds = []
    with start_demo_server(noise=False, latency_ms=0) as server:
        measure([sys.executable, "-c", "import openai"])  # warm the page cache
        for _ in range(args.rounds):
            floor = measure([sys.executable, "-c", "import openai"])
            help_ = measure([sys.executable, "-m", "evalkit.cli", "run", "--help"])
            one = run_evalkit(server, config, root / "s.duckdb", 1, None)
            rounds.append(
                {
                    "import_openai_s": floor.wall_s,
                    "run_help_s": help_.wall_s,
                    "run_one_case_s": one["wall_s"],
                    "above_import_openai_s": one["wall_s"] - floor.wall_s,
                    "help_above_import_openai_s": help_.wall_s - floor.wall_s,
                    "served": one["served"],
                    "outputs": one["outputs"],
                }
            )
    keys = ("import_openai_s", "run_help_s", "run_one_case_s", "above_import_openai_s")
    summary = {f"median_{k}": _median(rounds, k) for k in keys}
    summary["median_help_above_import_openai_s"] = _median(rounds, "help_above_import_openai_s")
    return {"rounds": rounds, "summary": summary}


def bench_rss(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """Peak RSS of ``evalkit run`` and the bare loop at two sizes; growth per case."""
    sizes = args.sizes or [1000, 10_000]
    conc = args.concurrency or 32
    by_size: dict[str, Any] = {}
    with start_demo_server(noise=False, latency_ms=args.latency_ms) as server:
        for n in sizes:
            config = write_corpus(root / f"corpus-{n}", n, conc)
            rows = []
            for _ in range(args.rounds):
                bare = _drop_stdout(run_bare(server, n, conc))
                ours = {t: _drop_stdout(run_evalkit(server, config, root / "r.duckdb", conc, _t(t)))
                        for t in args.transport}  # fmt: skip
                rows.append({"bare": bare, **ours})
            entry: dict[str, Any] = {"cases": n, "rounds": rows}
            for side in ["bare", *args.transport]:
                entry[f"median_rss_mib_{side}"] = statistics.median(
                    r[side]["peak_rss_mib"] for r in rows
                )
            by_size[str(n)] = entry
            _progress(n, entry, ["bare", *args.transport], "median_rss_mib", " MiB")
    growth = {}
    if len(sizes) >= 2:
        small, large = by_size[str(sizes[0])], by_size[str(sizes[-1])]
        for side in ["bare", *args.transport]:
            delta = large[f"median_rss_mib_{side}"] - small[f"median_rss_mib_{side}"]
            growth[side] = 1024 * delta / (sizes[-1] - sizes[0])  # KiB per case
    return {"sizes": sizes, "concurrency": conc, "by_size": by_size, "kib_per_case": growth}


def bench_curve(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """Wall, CPU and peak RSS per size at high concurrency, evalkit and the bare loop."""
    sizes = args.sizes or [1000, 10_000, 100_000]
    conc = args.concurrency or 256
    by_size: dict[str, Any] = {}
    with start_demo_server(noise=False, latency_ms=args.latency_ms) as server:
        for n in sizes:
            config = write_corpus(root / f"corpus-{n}", n, conc)
            rows = []
            for _ in range(args.rounds):
                row: dict[str, Any] = {"bare": _drop_stdout(run_bare(server, n, conc))}
                for t in args.transport:
                    row[t] = _drop_stdout(
                        run_evalkit(server, config, root / "c.duckdb", conc, _t(t))
                    )
                    row[f"ratio_{t}"] = row[t]["wall_s"] / row["bare"]["wall_s"]
                rows.append(row)
            entry: dict[str, Any] = {"cases": n, "rounds": rows}
            for side in ["bare", *args.transport]:
                for key in ("wall_s", "cpu_s", "peak_rss_mib"):
                    entry[f"median_{key}_{side}"] = statistics.median(r[side][key] for r in rows)
                entry[f"wall_ms_per_case_{side}"] = 1000 * entry[f"median_wall_s_{side}"] / n
                entry[f"cpu_ms_per_case_{side}"] = 1000 * entry[f"median_cpu_s_{side}"] / n
            for t in args.transport:
                entry[f"median_ratio_{t}"] = _median(rows, f"ratio_{t}")
            by_size[str(n)] = entry
            _progress(n, entry, ["bare", *args.transport], "median_wall_s", " s")
            _progress(n, entry, ["bare", *args.transport], "median_cpu_s", " s CPU")
    for side in ["bare", *args.transport]:
        _per_case_ratios(by_size, f"wall_ms_per_case_{side}")
        _per_case_ratios(by_size, f"cpu_ms_per_case_{side}")
    return {"sizes": sizes, "concurrency": conc, "by_size": by_size}


#: The phases of one ``evalkit run``, each ending at the timeline mark of its name
#: (:mod:`evalkit.run.timeline`; ``exit`` is the end of the process), in order.
PHASES = (
    ("startup", "cli"),  # the interpreter and ``import evalkit.cli``
    ("parse", "parsed"),  # the ``run`` command's module and arguments
    ("imports", "imports"),  # what the run path imports (corpus, scorers, store, runner)
    ("corpus", "corpus"),  # suite config, corpus read + validated + selected, policy checks
    ("store_open", "store"),  # open_store: lock, connect, schema check and DDL
    ("run_record", "recorded"),  # preflight, manifest, create_run (the run is recorded)
    ("first_request", "first_request"),  # provider, the work's first requests built
    ("first_answer", "first_answer"),  # the transport's import and first round trip
    ("answers", "answers"),  # every other answer, scored and handed to the writer
    ("last_batch", "last_batch"),  # the final batch written
    ("summary", "summary"),  # the summary and the run's finish recorded
    ("close", "closed"),  # the store closed
    ("print", "printed"),  # the summary printed
    ("exit", "exit"),  # interpreter shutdown
)
#: The floor's and the bare loop's phases: imports, every request answered, exit.
LOOP_PHASES = (("imports", "imports"), ("answers", "answers"), ("exit", "exit"))


def phase_seconds(
    marks: Sequence[Sequence[Any]], phases: Sequence[tuple[str, str]]
) -> dict[str, float]:
    """Seconds in each phase: from the previous mark (launch for the first) to its own.

    Examples:
        >>> phase_seconds([("imports", 0.25), ("answers", 0.5), ("exit", 0.625)], LOOP_PHASES)
        {'imports': 0.25, 'answers': 0.25, 'exit': 0.125}
    """
    at = {str(phase): float(t) for phase, t in marks}
    missing = [mark for _, mark in phases if mark not in at]
    if missing:
        raise RuntimeError(f"no timeline mark {missing} (marks: {sorted(at)})")
    seconds, previous = {}, 0.0
    for phase, mark in phases:
        seconds[phase] = at[mark] - previous
        previous = at[mark]
    return seconds


def bench_timeline(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """Phases of ``evalkit run`` (``EVALKIT_TIMELINE=1``) beside the floor and the bare loop,
    alternately, per size; the gap to the floor is evalkit's wall minus the floor's. With
    ``--against`` another checkout's ``evalkit run`` too, in each round (before and after a
    change in one invocation, side ``against``)."""
    sizes = args.sizes or [20, 1000]
    conc = args.concurrency or 32
    transport = args.transport[0]
    against = Path(args.against).resolve() if args.against else None
    sides = ("floor", "bare", "evalkit") + (("against",) if against else ())
    by_size: dict[str, Any] = {}
    with start_demo_server(noise=False, latency_ms=args.latency_ms) as server:
        run_floor(server, min(sizes), conc)  # warm-up: page cache, first sockets
        for n in sizes:
            config = write_corpus(root / f"corpus-{n}", n, conc)
            rows = []
            for number in range(args.rounds):
                floor, bare = run_floor(server, n, conc), run_bare(server, n, conc)
                db = root / "t.duckdb"
                if against is not None and number % 2 == 1:  # who goes first alternates
                    other = run_evalkit(server, config, db, conc, _t(transport), True, against)
                ours = run_evalkit(server, config, db, conc, _t(transport), True)
                if against is not None and number % 2 == 0:
                    other = run_evalkit(server, config, db, conc, _t(transport), True, against)
                row = {
                    "floor": _drop_stdout(floor) | {"phases": _loop_phases(floor)},
                    "bare": _drop_stdout(bare) | {"phases": _loop_phases(bare)},
                    "evalkit": _drop_stdout(ours)
                    | {"phases": phase_seconds(ours["marks"], PHASES)},
                    "gap_s": ours["wall_s"] - floor["wall_s"],
                    "ratio_floor": ours["wall_s"] / floor["wall_s"],
                    "ratio_bare": ours["wall_s"] / bare["wall_s"],
                }
                if against is not None:
                    row["against"] = _drop_stdout(other) | {
                        "phases": phase_seconds(other["marks"], PHASES)
                    }
                    row["against_gap_s"] = other["wall_s"] - floor["wall_s"]
                    # paired by round: this checkout minus the other (negative: this one costs less)
                    row["vs_against_wall_s"] = ours["wall_s"] - other["wall_s"]
                    row["vs_against_cpu_s"] = ours["cpu_s"] - other["cpu_s"]
                rows.append(row)
            entry: dict[str, Any] = {"cases": n, "rounds": rows}
            for side in sides:
                entry[f"median_wall_s_{side}"] = statistics.median(r[side]["wall_s"] for r in rows)
                entry[f"median_cpu_s_{side}"] = statistics.median(r[side]["cpu_s"] for r in rows)
                entry[f"median_phases_{side}"] = {
                    phase: statistics.median(r[side]["phases"][phase] for r in rows)
                    for phase in rows[0][side]["phases"]
                }
            paired = ("against_gap_s", "vs_against_wall_s", "vs_against_cpu_s")
            for key in ("gap_s", "ratio_floor", "ratio_bare") + (paired if against else ()):
                entry[f"median_{key}"] = _median(rows, key)
            by_size[str(n)] = entry
    return {
        "sizes": sizes,
        "concurrency": conc,
        "transport": transport,
        "against": str(against or ""),
        "by_size": by_size,
    }


def _loop_phases(row: dict[str, Any]) -> dict[str, float]:
    return phase_seconds(row["marks"], LOOP_PHASES)


def _progress(n: int, entry: dict[str, Any], sides: list[str], key: str, unit: str) -> None:
    """One line as each size is done (a 100k-case size takes minutes; the table comes last)."""
    figures = ", ".join(f"{side} {entry[f'{key}_{side}']:.2f}{unit}" for side in sides)
    load = os.getloadavg()[0]
    print(f"  {n:,} cases done: {figures} (1-min load {load:.1f})", flush=True)


def _per_case_ratios(by_size: dict[str, Any], key: str) -> None:
    """``<key>_vs_smallest`` on each size: its per-case figure over the smallest size's."""
    first = next(iter(by_size.values()))[key]
    for entry in by_size.values():
        entry[f"{key}_vs_smallest"] = entry[key] / first if first else 0.0


def _t(transport: str) -> str | None:
    return None if transport == "default" else transport


# --- printing --------------------------------------------------------------------------------


def _print(mode: str, f: dict[str, Any]) -> None:
    load = f["loadavg_1min"]
    print(f"cores: {f['cores']} (1-min load average {load[0]:.2f} before, {load[1]:.2f} after)")
    if mode == "whole":
        s = f["summary"]
        print(
            f"whole: {f['cases']} cases, c={f['concurrency']}, {f['latency_ms']:g} ms, "
            f"{len(f['rounds'])} rounds (wall from launch to exit)"
        )
        for i, r in enumerate(f["rounds"], 1):
            parts = [f"bare {r['bare']['wall_s']:.2f} s"] + [
                f"{t} {r[t]['wall_s']:.2f} s = {r[f'ratio_{t}']:.3f}x"
                for t in ["floor", *f["transports"]]
            ]
            print(f"  round {i}: " + "; ".join(parts))
        for side in ["bare", "floor", *f["transports"]]:
            ratio = "" if side == "bare" else f" ratio {s[f'median_ratio_{side}']:.3f}x;"
            print(
                f"  median {side:8}{ratio} wall {s[f'median_wall_s_{side}']:.2f} s, CPU "
                f"{s[f'median_cpu_s_{side}']:.2f} s, peak RSS {s[f'median_rss_mib_{side}']:.0f} MiB"
            )
    elif mode == "corpus":
        print(
            f"corpus ({f['mix']} scorer mix): load_corpus (read + validate + build scorers), "
            "fresh process per size, median"
        )
        for n, e in f["by_size"].items():
            print(
                f"  {int(n):>7,} cases: {e['median_load_s']:.3f} s = {e['ms_per_case']:.4f} ms/case"
                f" (CPU {e['cpu_ms_per_case']:.4f} ms/case)"
                f" ({e['ms_per_case_vs_smallest']:.2f}x the smallest size's per case); loaded "
                f"{e['loaded']:,}; two selected (deferred): {e['median_two_s']:.3f} s = "
                f"{e['two_ms_per_case']:.4f} ms/case, {e['two_built']} cases' scorers built"
            )
            if f["against"]:
                print(
                    f"  {'':>7}  against {f['against']}: {e['against_ms_per_case']:.4f} ms/case "
                    f"(CPU {e['against_cpu_ms_per_case']:.4f}); this checkout over it: "
                    f"{e['median_ratio']:.3f}x wall, {e['median_cpu_ratio']:.3f}x CPU "
                    "(medians of the rounds' ratios)"
                )
    elif mode == "startup":
        s = f["summary"]
        print(
            f"startup: python -c 'import openai' {s['median_import_openai_s']:.3f} s; "
            f"evalkit run --help {s['median_run_help_s']:.3f} s; evalkit run of one case "
            f"{s['median_run_one_case_s']:.3f} s = +{s['median_above_import_openai_s']:.3f} s "
            f"(--help +{s['median_help_above_import_openai_s']:.3f} s)"
        )
    elif mode == "rss":
        print(f"rss: peak RSS, c={f['concurrency']}, {f['latency_ms']:g} ms, median")
        for n, e in f["by_size"].items():
            parts = [f"{side} {e[f'median_rss_mib_{side}']:.0f} MiB" for side in
                     ["bare", *f["transports"]]]  # fmt: skip
            print(f"  {int(n):>7,} cases: " + ", ".join(parts))
        for side, kib in f["kib_per_case"].items():
            print(f"  growth per case {side:8} {kib:.2f} KiB")
    elif mode == "timeline":
        print(
            f"timeline: evalkit run ({f['transport']} transport) beside the floor (aiohttp) "
            f"and the bare AsyncOpenAI loop, c={f['concurrency']}, {f['latency_ms']:g} ms, "
            "medians (seconds)"
        )
        for n, e in f["by_size"].items():
            print(
                f"  {int(n):>7,} cases: evalkit {e['median_wall_s_evalkit']:.3f} s, floor "
                f"{e['median_wall_s_floor']:.3f} s, bare {e['median_wall_s_bare']:.3f} s; "
                f"gap to the floor {e['median_gap_s']:+.3f} s "
                f"({e['median_ratio_floor']:.2f}x floor, {e['median_ratio_bare']:.2f}x bare); "
                f"CPU evalkit {e['median_cpu_s_evalkit']:.3f} s, floor "
                f"{e['median_cpu_s_floor']:.3f} s, bare {e['median_cpu_s_bare']:.3f} s"
            )
            if f.get("against"):
                print(
                    f"  {'':>7}  against {f['against']}: evalkit {e['median_wall_s_against']:.3f}"
                    f" s, gap to the floor {e['median_against_gap_s']:+.3f} s, CPU "
                    f"{e['median_cpu_s_against']:.3f} s; this checkout minus it, paired by "
                    f"round: wall {e['median_vs_against_wall_s']:+.3f} s, CPU "
                    f"{e['median_vs_against_cpu_s']:+.3f} s (medians)"
                )
            for side in ("evalkit", "against", "floor", "bare"):
                if f"median_phases_{side}" not in e:
                    continue
                phases = e[f"median_phases_{side}"]
                print(f"    {side:8} " + ", ".join(f"{k} {v:.3f}" for k, v in phases.items()))
    else:
        print(f"curve: c={f['concurrency']}, {f['latency_ms']:g} ms, medians")
        for n, e in f["by_size"].items():
            for side in ["bare", *f["transports"]]:
                ratio = "" if side == "bare" else f" ({e[f'median_ratio_{side}']:.3f}x bare)"
                print(
                    f"  {int(n):>7,} {side:8} wall {e[f'median_wall_s_{side}']:8.2f} s{ratio}, "
                    f"{e[f'wall_ms_per_case_{side}']:.3f} ms/case "
                    f"({e[f'wall_ms_per_case_{side}_vs_smallest']:.2f}x); CPU "
                    f"{e[f'median_cpu_s_{side}']:.2f} s = {e[f'cpu_ms_per_case_{side}']:.3f} "
                    f"ms/case ({e[f'cpu_ms_per_case_{side}_vs_smallest']:.2f}x); peak RSS "
                    f"{e[f'median_peak_rss_mib_{side}']:.0f} MiB"
                )


_BENCHES = {
    "whole": bench_whole,
    "corpus": bench_corpus,
    "startup": bench_startup,
    "rss": bench_rss,
    "curve": bench_curve,
    "timeline": bench_timeline,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run one benchmark and print its figures (``--json``: also as JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=sorted(_BENCHES))
    parser.add_argument("--cases", type=int, help="cases (whole; default 1000)")
    parser.add_argument(
        "--sizes", type=int, nargs="+", help="case counts (corpus, rss, curve, timeline)"
    )
    parser.add_argument(
        "--mix", choices=["demo", "simple"], default="demo", help="corpus: the cases' scorers"
    )
    parser.add_argument("--latency-ms", type=float, default=50.0, help="server latency")
    parser.add_argument(
        "--concurrency", type=int, help="default 32 (whole, rss, timeline), 256 (curve)"
    )
    parser.add_argument(
        "--transport",
        nargs="+",
        default=["default", "openai", "lean"],
        choices=["default", "openai", "lean"],
        help="evalkit transports to run (default: what the config leaves unset; timeline: "
        "the first)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (medians)")
    parser.add_argument(
        "--against",
        metavar="CHECKOUT",
        help="corpus: also load with the evalkit of this checkout, in the same rounds; "
        "timeline: also run its evalkit run, in each round",
    )
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="evalkit-bench-process-") as tmp:
        figures = _BENCHES[args.mode](args, Path(tmp))
    figures |= {
        "mode": args.mode,
        "cores": os.cpu_count(),
        "loadavg_1min": [load_before, os.getloadavg()[0]],
        "latency_ms": args.latency_ms,
        "transports": args.transport,
    }
    _print(args.mode, figures)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

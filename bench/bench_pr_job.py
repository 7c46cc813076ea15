"""What a pull request's gate job costs, step by step: the CI example's candidate job on the demo.

``examples/github-actions/evalkit.yml`` gates a pull request in two commands once the baseline
is in the store (pulled from the team store, or run and promoted from the base branch):

* ``evalkit run --label candidate`` the candidate (here the demo's second prompt, so every
  request is asked: ``--allow-diff prompt``);
* ``evalkit gate candidate --rebaseline --allow-diff prompt``: first the baseline's
  configuration runs on the cases the pull request edited (cached), so they pair; then the
  gate notebook, its report and exit code.

The pull request edits ``--edited`` cases of a copy of the demo corpus (a sentence added to
each one's user message) after the baseline ran and was promoted (both untimed: the nightly
job's work). Each step is a fresh ``evalkit`` process against the demo simulator
(``--latency-ms`` per request); its wall and CPU (user + sys of the process and its children,
the gate's kernel included) are printed, and the rebaseline inside the gate apart (its wall and
the CPU of the thread that ran it), with the requests the simulator served per step. Run with
bytecode compiled, as a user's venv has it (``python -m compileall -q evalkit .venv/lib``).
No asserts: the figures are read off the output.

Usage:
    .venv/bin/python bench/bench_pr_job.py
    .venv/bin/python bench/bench_pr_job.py --rounds 3 --edited 5 --latency-ms 200
    .venv/bin/python bench/bench_pr_job.py --tier smoke --rounds 1 --json pr_job.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

#: The gate process: time the rebaseline inside it, then run ``evalkit gate`` as the CLI does.
GATE = r"""
import json, sys, time
out_file, args = sys.argv[1], sys.argv[2:]
from evalkit.cli import gate, main
real = gate.maybe_rebaseline
seen = {}
def timed(*a, **k):
    wall, cpu = time.perf_counter(), time.thread_time()
    try:
        return real(*a, **k)
    finally:
        seen["rebaseline"] = {"wall": time.perf_counter() - wall, "cpu": time.thread_time() - cpu}
gate.maybe_rebaseline = timed
code = main(args)
with open(out_file, "w") as f:
    json.dump({"code": code, **seen}, f)
raise SystemExit(code)
"""


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def edit_cases(corpus: Path, count: int, tag: str | None = None) -> list[str]:
    """Add a sentence to the first user message of ``count`` cases of ``corpus/cases`` (with
    ``tag`` only, when given): the first such case of each file, then the second, and so on.
    A text edit, so comments stay; returns the edited ids."""
    texts = {p: p.read_text(encoding="utf-8").splitlines(keepends=True)
             for p in sorted((corpus / "cases").glob("*.yaml"))}  # fmt: skip
    found = []  # (rank in its file, file, id, line of its message's first text)
    for f, (path, lines) in enumerate(texts.items()):
        rank, case_id, tagged = -1, "", False
        for i, line in enumerate(lines):
            if line.startswith("- id: "):
                rank, case_id = rank + 1, line.split(":", 1)[1].strip()
                tagged = tag is None
            elif line.strip().startswith("tags:") and tag is not None:
                tagged = tag in line.split("[", 1)[-1].split("]", 1)[0].replace(" ", "").split(",")
            elif line.strip() == "content: >-" and tagged and case_id:
                found.append((rank, f, path, case_id, i + 1))
                case_id = ""  # its first message only
    chosen = sorted(found, key=lambda c: (c[0], c[1]))[:count]
    for _, _, path, _, i in chosen:
        texts[path][i] = texts[path][i].rstrip("\n") + " Please answer briefly.\n"
    for path, lines in texts.items():
        path.write_text("".join(lines), encoding="utf-8")
    return [c[3] for c in chosen]


def evalkit(args: list[str], corpus: Path, db: Path, url: str, out: Path) -> dict[str, Any]:
    """One ``evalkit`` process: wall, CPU of its tree, exit code (and the gate's rebaseline)."""
    common = ["--config", str(corpus / "evalkit.yaml"), "--db", str(db)]
    endpoint = ["--set", f"system.base_url={url}", "--set", f"judge.base_url={url}"]
    if args[0] == "gate":
        phases = out / "gate_phases.json"
        command = [sys.executable, "-c", GATE, str(phases), *args, *common, *endpoint,
                   "--out", str(out / "reports")]  # fmt: skip
    else:
        command = [sys.executable, "-m", "evalkit.cli", *args, *common]
        command += [*endpoint, "--no-progress"] if args[0] == "run" else []
    cpu, wall = _children_cpu(), time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, cwd=out)
    wall, cpu = time.perf_counter() - wall, _children_cpu() - cpu
    if done.returncode not in (0, 1) or (done.returncode == 1 and args[0] != "gate"):
        raise SystemExit(f"{' '.join(args)}: exit {done.returncode}\n{done.stderr[-3000:]}")
    step: dict[str, Any] = {"wall": wall, "cpu": cpu, "code": done.returncode}
    if args[0] == "gate":
        if not phases.exists():  # the wrapper itself failed (exit 1 like a blocked gate)
            raise SystemExit(f"{' '.join(args)}: no phases written\n{done.stderr[-3000:]}")
        step["rebaseline"] = json.loads(phases.read_text()).get("rebaseline")
        step["decision"] = next((s for s in done.stdout.splitlines() if s.startswith("gate ")), "")
        step["rebaselined"] = [s for s in done.stderr.splitlines() if "rebaselin" in s]
    return step


def one_job(folder: Path, server: Any, edited: int, tier: str | None) -> dict[str, Any]:
    """The baseline run and promoted (untimed), ``edited`` cases edited, then the timed job."""
    corpus = folder / "corpus"
    shutil.copytree(REPO / "corpus", corpus, ignore=shutil.ignore_patterns(".evalkit"))
    db, url = folder / "evalkit.duckdb", server.base_url
    select = ["--tier", tier] if tier else []
    evalkit(["run", "--label", "base", *select], corpus, db, url, folder)
    promote = ["baseline", "promote", "base", "--who", "ci", "--reason", "main"]
    evalkit(promote, corpus, db, url, folder)
    ids = edit_cases(corpus, edited, "smoke" if tier == "smoke" else None)
    steps = {
        "candidate run": ["run", "--label", "candidate", *select, "--prompt",
                          str(corpus / "prompts" / "v2.md")],
        "gate --rebaseline": ["gate", "candidate", "--rebaseline", "--allow-diff", "prompt",
                              *select],
    }  # fmt: skip
    job: dict[str, Any] = {"edited": ids}
    for name, args in steps.items():
        before = int(server.stats()["requests"])
        job[name] = evalkit(args, corpus, db, url, folder)
        job[name]["requests"] = int(server.stats()["requests"]) - before
    return job


def measure(rounds: int, edited: int, latency_ms: float, tier: str | None) -> dict[str, Any]:
    from evalkit.demo.server import start_demo_server

    load, jobs = [os.getloadavg()[0]], []
    with start_demo_server(noise=False, latency_ms=latency_ms) as server:
        for i in range(rounds):
            with tempfile.TemporaryDirectory(prefix=f"bench-pr-job-{i}-") as tmp:
                jobs.append(one_job(Path(tmp), server, edited, tier))
    load.append(os.getloadavg()[0])
    return {"rounds": rounds, "edited": edited, "latency_ms": latency_ms, "tier": tier,
            "load_1min": load, "cores": os.cpu_count(), "jobs": jobs}  # fmt: skip


def report(result: dict[str, Any]) -> str:
    jobs, median = result["jobs"], statistics.median
    selection = f"tier {result['tier']}" if result["tier"] else "all 91 cases"
    lines = [
        f"a pull request's gate job on the demo ({selection}, {result['edited']} cases edited), "
        f"{result['latency_ms']:g} ms per request, medians of {result['rounds']}; load "
        f"{result['load_1min'][0]:.1f} -> {result['load_1min'][1]:.1f} on {result['cores']} "
        "cores",
        f"edited: {', '.join(jobs[0]['edited'])}",
        "",
        f"{'step':<30}{'wall s':>9}{'CPU s':>9}{'requests':>10}",
    ]
    for name in ("candidate run", "gate --rebaseline"):
        wall, cpu = median(j[name]["wall"] for j in jobs), median(j[name]["cpu"] for j in jobs)
        requests = median(j[name]["requests"] for j in jobs)
        lines.append(f"{name:<30}{wall:>9.2f}{cpu:>9.2f}{requests:>10.0f}")
        if name == "gate --rebaseline":
            inner = [j[name]["rebaseline"] or {"wall": 0.0, "cpu": 0.0} for j in jobs]
            wall_r, cpu_r = median(r["wall"] for r in inner), median(r["cpu"] for r in inner)
            lines.append(f"{'  of which the rebaseline':<30}{wall_r:>9.2f}{cpu_r:>9.2f}")
    total_wall = median(sum(j[n]["wall"] for n in ("candidate run", "gate --rebaseline"))
                        for j in jobs)  # fmt: skip
    total_cpu = median(sum(j[n]["cpu"] for n in ("candidate run", "gate --rebaseline"))
                       for j in jobs)  # fmt: skip
    lines.append(f"{'the job':<30}{total_wall:>9.2f}{total_cpu:>9.2f}")
    lines.append(f"decision: {sorted({j['gate --rebaseline']['decision'] for j in jobs})}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=3, help="jobs, each in a fresh store")
    parser.add_argument("--edited", type=int, default=3, help="cases the pull request edits")
    parser.add_argument("--latency-ms", type=float, default=50.0, help="simulator latency")
    parser.add_argument("--tier", help="run a named selection (e.g. smoke) instead of all")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    args = parser.parse_args(argv)
    result = measure(args.rounds, args.edited, args.latency_ms, args.tier)
    print(report(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

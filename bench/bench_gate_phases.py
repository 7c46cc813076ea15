"""Where one ``evalkit gate`` spends its CPU, phase by phase, beside ``evalkit compare``'s.

Both commands run on the same pair (the demo's 91-case baseline and candidate, built once in a
temporary folder unless ``--db`` names a store), alternating, each as a fresh process whose CPU
(user + sys, its kernel's included) is read from ``getrusage(RUSAGE_CHILDREN)`` here.

The gate process (:data:`GATE`) times its own phases by wrapping evalkit's functions before
``evalkit.cli.main`` runs, and its kernel times its own through an IPython startup file
(:data:`KERNEL_STARTUP`, in a private ``IPYTHONDIR``):

- **CLI start**: the gate process's CPU until the ``gate`` handler starts (interpreter,
  imports, argument parsing);
- **decision**: `evalkit.notebooks._Decider`, the one `gate_pair` (in a thread of the CLI
  while the kernel starts; its own thread's CPU);
- **kernel start**: the kernel's CPU until IPython runs its startup files (interpreter,
  ipykernel);
- **decision again**: `gate_pair` in the kernel (none since the CLI hands its decision over:
  run the script with an older checkout on ``PYTHONPATH`` for the figures before);
- **notebook**: the rest of the kernel's CPU (evalkit's imports, the report, the tables);
- **charts**: in the kernel, the charts saved as files and the chart shown as an output;
- **files**: in the kernel, ``report.json``, ``junit.xml`` and ``gate.md`` rendered;
- **HTML**: the report page rendered from the executed notebook (`to_report_html`);
- **CLI other**: what remains of the CLI process (papermill, reading and writing notebooks).

CPU is the figure to read on a shared machine (wall time there is mostly waiting for a core);
the load average is printed beside it. No asserts: the targets are read off the figures.

Usage:
    .venv/bin/python bench/bench_gate_phases.py
    .venv/bin/python bench/bench_gate_phases.py --rounds 5 --json gate_phases.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "corpus" / "evalkit.yaml"

#: The gate process: wrap the phases' functions, run ``evalkit gate``, print the phases as JSON.
GATE = r"""
import json, sys, threading, time
started, out_file, args = float(sys.argv[1]), sys.argv[2], sys.argv[3:]
phases = {}

def timed(name, owner, attr, clock):
    real = getattr(owner, attr)
    def wrapper(*a, **k):
        wall, cpu = time.perf_counter(), clock()
        try:
            return real(*a, **k)
        finally:
            phases[name] = {"cpu": clock() - cpu, "wall": time.perf_counter() - wall}
    setattr(owner, attr, wrapper)

from evalkit.cli import gate, main
from evalkit import notebooks

real_gate = gate._cmd_gate
def entered(*a, **k):
    phases["cli_start"] = {"cpu": time.process_time(), "wall": time.time() - started}
    return real_gate(*a, **k)
gate._cmd_gate = entered
if hasattr(notebooks, "_Decider"):  # before the handoff, the kernel decided
    timed("decision", notebooks._Decider, "run", time.thread_time)
timed("html", notebooks, "to_report_html", time.thread_time)
code = main(args)
phases["cli_total"] = {"cpu": time.process_time(), "wall": time.time() - started}
with open(out_file, "w") as f:
    json.dump({"code": code, "phases": phases}, f)
"""

#: Run by IPython as the kernel starts: time the charts and the files, and the kernel's CPU.
KERNEL_STARTUP = r"""
import atexit, json, os, time
_phases = {"kernel_start": {"cpu": time.process_time()}}

def _timed(name, module, attr):
    real = getattr(module, attr)
    def wrapper(*a, **k):
        cpu = time.process_time()
        try:
            return real(*a, **k)
        finally:
            slot = _phases.setdefault(name, {"cpu": 0.0})
            slot["cpu"] += time.process_time() - cpu
    setattr(module, attr, wrapper)

import evalkit.report.charts as _charts
import evalkit.report.junit as _junit
import evalkit.report.markdown as _markdown
import evalkit.compare.pin as _pin
import evalkit.report.build as _report
_timed("decision", _pin, "gate_pair")
_timed("charts", _charts, "save_chart")
_timed("charts", _charts, "to_mimebundle")
_timed("files", _report, "to_json")
_timed("files", _junit, "to_junit")
_timed("files", _markdown, "to_markdown")

@atexit.register
def _write():
    _phases["kernel_total"] = {"cpu": time.process_time()}
    with open(os.environ["BENCH_KERNEL_PHASES"], "w") as f:
        json.dump(_phases, f)
"""


def demo_store(folder: Path) -> Path:
    """The demo's baseline and candidate runs, in ``folder/demo.duckdb``."""
    db = folder / "demo.duckdb"
    subprocess.run(
        [sys.executable, "-m", "evalkit.cli", "demo", "run", "--db", str(db), "--no-gate",
         "--no-progress"],
        cwd=folder, check=True, capture_output=True, timeout=900,
    )  # fmt: skip
    return db


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one_compare(pair: list[str], folder: Path) -> dict[str, Any]:
    """CPU and wall seconds of one ``evalkit compare`` process, and its exit code."""
    cpu, wall = _children_cpu(), time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "evalkit.cli", "compare", *pair],
        cwd=folder, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    return {"cpu": _children_cpu() - cpu, "wall": time.perf_counter() - wall,
            "code": done.returncode}  # fmt: skip


def one_gate(pair: list[str], folder: Path) -> dict[str, Any]:
    """CPU and wall seconds of one ``evalkit gate`` process tree, phase by phase."""
    ipython = folder / "ipython"
    (ipython / "profile_default" / "startup").mkdir(parents=True, exist_ok=True)
    (ipython / "profile_default" / "startup" / "00-bench.py").write_text(KERNEL_STARTUP)
    gate_file, kernel_file = folder / "gate_phases.json", folder / "kernel_phases.json"
    env = os.environ | {"IPYTHONDIR": str(ipython), "BENCH_KERNEL_PHASES": str(kernel_file)}
    args = ["gate", *pair, "--out", str(folder / "reports")]
    cpu, wall = _children_cpu(), time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", GATE, str(time.time()), str(gate_file), *args],
        cwd=folder, capture_output=True, text=True, timeout=900, env=env,
    )  # fmt: skip
    tree_cpu, tree_wall = _children_cpu() - cpu, time.perf_counter() - wall
    if not gate_file.is_file():
        raise SystemExit(f"the gate process failed (exit {done.returncode}):\n{done.stderr}")
    gate = json.loads(gate_file.read_text())
    kernel = json.loads(kernel_file.read_text()) if kernel_file.is_file() else {}
    p, k = gate["phases"], kernel
    kernel_cpu = k.get("kernel_total", {}).get("cpu", 0.0)
    charts, files = k.get("charts", {}).get("cpu", 0.0), k.get("files", {}).get("cpu", 0.0)
    kernel_decision = k.get("decision", {}).get("cpu", 0.0)
    start = k.get("kernel_start", {}).get("cpu", 0.0)
    cli = p["cli_total"]["cpu"]
    shown = {
        "CLI start": p["cli_start"]["cpu"],
        "decision": p.get("decision", {}).get("cpu", 0.0),
        "kernel start": start,
        "decision again": kernel_decision,
        "notebook": kernel_cpu - start - charts - files - kernel_decision,
        "charts": charts,
        "files": files,
        "HTML": p.get("html", {}).get("cpu", 0.0),
    }
    shown["CLI other"] = cli - shown["CLI start"] - shown["decision"] - shown["HTML"]
    return {"cpu": tree_cpu, "wall": tree_wall, "code": gate["code"], "phases": shown,
            "kernel_cpu": kernel_cpu, "cli_cpu": cli}  # fmt: skip


def measure(
    rounds: int,
    db: Path | None,
    config: Path | None,
    runs: tuple[str, str] = ("baseline", "candidate"),
) -> dict[str, Any]:
    """``evalkit compare`` and ``evalkit gate`` alternating ``rounds`` times; medians."""
    with tempfile.TemporaryDirectory(prefix="bench-gate-phases-") as tmp:
        folder = Path(tmp)
        store = db or demo_store(folder)
        pair = [*runs, "--db", str(store)]
        if config or CONFIG.is_file():
            pair += ["--config", str(config or CONFIG)]
        load = [os.getloadavg()[0]]
        compares, gates = [], []
        for i in range(rounds):
            order = (one_compare, one_gate) if i % 2 == 0 else (one_gate, one_compare)
            for run in order:
                (compares if run is one_compare else gates).append(run(pair, folder))
        load.append(os.getloadavg()[0])
    median = statistics.median
    phases = {name: median(g["phases"][name] for g in gates) for name in gates[0]["phases"]}
    result = {
        "rounds": rounds, "load_1min": load, "cores": os.cpu_count(),
        "compare": {"cpu": median(c["cpu"] for c in compares),
                    "wall": median(c["wall"] for c in compares),
                    "codes": sorted({c["code"] for c in compares})},
        "gate": {"cpu": median(g["cpu"] for g in gates), "wall": median(g["wall"] for g in gates),
                 "codes": sorted({g["code"] for g in gates}), "phases": phases},
        "samples": {"compare": compares, "gate": gates},
    }  # fmt: skip
    result["cpu_ratio"] = result["gate"]["cpu"] / result["compare"]["cpu"]
    return result


def report(result: dict[str, Any]) -> str:
    """The figures as a table: the gate's phases, then compare and gate side by side."""
    gate, compare = result["gate"], result["compare"]
    lines = [
        f"evalkit gate vs evalkit compare, medians of {result['rounds']} each, "
        f"load {result['load_1min'][0]:.1f} -> {result['load_1min'][1]:.1f} "
        f"on {result['cores']} cores",
        "",
        f"{'gate phase':<14}{'CPU s':>8}",
    ]
    lines += [f"{name:<14}{cpu:>8.2f}" for name, cpu in gate["phases"].items()]
    lines += [
        "",
        f"{'command':<16}{'CPU s':>8}{'wall s':>8}  exit",
        f"{'evalkit compare':<16}{compare['cpu']:>8.2f}{compare['wall']:>8.2f}  {compare['codes']}",
        f"{'evalkit gate':<16}{gate['cpu']:>8.2f}{gate['wall']:>8.2f}  {gate['codes']}",
        f"gate / compare CPU: {result['cpu_ratio']:.2f}x",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=3, help="runs per command (median)")
    parser.add_argument("--db", type=Path, help="a store with runs 'baseline' and 'candidate'")
    parser.add_argument("--config", type=Path, help="the suite config (default: the demo's)")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    parser.add_argument("--baseline", default="baseline", help="with --db: the baseline run")
    parser.add_argument("--candidate", default="candidate", help="with --db: the candidate run")
    args = parser.parse_args(argv)
    db = args.db.resolve() if args.db else None
    config = args.config.resolve() if args.config else None
    result = measure(args.rounds, db, config, (args.baseline, args.candidate))
    print(report(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

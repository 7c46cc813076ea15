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
  while the kernel starts; its own thread's CPU), and the report built from it, which the
  kernel receives with the decision;
- **kernel start**: the kernel's CPU until IPython runs its startup files (interpreter,
  ipykernel);
- **decision again**: `gate_pair` in the kernel (none since the CLI hands its decision over);
- **notebook**: the rest of the kernel's CPU (evalkit's imports, the report's HTML, tables);
- **charts**: in the kernel, the charts saved as files and the chart shown as an output (its
  Vega-Lite spec and static image);
- **files**: in the kernel, ``report.json``, ``junit.xml`` and ``gate.md`` rendered;
- **HTML**: the report page rendered from the executed notebook (`to_report_html`);
- **CLI other**: what remains of the CLI process (papermill, reading and writing notebooks).

CPU is the figure to read on a shared machine (wall time there is mostly waiting for a core);
the load average is printed beside it. No asserts: the targets are read off the figures.
``--before CHECKOUT`` (a plain copy of an older tree, e.g. ``git archive``'d main) measures its
compare and gate in the same rounds, alternating with this checkout's: the figures before and
after side by side, under the same load. Run it with bytecode compiled, as a user's venv has
it (``python -m compileall -q evalkit .venv/lib`` and the checkout's ``evalkit``).

Usage:
    .venv/bin/python bench/bench_gate_phases.py
    .venv/bin/python bench/bench_gate_phases.py --rounds 5 --json gate_phases.json
    .venv/bin/python bench/bench_gate_phases.py --before /tmp/evalkit-main --rounds 3
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

# Each module is wrapped as it is first imported, so the bench itself imports nothing the
# notebook would not (a kernel that no longer needs a module never loads it here either).
import importlib.abc, importlib.machinery, sys
_WANTED = {
    "evalkit.compare.pin": [("decision", "gate_pair")],
    "evalkit.report.charts": [("charts", "save_chart"), ("charts", "to_mimebundle")],
    "evalkit.report.svg": [("charts", "save_slice_charts")],
    "evalkit.compare.charts": [("charts", "save_chart"), ("charts", "to_mimebundle")],
    "evalkit.report.build": [("files", "to_json")],
    "evalkit.compare.report": [("files", "to_json")],
    "evalkit.report.junit": [("files", "to_junit")],
    "evalkit.compare.junit": [("files", "to_junit")],
    "evalkit.report.markdown": [("files", "to_markdown")],
    "evalkit.compare.markdown": [("files", "to_markdown")],
}

class _WrapOnImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in _WANTED:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module
        def exec_module(module):
            run(module)
            for phase, attr in _WANTED[name]:
                if hasattr(module, attr):
                    _timed(phase, module, attr)
        spec.loader.exec_module = exec_module
        return spec

sys.meta_path.insert(0, _WrapOnImport())

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


def _env(checkout: Path | None) -> dict[str, str]:
    """This environment, with ``checkout``'s evalkit first on the path (its kernel's too)."""
    if checkout is None:
        return dict(os.environ)
    path = [str(checkout), os.environ.get("PYTHONPATH", "")]
    return os.environ | {"PYTHONPATH": os.pathsep.join(p for p in path if p)}


def one_compare(pair: list[str], folder: Path, checkout: Path | None = None) -> dict[str, Any]:
    """CPU and wall seconds of one ``evalkit compare`` process, and its exit code."""
    cpu, wall = _children_cpu(), time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "evalkit.cli", "compare", *pair],
        cwd=folder, capture_output=True, text=True, timeout=900, env=_env(checkout),
    )  # fmt: skip
    return {"cpu": _children_cpu() - cpu, "wall": time.perf_counter() - wall,
            "code": done.returncode}  # fmt: skip


def one_gate(pair: list[str], folder: Path, checkout: Path | None = None) -> dict[str, Any]:
    """CPU and wall seconds of one ``evalkit gate`` process tree, phase by phase."""
    ipython = folder / "ipython"
    (ipython / "profile_default" / "startup").mkdir(parents=True, exist_ok=True)
    (ipython / "profile_default" / "startup" / "00-bench.py").write_text(KERNEL_STARTUP)
    gate_file, kernel_file = folder / "gate_phases.json", folder / "kernel_phases.json"
    env = _env(checkout) | {"IPYTHONDIR": str(ipython), "BENCH_KERNEL_PHASES": str(kernel_file)}
    gate_file.unlink(missing_ok=True)
    kernel_file.unlink(missing_ok=True)
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
    before: Path | None = None,
) -> dict[str, Any]:
    """``evalkit compare`` and ``evalkit gate`` alternating ``rounds`` times; medians. With
    ``before`` (an older checkout of evalkit), that checkout's compare and gate alternate with
    these in the same rounds, under the same load, in ``result["before"]``."""
    with tempfile.TemporaryDirectory(prefix="bench-gate-phases-") as tmp:
        folder = Path(tmp)
        store = db or demo_store(folder)
        pair = [*runs, "--db", str(store)]
        if config or CONFIG.is_file():
            pair += ["--config", str(config or CONFIG)]
        load = [os.getloadavg()[0]]
        checkouts = [None] if before is None else [None, before]
        samples: dict[Any, dict[str, list]] = {c: {"compare": [], "gate": []} for c in checkouts}
        for i in range(rounds):
            steps = [(c, kind) for c in checkouts for kind in ("compare", "gate")]
            for checkout, kind in steps if i % 2 == 0 else steps[::-1]:
                run = one_compare if kind == "compare" else one_gate
                samples[checkout][kind].append(run(pair, folder, checkout))
        load.append(os.getloadavg()[0])
    result = _summary(samples[None]["compare"], samples[None]["gate"])
    result |= {"rounds": rounds, "load_1min": load, "cores": os.cpu_count()}
    if before is not None:
        result["before"] = _summary(samples[before]["compare"], samples[before]["gate"])
        result["before"]["checkout"] = str(before)
    return result


def _summary(compares: list[dict[str, Any]], gates: list[dict[str, Any]]) -> dict[str, Any]:
    median = statistics.median
    phases = {name: median(g["phases"][name] for g in gates) for name in gates[0]["phases"]}
    result = {
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
    """The figures as a table: the gate's phases, then compare and gate side by side (and the
    older checkout's beside them, when measured)."""
    columns = [("this checkout", result)]
    if "before" in result:
        columns.insert(0, ("before", result["before"]))
    lines = [
        f"evalkit gate vs evalkit compare, medians of {result['rounds']} each, "
        f"load {result['load_1min'][0]:.1f} -> {result['load_1min'][1]:.1f} "
        f"on {result['cores']} cores",
    ]
    if "before" in result:
        lines.append(f"before: {result['before']['checkout']} (same rounds, alternating)")
    w = 24  # the name column

    def row(name: str, cells: list[str]) -> str:
        return f"{name:<{w}}" + "".join(f"{c:>15}" for c in cells)

    lines += ["", row("gate phase, CPU s", [n for n, _ in columns])]
    for name in result["gate"]["phases"]:
        lines.append(row(name, [f"{r['gate']['phases'].get(name, 0.0):.2f}" for _, r in columns]))
    lines += ["", row("command", [n for n, _ in columns])]
    for kind in ("compare", "gate"):
        lines.append(row(f"evalkit {kind} CPU s", [f"{r[kind]['cpu']:.2f}" for _, r in columns]))
        lines.append(row(f"evalkit {kind} wall s", [f"{r[kind]['wall']:.2f}" for _, r in columns]))
        lines.append(row("  exit codes", [str(r[kind]["codes"]) for _, r in columns]))
    lines.append(row("gate / compare CPU:", [f"{r['cpu_ratio']:.2f}x" for _, r in columns]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=3, help="runs per command (median)")
    parser.add_argument("--db", type=Path, help="a store with runs 'baseline' and 'candidate'")
    parser.add_argument("--config", type=Path, help="the suite config (default: the demo's)")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    parser.add_argument("--baseline", default="baseline", help="with --db: the baseline run")
    parser.add_argument("--candidate", default="candidate", help="with --db: the candidate run")
    parser.add_argument(
        "--before", type=Path, metavar="CHECKOUT",
        help="also measure this older checkout of evalkit (its package first on PYTHONPATH), "
        "alternating in the same rounds: before and after under the same load",
    )  # fmt: skip
    args = parser.parse_args(argv)
    db = args.db.resolve() if args.db else None
    config = args.config.resolve() if args.config else None
    before = args.before.resolve() if args.before else None
    result = measure(args.rounds, db, config, (args.baseline, args.candidate), before)
    print(report(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

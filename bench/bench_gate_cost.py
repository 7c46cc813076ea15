"""What one ``evalkit gate`` costs in CPU: the whole process tree, the CLI and its kernel apart.

Every CI job pays a gate: the CLI process (papermill, the HTML export) and the Jupyter kernel
papermill starts (ipykernel, evalkit, polars, altair, scipy, the decision, the charts). Each
timed gate is a fresh process (:data:`GATE`) that calls ``evalkit.cli.main`` and, at exit,
writes its own CPU (user + sys) and its reaped children's (the kernel) as one JSON line.

``--variant before`` runs the same process with the cuts undone in place (:data:`BEFORE`), so
that before and after alternate in one invocation, on the same store, under the same load:

- papermill writes the output notebook before and after every cell again
  (``request_save_on_cell_execute=True``, papermill's default: 24 writes of a ~0.6 MB
  notebook) instead of once at the end;
- the report page goes through nbconvert's own `HTMLExporter`, whose last step re-parses the
  whole page with BeautifulSoup, instead of `evalkit.notebooks._ReportExporter`;
- the CLI imports `evalkit.report.tables` (great_tables) with `evalkit.report.html`, which it
  needs only for `page`;
- the kernel's store is opened without ``with``, so that each of its ~40 calls opens the DuckDB
  file again (a copy of ``gate.ipynb`` with that one line changed back);
- the kernel is ``python -m ipykernel_launcher`` again, not `evalkit.kernel` (which leaves out
  ipykernel's debugger and freezes the heap before the exit-time collections), and starts with
  OpenBLAS's thread per core unless the environment names a number
  (`evalkit.notebooks._ThisPython.start_kernel` undone).

The demo store (``evalkit demo run --no-gate``, 91 cases, two runs) is built once in a
temporary folder unless ``--db`` names one. Figures are medians over ``--rounds``; the load
average is printed beside them. No asserts: the targets are read off the figures.

Usage:
    .venv/bin/python bench/bench_gate_cost.py
    .venv/bin/python bench/bench_gate_cost.py --rounds 5 --json gate_cost.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "corpus" / "evalkit.yaml"

#: The old behaviour, patched into the gate process before ``main`` runs (``--variant before``).
BEFORE = r"""
import pathlib, tempfile
import papermill as pm
import evalkit.report.tables  # noqa: F401  (the CLI's page() import pulled great_tables in)
from nbconvert import HTMLExporter
from evalkit import notebooks

_execute = pm.execute_notebook

def _save_every_cell(*args, **kwargs):
    kwargs["request_save_on_cell_execute"] = True
    return _execute(*args, **kwargs)

pm.execute_notebook = _save_every_cell
notebooks._ReportExporter = HTMLExporter

HELD = '"with open_store(DB_PATH, read_only=True) as store:\\n",'
EACH_CALL = '"store = open_store(DB_PATH, read_only=True)\\n",\n    "if True:\\n",'
text = notebooks.notebook_path("gate.ipynb").read_text()
assert HELD in text, "gate.ipynb changed: update the bench's before variant"
old_gate = pathlib.Path(tempfile.mkdtemp()) / "gate.ipynb"
old_gate.write_text(text.replace(HELD, EACH_CALL))
_shipped = notebooks.notebook_path
notebooks.notebook_path = lambda name: old_gate if name == "gate.ipynb" else _shipped(name)

from jupyter_client.manager import AsyncKernelManager
_command = notebooks._ThisPython.format_kernel_cmd
notebooks._ThisPython.format_kernel_cmd = lambda self, extra_arguments=None: [
    "ipykernel_launcher" if word == "evalkit.kernel" else word
    for word in _command(self, extra_arguments)
]
notebooks._ThisPython.start_kernel = AsyncKernelManager.start_kernel
"""

#: One gate, in its own process: ``argv[1]`` is the variant, the rest the CLI arguments.
GATE = """
import json, resource, sys
if sys.argv[1] == "before":
    exec(sys.argv[2])
from evalkit.cli import main
code = main(sys.argv[3:])
me = resource.getrusage(resource.RUSAGE_SELF)
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"code": code, "cli": me.ru_utime + me.ru_stime,
                  "kernel": kids.ru_utime + kids.ru_stime}), file=sys.stderr)
"""


def demo_store(folder: Path) -> Path:
    """The demo's baseline and candidate runs, in ``folder/demo.duckdb``."""
    db = folder / "demo.duckdb"
    subprocess.run(
        [sys.executable, "-m", "evalkit.cli", "demo", "run", "--db", str(db), "--no-gate",
         "--no-progress"],
        cwd=folder, check=True, capture_output=True, timeout=600,
    )  # fmt: skip
    return db


def one_gate(variant: str, db: Path, out: Path) -> dict[str, Any]:
    """CPU seconds of one gate process (its own, its kernel's, both), and its exit code."""
    args = ["gate", "baseline", "candidate", "--db", str(db), "--config", str(CONFIG),
            "--out", str(out)]  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", GATE, variant, BEFORE, *args],
        capture_output=True, text=True, timeout=600, cwd=out.parent,
    )  # fmt: skip
    line = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
    try:
        figures = json.loads(line)
    except json.JSONDecodeError as exc:
        message = f"the gate process failed (exit {done.returncode}):\n{done.stderr}"
        raise SystemExit(message) from exc
    return figures | {"tree": figures["cli"] + figures["kernel"]}


def measure(rounds: int, db: Path | None) -> dict[str, Any]:
    """Before and after, alternating, ``rounds`` times each; medians and every sample."""
    with tempfile.TemporaryDirectory(prefix="bench-gate-") as tmp:
        folder = Path(tmp)
        store = db or demo_store(folder)
        load = [os.getloadavg()[0]]
        samples: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
        for i in range(rounds):
            for variant in ("before", "after") if i % 2 == 0 else ("after", "before"):
                samples[variant].append(one_gate(variant, store, folder / "reports"))
        load.append(os.getloadavg()[0])
    medians = {
        variant: {key: statistics.median(s[key] for s in runs) for key in ("cli", "kernel", "tree")}
        for variant, runs in samples.items()
    }
    codes = {variant: sorted({s["code"] for s in runs}) for variant, runs in samples.items()}
    return {"rounds": rounds, "load_1min": load, "cores": os.cpu_count(), "medians": medians,
            "exit_codes": codes, "samples": samples}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=3, help="gates per variant (median)")
    parser.add_argument("--db", type=Path, help="a store with runs 'baseline' and 'candidate'")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    args = parser.parse_args(argv)
    figures = measure(args.rounds, args.db.resolve() if args.db else None)
    load = figures["load_1min"]
    print(f"evalkit gate on the demo store, CPU seconds (user+sys), median of {args.rounds}; "
          f"load {load[0]:.1f} -> {load[1]:.1f} on {figures['cores']} cores")  # fmt: skip
    print(f"{'':8} {'CLI':>6} {'kernel':>7} {'tree':>6}   exit codes")
    for variant in ("before", "after"):
        m = figures["medians"][variant]
        print(f"{variant:8} {m['cli']:6.2f} {m['kernel']:7.2f} {m['tree']:6.2f}   "
              f"{figures['exit_codes'][variant]}")  # fmt: skip
    b, a = figures["medians"]["before"]["tree"], figures["medians"]["after"]["tree"]
    print(f"after / before: {a / b:.3f} ({b - a:+.2f} s of CPU less per gate)")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

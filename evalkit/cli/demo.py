"""``evalkit demo run`` (``demo serve`` hands its flags to the simulator's own parser)."""

from __future__ import annotations

import argparse
from pathlib import Path

from evalkit.cli.run import print_run_summary

#: The checkout evalkit runs from: the demo's notebooks and labels live there.
REPO = Path(__file__).resolve().parents[2]


def add_parsers(sub: argparse._SubParsersAction) -> None:
    demo = sub.add_parser("demo", help="the demo simulator (`evalkit demo serve --port P`)")
    demo_sub = demo.add_subparsers(dest="demo_command")
    demo_sub.add_parser("serve", help="serve the simulated support assistant on 127.0.0.1")
    demo_run = demo_sub.add_parser("run", help="the whole demo: baseline, candidate, gate")
    demo_run.add_argument(
        "--config",
        dest="demo_config",  # not the project lookup of other commands: the demo has its own
        help="suite config (default: the demo corpus shipped with evalkit)",
    )
    demo_run.add_argument("--db", default="data/demo.duckdb")
    demo_run.add_argument("--out", default="reports")
    demo_run.add_argument("--no-gate", action="store_true", help="stop after the two runs")
    demo_run.add_argument("--no-progress", action="store_true")
    demo_run.set_defaults(handler=_cmd_demo_run)


def _cmd_demo_run(args: argparse.Namespace) -> int:
    from evalkit.demo.run import run_demo

    print("evalkit demo: the system under test is a SIMULATOR (rule-based, not an LLM)")
    result = run_demo(
        args.demo_config, args.db, args.out, progress=not args.no_progress, gate=not args.no_gate
    )
    print_run_summary(result.baseline, str(result.db_path))
    print_run_summary(result.candidate, str(result.db_path))
    if result.gate_exit_code is not None:
        verdict = result.gate_status or {0: "PASSED"}.get(result.gate_exit_code, "FAILED TO RUN")
        print(f"gate: {verdict} — report: {result.report_path}")
        if result.gate_exit_code not in (0, 1):
            return result.gate_exit_code
    print(
        f"explore: evalkit compare baseline candidate --db {result.db_path}, or open "
        f"{REPO / 'notebooks' / 'slices.ipynb'}"
    )
    print(
        "judged cases use a SIMULATED judge (demo-judge-1), reported, not gated, until "
        f"calibrated: evalkit labels import {REPO / 'data' / 'labels' / 'demo_reply_tone.csv'} "
        f"--db {result.db_path} --run baseline && evalkit judges calibrate --run baseline "
        f"--db {result.db_path}"
    )
    return 0

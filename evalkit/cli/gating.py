"""``evalkit compare``, ``gate`` and ``override``."""

from __future__ import annotations

import argparse
from pathlib import Path

from evalkit.cli.options import DEFAULT_CONFIG, db_arg, pair_args
from evalkit.errors import EvalkitError


def add_parsers(sub: argparse._SubParsersAction) -> None:
    compare = sub.add_parser("compare", help="paired comparison report of two runs")
    pair_args(compare)
    compare.add_argument("--json", metavar="FILE", help="write the report as JSON")
    compare.add_argument("--junit", metavar="FILE", help="write JUnit XML")
    compare.add_argument("--html", metavar="FILE", help="write the report as HTML")
    compare.set_defaults(handler=_cmd_compare)

    gate = sub.add_parser("gate", help="execute the gate notebook; exit 1 when blocked")
    pair_args(gate)
    gate.add_argument("--out", default="reports", help="reports directory")
    gate.set_defaults(handler=_cmd_gate)

    override = sub.add_parser("override", help="record a gate override with a written reason")
    db_arg(override)
    override.add_argument("baseline")
    override.add_argument("candidate")
    override.add_argument("--who", required=True)
    override.add_argument("--reason", required=True)
    override.set_defaults(handler=_cmd_override)


def _gate_config(args: argparse.Namespace) -> str | None:
    """The suite config holding the gate policy; without one, the default policy applies."""
    if args.config == DEFAULT_CONFIG and not Path(args.config).is_file():
        return None
    return args.config


def _cmd_compare(args: argparse.Namespace) -> int:
    from evalkit.compare.analysis import load_comparison
    from evalkit.compare.gate import gate_comparison, load_policy
    from evalkit.compare.report import build_report, render_terminal, to_html, to_json, to_junit
    from evalkit.store import open_store

    policy = load_policy(_gate_config(args))
    with open_store(args.db, read_only=True, wait_s=args.wait) as store:
        comparison = load_comparison(
            store, args.baseline, args.candidate, args.allow_diff, policy.judge_kappa_min
        )
        policy.validate_against(comparison.cand.cases)
        report = build_report(comparison, gate_comparison(store, comparison, policy))
    render_terminal(report)
    for path, render in ((args.json, to_json), (args.junit, to_junit), (args.html, to_html)):
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(render(report), encoding="utf-8")
            print(f"wrote {path}")
    return 0


def _cmd_gate(args: argparse.Namespace) -> int:
    from evalkit.notebooks import execute_gate

    run = execute_gate(
        args.db, args.baseline, args.candidate, _gate_config(args), args.out, args.allow_diff
    )
    if run.exit_code == 2:
        raise EvalkitError(run.error or "the gate could not run")
    decision = run.decision or {}
    print(f"gate {decision.get('status', '?')}: {args.baseline} → {args.candidate}")
    for finding in decision.get("findings", []):
        if finding["severity"] == "block":
            print(f"  BLOCK tier {finding['tier']}: {finding['message']}")
    for override in decision.get("overrides", []):
        print(f"  override by {override['who']}: {override['reason']}")
    print(f"report: {run.html_path} (notebook {run.notebook_path})")
    return run.exit_code


def _cmd_override(args: argparse.Namespace) -> int:
    from evalkit.store import open_store

    with open_store(args.db, wait_s=args.wait) as store:
        base = store.resolve_run(args.baseline)
        cand = store.resolve_run(args.candidate)
        store.save_override(base, cand, args.who, args.reason)
    print(f"override recorded for {base} → {cand} by {args.who}: {args.reason}")
    return 0

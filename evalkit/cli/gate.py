"""``evalkit gate`` (the gate notebook executed: exit 1 when blocked) and ``override`` (a person
accepts a blocked pair's current blocking findings, with who and why)."""

from __future__ import annotations

import argparse

from evalkit.cli.compare import decide_pair, gate_config, log_decision
from evalkit.cli.options import pair_args, pair_refs
from evalkit.cli.reask import add_reask_args, maybe_reask
from evalkit.cli.rebaseline import add_rebaseline_args, maybe_rebaseline
from evalkit.errors import EvalkitError


def add_parsers(sub: argparse._SubParsersAction) -> None:
    gate = sub.add_parser("gate", help="execute the gate notebook; exit 1 when blocked")
    pair_args(gate)
    gate.add_argument("--out", default="reports", help="reports directory")
    gate.add_argument(
        "--markdown", metavar="FILE", help="also copy the Markdown report (gate.md) to FILE"
    )
    add_rebaseline_args(gate)
    add_reask_args(gate)
    gate.set_defaults(handler=_cmd_gate)

    override = sub.add_parser(
        "override",
        help="accept the current blocking findings of a blocked pair, with who and why",
    )
    pair_args(override)
    override.add_argument("--who", required=True, help="who takes the decision")
    override.add_argument("--reason", required=True, help="why shipping despite it is right")
    override.set_defaults(handler=_cmd_override)


def _cmd_gate(args: argparse.Namespace) -> int:
    from evalkit.compare.pairing import require_complete, require_tier, resolve_pair
    from evalkit.notebooks import execute_gate
    from evalkit.store import open_store

    with open_store(args.db, read_only=True, wait_s=args.wait) as store:
        base, cand = resolve_pair(store, *pair_refs(args))
        require_tier(store, (base, cand), args.tier)
        for run_id, role in ((base, "baseline"), (cand, "candidate")):
            require_complete(store, run_id, role, args.allow_incomplete, args.db)
    maybe_rebaseline(args, base, cand)
    maybe_reask(args, base, cand)
    run = execute_gate(
        args.db, base, cand, gate_config(args), args.out, args.allow_diff, tier=args.tier,
        allow_incomplete=args.allow_incomplete,
    )  # fmt: skip
    if run.exit_code == 2:
        raise EvalkitError(run.error or "the gate could not run")
    if run.decision is not None:
        log_decision(args, "gate", base, cand, run.decision)
    from evalkit.report.formatting import inert  # model text never drives the terminal

    decision = run.decision or {}
    print(f"gate {decision.get('status', '?')}: {base} → {cand}")
    if decision.get("exam_line"):  # what it was judged on: the exam the baseline pinned
        print(f"  {inert(decision['exam_line'])}")
    for finding in decision.get("findings", []):
        if finding["severity"] in ("block", "unverified"):
            what = inert(finding["message"])
            print(f"  {finding['severity'].upper()} tier {finding['tier']}: {what}")
    for override in decision.get("overrides", []):
        print(f"  override by {inert(override['who'])}: {inert(override['reason'])}")
    markdown = run.notebook_path.with_name("gate.md")
    if args.markdown and markdown.is_file():
        from evalkit.cli.report_files import write_report

        write_report(args.markdown, markdown.read_text(encoding="utf-8"))
        print(f"wrote {args.markdown}")
    print(f"report: {run.html_path} (notebook {run.notebook_path})")
    return run.exit_code


def _cmd_override(args: argparse.Namespace) -> int:
    from evalkit.store import open_store

    with open_store(args.db, wait_s=args.wait, write=True) as store:
        comparison, decision = decide_pair(store, args)
        base, cand = comparison.base.run_id, comparison.cand.run_id
        if not decision.uncovered:
            raise EvalkitError(
                f"{base} → {cand} is {decision.status}: there is no blocking finding to override"
            )
        store.save_override(base, cand, args.who, args.reason, decision.uncovered)
    print(f"override recorded for {base} → {cand} by {args.who}: {args.reason}")
    for key in decision.uncovered:
        print(f"  accepts {key}")
    print("  a different blocking finding on this pair still blocks")
    return 0

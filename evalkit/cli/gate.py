"""``evalkit compare``, ``gate`` and ``override``."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from evalkit.cli.options import DEFAULT_CONFIG, pair_args, pair_refs
from evalkit.cli.reask import add_reask_args, maybe_reask
from evalkit.cli.rebaseline import add_rebaseline_args, maybe_rebaseline
from evalkit.errors import EvalkitError

if TYPE_CHECKING:
    from evalkit.compare.analysis import Comparison
    from evalkit.compare.decision import GateDecision
    from evalkit.store import Store


def add_parsers(sub: argparse._SubParsersAction) -> None:
    compare = sub.add_parser("compare", help="paired comparison report of two runs")
    pair_args(compare)
    compare.add_argument("--json", metavar="FILE", help="write the report as JSON")
    compare.add_argument("--junit", metavar="FILE", help="write JUnit XML")
    compare.add_argument("--html", metavar="FILE", help="write the report as HTML")
    compare.add_argument("--markdown", metavar="FILE", help="write the pull-request Markdown")
    add_rebaseline_args(compare)
    add_reask_args(compare)
    compare.add_argument(
        "--transfer", action="store_true",
        help="say whether the live gains transfer to the sealed cases (both runs ran --sealed)",
    )  # fmt: skip
    compare.set_defaults(handler=_cmd_compare)

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


def _gate_config(args: argparse.Namespace) -> str | None:
    """The suite config holding the gate policy; without one, the default policy applies."""
    if args.config == DEFAULT_CONFIG and not Path(args.config).is_file():
        return None
    return args.config


def _decide_pair(store: Store, args: argparse.Namespace) -> tuple[Comparison, GateDecision]:
    """The checked pair's comparison and gate decision against the pin (refusals raise
    one-line errors): `evalkit.compare.pin.gate_pair`, as the gate notebook calls it."""
    from evalkit.compare.pin import gate_pair

    return gate_pair(
        store, *pair_refs(args), _gate_config(args), args.allow_diff, tier=args.tier,
        allow_incomplete=args.allow_incomplete, db=args.db,
    )  # fmt: skip


def _cmd_compare(args: argparse.Namespace) -> int:
    from evalkit.compare.html import to_html
    from evalkit.compare.junit import to_junit
    from evalkit.compare.markdown import to_markdown
    from evalkit.compare.pairing import resolve_pair
    from evalkit.compare.report import build_report, render_terminal, to_json
    from evalkit.store import open_store

    if args.rebaseline:
        with open_store(args.db, read_only=True, wait_s=args.wait) as store:
            pair = resolve_pair(store, *pair_refs(args))
        maybe_rebaseline(args, *pair)
    if args.reask_flakes:
        with open_store(args.db, read_only=True, wait_s=args.wait) as store:
            pair = resolve_pair(store, *pair_refs(args))
        maybe_reask(args, *pair)
    with open_store(args.db, read_only=True, wait_s=args.wait) as store:
        comparison, decision = _decide_pair(store, args)
        report = dataclasses.replace(build_report(comparison, decision), command="compare")
    render_terminal(report)
    if args.transfer:
        from evalkit.cli.sealing import print_transfer

        print_transfer(comparison, decision)
    link = Path(args.html).name if args.html else None
    renderers = ((args.json, to_json), (args.junit, to_junit), (args.html, to_html),
                 (args.markdown, lambda r: to_markdown(r, link)))  # fmt: skip
    for path, render in renderers:
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(render(report), encoding="utf-8")
            print(f"wrote {path}")
    return 0


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
        args.db, base, cand, _gate_config(args), args.out, args.allow_diff, tier=args.tier,
        allow_incomplete=args.allow_incomplete,
    )  # fmt: skip
    if run.exit_code == 2:
        raise EvalkitError(run.error or "the gate could not run")
    from evalkit.compare.formatting import inert  # model text never drives the terminal

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
        Path(args.markdown).parent.mkdir(parents=True, exist_ok=True)
        Path(args.markdown).write_text(markdown.read_text(encoding="utf-8"), encoding="utf-8")
        print(f"wrote {args.markdown}")
    print(f"report: {run.html_path} (notebook {run.notebook_path})")
    return run.exit_code


def _cmd_override(args: argparse.Namespace) -> int:
    from evalkit.store import open_store

    with open_store(args.db, wait_s=args.wait, write=True) as store:
        comparison, decision = _decide_pair(store, args)
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

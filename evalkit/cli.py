"""The ``evalkit`` command. Each subcommand is a thin call into the package.

Exit codes: 0 success, 1 gate blocked, 2 usage / config / corpus errors (one line, no traceback).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from evalkit.errors import EvalkitError

DEFAULT_CONFIG = "corpus/evalkit.yaml"
DEFAULT_DB = "data/evalkit.duckdb"


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:2] == ["demo", "serve"]:
        # The simulator owns its flags; hand them over untouched.
        from evalkit.demo.server import main as serve

        return serve(args_list[2:]) or 0
    parser = _parser()
    args = parser.parse_args(args_list)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        return int(args.handler(args) or 0)
    except EvalkitError as exc:
        message = " ".join(str(exc).split())  # always one line, whatever the input held
        if len(message) > 1000:
            message = message[:997] + "..."
        print(f"evalkit: error: {message}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("evalkit: interrupted", file=sys.stderr)
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="evalkit", description="Paired, per-slice regression testing for LLM applications."
    )
    sub = parser.add_subparsers(dest="command")

    run = sub.add_parser("run", help="run the corpus through the system under test")
    _suite_args(run)
    _db_arg(run)
    run.add_argument("--label", default="run", help="a name for this run (e.g. baseline)")
    run.add_argument("--tag", action="append", default=[], help="only cases with this tag")
    run.add_argument("--exclude-tag", action="append", default=[], help="skip cases with this tag")
    run.add_argument("--sealed", action="store_true", help="include corpus/sealed/ cases")
    run.add_argument("--replays", type=int, help="replays per case (default: suite config)")
    run.add_argument("--concurrency", type=int, help="concurrent requests (default: suite)")
    run.add_argument("--no-cache", action="store_true", help="bypass the response cache")
    run.add_argument("--resume", metavar="RUN_ID", help="continue an interrupted run")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.add_argument("--json", metavar="FILE", help="write the run summary as JSON")
    run.set_defaults(handler=_cmd_run)

    cases = sub.add_parser("cases", help="corpus tools")
    cases_sub = cases.add_subparsers(dest="cases_command")
    lint = cases_sub.add_parser("lint", help="validate every case and print corpus statistics")
    _suite_args(lint)
    lint.add_argument("--sealed", action="store_true", help="include corpus/sealed/")
    lint.set_defaults(handler=_cmd_lint)

    runs = sub.add_parser("runs", help="list stored runs")
    _db_arg(runs)
    runs.set_defaults(handler=_cmd_runs)

    compare = sub.add_parser("compare", help="paired comparison report of two runs")
    _pair_args(compare)
    compare.add_argument("--json", metavar="FILE", help="write the report as JSON")
    compare.add_argument("--junit", metavar="FILE", help="write JUnit XML")
    compare.add_argument("--html", metavar="FILE", help="write the report as HTML")
    compare.set_defaults(handler=_cmd_compare)

    gate = sub.add_parser("gate", help="execute the gate notebook; exit 1 when blocked")
    _pair_args(gate)
    gate.add_argument("--out", default="reports", help="reports directory")
    gate.set_defaults(handler=_cmd_gate)

    override = sub.add_parser("override", help="record a gate override with a written reason")
    _db_arg(override)
    override.add_argument("baseline")
    override.add_argument("candidate")
    override.add_argument("--who", required=True)
    override.add_argument("--reason", required=True)
    override.set_defaults(handler=_cmd_override)

    rescore = sub.add_parser("rescore", help="re-apply current scorers to stored outputs")
    _suite_args(rescore)
    _db_arg(rescore)
    rescore.add_argument("run", help="run id or label")
    rescore.add_argument(
        "--scorer", action="append", default=[], help="recompute only this scorer (repeatable)"
    )
    rescore.set_defaults(handler=_cmd_rescore)

    flakes = sub.add_parser("flakes", help="rerun one configuration k times; store the flake list")
    _suite_args(flakes)
    _db_arg(flakes)
    flakes.add_argument("--runs", type=int, default=5, help="how many uncached runs (k)")
    flakes.add_argument("--tag", action="append", default=[], help="only cases with this tag")
    flakes.add_argument("--no-progress", action="store_true")
    flakes.set_defaults(handler=_cmd_flakes)

    _judge_parsers(sub)

    demo = sub.add_parser("demo", help="the demo simulator (`evalkit demo serve --port P`)")
    demo_sub = demo.add_subparsers(dest="demo_command")
    demo_sub.add_parser("serve", help="serve the simulated support assistant on 127.0.0.1")
    demo_run = demo_sub.add_parser("run", help="the whole demo: baseline, candidate, gate")
    demo_run.add_argument("--config", default=DEFAULT_CONFIG)
    demo_run.add_argument("--db", default="data/demo.duckdb")
    demo_run.add_argument("--out", default="reports")
    demo_run.add_argument("--no-gate", action="store_true", help="stop after the two runs")
    demo_run.add_argument("--no-progress", action="store_true")
    demo_run.set_defaults(handler=_cmd_demo_run)
    return parser


def _suite_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default=DEFAULT_CONFIG, help="suite config (evalkit.yaml)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value, e.g. --set system.model=gpt-4.1-mini",
    )
    parser.add_argument("--prompt", help="system prompt file (overrides system.prompt)")


def _db_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", default=DEFAULT_DB, help="DuckDB file")
    parser.add_argument("--wait", type=float, default=0.0, help="seconds to wait for a DB lock")


def _pair_args(parser: argparse.ArgumentParser) -> None:
    _db_arg(parser)
    parser.add_argument("baseline", help="baseline run id or label")
    parser.add_argument("candidate", help="candidate run id or label")
    parser.add_argument("--config", default=DEFAULT_CONFIG, help="suite config (gate policy)")
    parser.add_argument(
        "--allow-diff",
        action="append",
        default=[],
        metavar="FIELD",
        help="a manifest field that may differ (the variable under test)",
    )


# --- handlers ------------------------------------------------------------------------------


def _cmd_run(args: argparse.Namespace) -> int:
    from evalkit.corpus.cases import load_corpus
    from evalkit.corpus.suite import load_suite
    from evalkit.run.runner import RunOptions, run_suite
    from evalkit.store import open_store

    suite = load_suite(args.config, overrides=args.overrides, prompt=args.prompt)
    corpus = load_corpus(
        suite.root, sealed=args.sealed, user_template=suite.config.system.user_template
    )
    selection = {
        "tags": sorted(args.tag),
        "exclude_tags": sorted(args.exclude_tag),
        "sealed": args.sealed,
    }
    corpus = corpus.select(tags=args.tag, exclude_tags=args.exclude_tag)
    if not corpus.cases:
        raise EvalkitError("no cases selected (check --tag / --exclude-tag)")
    options = RunOptions(
        label=args.label,
        replays=args.replays,
        concurrency=args.concurrency,
        use_cache=False if args.no_cache else None,
        progress=not args.no_progress,
        resume=args.resume,
        selection=selection,
    )
    with open_store(args.db, wait_s=args.wait) as store:
        summary = run_suite(suite, corpus, store, options)
    _print_run_summary(summary, args.db)
    if args.json:
        Path(args.json).write_text(json.dumps(summary.to_dict(), indent=2))
    return 0


def _print_run_summary(summary, db: str) -> None:
    from rich.console import Console

    console = Console(highlight=False, soft_wrap=True)
    scored = summary.passed + summary.failed
    rate = f"{summary.passed / scored:.1%}" if scored else "n/a"
    console.print(
        f"[bold]{summary.label}[/] run {summary.run_id}: {summary.cases} cases, "
        f"{summary.outputs} outputs — passed {summary.passed}, failed {summary.failed}, "
        f"errors {summary.errored} (pass rate {rate} of scored outputs)"
    )
    console.print(
        f"  requests {summary.requests} (retries {summary.retries}), cache hits "
        f"{summary.cache_hits}, resumed-skipped {summary.resumed_skipped}; "
        f"wall {summary.wall_s:.2f}s, "
        f"mean latency {summary.mean_latency_ms:.0f} ms, tokens {summary.prompt_tokens}+"
        f"{summary.completion_tokens}, cost ${summary.cost_usd:.4f}"
    )
    console.print(f"  stored in {db} (config {summary.config_hash[:12]})")


def _cmd_lint(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from evalkit.corpus.cases import MIN_CRITICAL_CASES, load_corpus
    from evalkit.corpus.suite import load_suite

    suite = load_suite(args.config, overrides=args.overrides, prompt=args.prompt)
    corpus = load_corpus(suite.root, sealed=True, user_template=suite.config.system.user_template)
    stats = corpus.stats(suite.config.critical_tags)
    console = Console(highlight=False)
    console.print(
        f"[bold]{suite.config.suite}[/]: {stats.n_cases} cases ({stats.sealed} sealed), "
        f"corpus hash {corpus.hash[:12]}"
    )
    table = Table("tag", "cases", "critical")
    for tag, count in sorted(stats.per_tag.items(), key=lambda kv: (-kv[1], kv[0])):
        table.add_row(tag, str(count), "yes" if tag in suite.config.critical_tags else "")
    console.print(table)
    console.print("criticality: " + ", ".join(f"{k} {v}" for k, v in stats.per_criticality.items()))
    for tag, count in stats.thin_critical_tags.items():
        console.print(
            f"[yellow]warning[/]: critical tag {tag!r} has {count} cases (< {MIN_CRITICAL_CASES}): "
            "it cannot gate; add cases or drop it from critical_tags"
        )
    return 2 if stats.thin_critical_tags else 0


def _cmd_runs(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from evalkit.store import open_store

    with open_store(args.db, read_only=True, wait_s=args.wait) as store:
        runs = store.runs()
    table = Table("run_id", "label", "created_at", "status", "config")
    for row in runs.iter_rows(named=True):
        table.add_row(
            row["run_id"],
            row["label"],
            str(row["created_at"])[:19],
            row["status"],
            row["config_hash"][:12],
        )
    Console().print(table)
    return 0


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


def _cmd_rescore(args: argparse.Namespace) -> int:
    from evalkit.corpus.cases import load_corpus
    from evalkit.corpus.suite import load_suite
    from evalkit.run.rescore import rescore_run
    from evalkit.run.runner import judge_client
    from evalkit.scorers.registry import JUDGE
    from evalkit.store import open_store

    suite = load_suite(args.config, overrides=args.overrides, prompt=args.prompt)
    corpus = load_corpus(suite.root, sealed=True, user_template=suite.config.system.user_template)
    with open_store(args.db, wait_s=args.wait) as store:
        judged = any(s.tier == JUDGE for case in corpus.cases for s in case.scorers)
        judge = judge_client(suite, store) if judged and suite.config.judge else None
        result = rescore_run(store, corpus, args.run, scorers=args.scorer, judge=judge)
    print(
        f"rescored {result.rescored} outputs of {result.run_id} with zero model calls "
        f"→ scoring {result.scoring_id} ({result.carried} scores carried over)"
    )
    for case_id in result.skipped_input_changed:
        print(f"  skipped {case_id}: its input changed since the run (re-run it)")
    return 0


def _cmd_flakes(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from evalkit.compare.flakes import measure_flakes
    from evalkit.corpus.cases import load_corpus
    from evalkit.corpus.suite import load_suite
    from evalkit.store import open_store

    suite = load_suite(args.config, overrides=args.overrides, prompt=args.prompt)
    corpus = load_corpus(suite.root, user_template=suite.config.system.user_template)
    corpus = corpus.select(tags=args.tag)
    with open_store(args.db, wait_s=args.wait) as store:
        result = measure_flakes(suite, corpus, store, runs=args.runs, progress=not args.no_progress)
    console = Console(highlight=False)
    console.print(
        f"{args.runs} uncached runs of config {result.config_hash[:12]}: "
        f"{result.flaky.height} of {result.per_case.height} cases changed verdict with nothing "
        "changed"
    )
    table = Table("tag", "cases", "flaky", "flake rate")
    for row in result.per_slice.iter_rows(named=True):
        table.add_row(row["tag"], str(row["cases"]), str(row["flaky"]), f"{row['flake_rate']:.1%}")
    console.print(table)
    for row in result.flaky.iter_rows(named=True):
        console.print(f"  noisy: {row['case_id']} ({row['flips']}/{row['runs']} runs disagree)")
    return 0


def _cmd_demo_run(args: argparse.Namespace) -> int:
    from evalkit.demo.run import run_demo

    print("evalkit demo: the system under test is a SIMULATOR (rule-based, not an LLM)")
    result = run_demo(
        args.config, args.db, args.out, progress=not args.no_progress, gate=not args.no_gate
    )
    _print_run_summary(result.baseline, str(result.db_path))
    _print_run_summary(result.candidate, str(result.db_path))
    if result.gate_exit_code is not None:
        verdict = {0: "PASSED", 1: "BLOCKED"}.get(result.gate_exit_code, "FAILED TO RUN")
        print(f"gate: {verdict} — report: {result.report_path}")
        if result.gate_exit_code not in (0, 1):
            return result.gate_exit_code
    print(
        f"explore: evalkit compare baseline candidate --db {result.db_path}, or open "
        "notebooks/slices.ipynb"
    )
    print(
        "judged cases use a SIMULATED judge (demo-judge-1), reported, not gated, until "
        "calibrated: evalkit labels import data/labels/demo_reply_tone.csv "
        f"--db {result.db_path} --run baseline && evalkit calibrate --run baseline "
        f"--db {result.db_path}"
    )
    return 0


def _cmd_override(args: argparse.Namespace) -> int:
    from evalkit.store import open_store

    with open_store(args.db, wait_s=args.wait) as store:
        base = store.resolve_run(args.baseline)
        cand = store.resolve_run(args.candidate)
        store.save_override(base, cand, args.who, args.reason)
    print(f"override recorded for {base} → {cand} by {args.who}: {args.reason}")
    return 0


# --- judges: human labels, calibration, pairwise judging -------------------------------------


def _judge_parsers(sub: argparse._SubParsersAction) -> None:
    labels = sub.add_parser("labels", help="human labels for judge calibration")
    labels_sub = labels.add_subparsers(dest="labels_command")
    imp = labels_sub.add_parser(
        "import",
        help="import a CSV/JSONL of human labels (case_id or output_hash, rater, label, scorer)",
    )
    _db_arg(imp)
    imp.add_argument("file", help="a .csv or .jsonl label file")
    imp.add_argument("--run", help="pin case-level labels to this run's outputs (replay 0)")
    imp.set_defaults(handler=_cmd_labels_import)

    calibrate = sub.add_parser(
        "calibrate", help="judge-human agreement of a run's judge; stores a calibration record"
    )
    _db_arg(calibrate)
    calibrate.add_argument("--run", required=True, help="run id or label")
    calibrate.add_argument("--scorer", default="judge", help="the judge scorer (default: judge)")
    calibrate.add_argument("--rubric", help="rubric file (needed if the run used several)")
    calibrate.add_argument("--level", type=float, default=0.95, help="interval level")
    calibrate.add_argument(
        "--binary", action="store_true", help="compare pass/fail instead of score levels"
    )
    calibrate.set_defaults(handler=_cmd_calibrate)

    pairs = sub.add_parser(
        "judge-pairs", help="judge each paired case of two runs in both orders (position bias)"
    )
    _db_arg(pairs)
    pairs.add_argument("baseline", help="baseline run id or label")
    pairs.add_argument("candidate", help="candidate run id or label")
    pairs.add_argument("--rubric", required=True, help="rubric file (or relative to the corpus)")
    pairs.add_argument("--config", default=DEFAULT_CONFIG, help="suite config (its judge:)")
    pairs.add_argument("--set", dest="overrides", action="append", default=[], metavar="K=V")
    pairs.add_argument("--no-cache", action="store_true", help="ask the judge again")
    pairs.set_defaults(handler=_cmd_judge_pairs)


def _cmd_labels_import(args: argparse.Namespace) -> int:
    from evalkit.judges.labels import import_labels
    from evalkit.store import open_store

    with open_store(args.db, wait_s=args.wait) as store:
        result = import_labels(store, args.file, run=args.run)
    pinned = f", pinned to run {result.run_id}" if result.run_id else ""
    print(
        f"imported {result.labels} labels from {result.source} ({len(result.raters)} raters, "
        f"{result.items} items, scorer {', '.join(result.scorers)}{pinned}): {result.new} new, "
        f"{result.replaced} replaced"
    )
    return 0


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from rich.console import Console

    from evalkit.judges.calibration import calibrate
    from evalkit.store import open_store

    if not 0 < args.level < 1:
        raise EvalkitError(f"--level {args.level}: expected a fraction such as 0.95")
    rubric = Path(args.rubric) if args.rubric else None
    if rubric is not None and not rubric.is_file():
        raise EvalkitError(f"--rubric {rubric}: no such file")
    with open_store(args.db, wait_s=args.wait) as store:
        result = calibrate(
            store, args.run, scorer=args.scorer, rubric=rubric, binary=args.binary, level=args.level
        )
    Console(highlight=False, soft_wrap=True).print(result)
    print(f"calibration record stored in {args.db}")
    return 0


def _cmd_judge_pairs(args: argparse.Namespace) -> int:
    from rich.console import Console

    from evalkit.corpus.suite import load_suite
    from evalkit.judges.pairwise import judge_pairs
    from evalkit.store import open_store

    suite = load_suite(args.config, overrides=args.overrides)
    with open_store(args.db, wait_s=args.wait) as store:
        result = judge_pairs(
            store, suite, args.baseline, args.candidate, args.rubric, use_cache=not args.no_cache
        )
    Console(highlight=False, soft_wrap=True).print(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``evalkit history``: pass rates, unstable cases, cost and served model across runs."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from evalkit.cli.options import db_arg

if TYPE_CHECKING:
    from evalkit.trends.analysis import History, HistoryPoint


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not at least 1")
    return value


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Add this group's subcommands to ``evalkit``."""
    parser = sub.add_parser(
        "history",
        help="pass rate per tag with intervals, unstable and flaky cases, cost, latency and "
        "served model, per promoted baseline or per label over time",
    )
    db_arg(parser)
    parser.add_argument("--tag", help="only the cases carrying this tag")
    parser.add_argument("--label", help="only the runs with this label (e.g. nightly)")
    parser.add_argument(
        "--last", type=_positive, metavar="N", help="the newest N points of each series"
    )
    parser.add_argument(
        "--by",
        choices=("baseline", "label"),
        default="baseline",
        help="a point per promoted baseline of each suite, or per complete run of each label",
    )
    parser.add_argument(
        "--trend-runs",
        type=_positive,
        default=10,
        metavar="K",
        help="points per window of the 'unstable cases are growing' test (windows do not "
        "overlap; each is tested once, when complete)",
    )
    parser.add_argument(
        "--trend-horizon",
        type=_positive,
        default=30,
        metavar="H",
        help="runs over which a steady series raises that warning at most 5%% of the time "
        "(each window is tested at 0.05 x K / H)",
    )
    parser.add_argument("--format", choices=("table", "json"), default="table")
    parser.set_defaults(handler=_cmd_history)


def _cmd_history(args: argparse.Namespace) -> int:
    from evalkit.store import open_store
    from evalkit.trends.analysis import history

    store = open_store(args.db, read_only=True, wait_s=args.wait)
    try:
        result = history(
            store,
            tag=args.tag,
            last=args.last,
            by=args.by,
            label=args.label,
            trend_runs=args.trend_runs,
            horizon=max(args.trend_horizon, args.trend_runs),
        )
    finally:
        store.close()
    if args.format == "json":
        print(json.dumps(result.to_dict(), indent=2, default=str))
    else:
        print(render_table(result))
    return 0


def _pct(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.1%}"


def _cell(point: HistoryPoint, tag: str) -> str:
    rate = point.rate(tag)
    if rate is None or rate.rate is None:
        return "-"
    return f"{_pct(rate.rate)} [{_pct(rate.lo)}, {_pct(rate.hi)}] n={rate.decided}"


def render_table(result: History) -> str:
    """The history as text: per series a line per point, then the findings."""
    if not result.points:
        hint = (
            "no promoted baseline (`evalkit baseline promote RUN`); --by label follows runs"
            if result.by == "baseline"
            else "no complete run"
        )
        return f"history: {hint}"

    tags = ["ALL"] + [t for t in ((result.tag,) if result.tag else result.critical_tags) if t]
    lines = [
        f"pass rate ({result.rate_basis}) [Wilson {result.level:.0%} interval] n=decided cases; "
        "the rate `evalkit run` and `evalkit runs list` state"
    ]
    before: dict[str, str | None] = {}
    for point in result.points:
        if point.series not in before:
            bases = {p.rate_basis for p in result.points if p.series == point.series}
            mixed = len({p.rate_basis for p in result.points}) > 1 and len(bases) == 1
            basis = f" (pass rate {bases.pop()})" if mixed else ""
            lines.append(f"\n{result.by} {point.series}{basis}:")
            lines.append(
                "  when              run                       "
                + "".join(f"{t[:30]:<34}" for t in tags)
                + "unstable  flaky  latency_ms  cost/case  model"
            )
        model = point.served_model or "-"
        changed = point.series in before and before[point.series] != point.served_model
        before[point.series] = point.served_model
        latency = "-" if point.mean_latency_ms is None else f"{point.mean_latency_ms:.0f}"
        cost = "-" if point.mean_cost_usd is None else f"{point.mean_cost_usd:.5f}"
        flaky = "-" if point.flaky is None else str(point.flaky)
        lines.append(
            f"  {str(point.at)[:16]:<17} {point.run_id[:25]:<25} "
            + "".join(f"{_cell(point, t):<34}" for t in tags)
            + f"{point.unstable:<9} {flaky:<6} {latency:<11} {cost:<10} "
            + f"{model}{'  (changed)' if changed else ''}"
        )
    for finding in result.findings:
        lines.append(f"{finding.severity}: {finding.message}")
    lines += reuse_lines(result)
    return "\n".join(lines)


def reuse_lines(result: History, limit: int = 5) -> list[str]:
    """Per baseline and pinned exam, the gate decisions taken against it (most recent first).

    Examples:
        >>> from evalkit.trends.values import GateReuse, History
        >>> r = GateReuse(base_run_id="base-1", exam_id="e1", corpus_hash="c0ffee", n_cases=40,
        ...     gates=2, stopped=1, sealed_gates=0, first_at=None, last_at=None)
        >>> history = History(by="baseline", tag=None, points=(), trends=(), findings=(),
        ...     alpha=0.05, level=0.95, reuse=(r,))
        >>> print(reuse_lines(history)[1])
          base-1 (exam e1, corpus c0ffee, 40 cases): 2 gate decisions (1 stopped), 0 with ...
    """
    if not result.reuse:
        return []
    lines = [
        "\nadaptive reuse — gate decisions taken against each baseline's exam (each one more "
        "look at the same cases; rotate the sealed slice and re-sample on a schedule):"
    ]
    for r in result.reuse[:limit]:
        about = [f"exam {r.exam_id[:12]}" if r.exam_id else "no pinned exam"]
        about += [f"corpus {r.corpus_hash[:12]}"] if r.corpus_hash else []
        about += [f"{r.n_cases} cases"] if r.n_cases is not None else []
        decisions = f"{r.gates} gate decision{'' if r.gates == 1 else 's'}"
        if r.gates:
            decisions += f" ({r.stopped} stopped), {r.sealed_gates} with the sealed slice"
            decisions += f", last {str(r.last_at)[:16]}" if r.last_at else ""
        lines.append(f"  {r.base_run_id} ({', '.join(about)}): {decisions}")
    if len(result.reuse) > limit:
        lines.append(f"  … and {len(result.reuse) - limit} more (--format json lists them all)")
    return lines

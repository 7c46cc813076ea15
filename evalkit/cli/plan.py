"""``evalkit plan``: before any run, what each critical tag can detect (no model call)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from evalkit.cli.options import DEFAULT_DB, find_config

if TYPE_CHECKING:
    from collections.abc import Sequence

    from evalkit.compare.plan import JudgeState
    from evalkit.compare.policy import GatePolicy
    from evalkit.corpus.cases import Case
    from evalkit.corpus.suite import Suite


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{value} is not in (0, 1]")
    return value


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Add this group's subcommands to ``evalkit``."""
    parser = sub.add_parser(
        "plan",
        help="before any run: per critical tag, its cases, whether it can block, the smallest "
        "drop it detects with 80%% power, and its judges' calibration state (no model call)",
    )
    parser.add_argument("--config", default=None, help="suite config (default: found as for run)")
    parser.add_argument(
        "--db", default=DEFAULT_DB, help="DuckDB file with judge calibrations (optional)"
    )
    parser.add_argument(
        "--psi",
        type=_share,
        default=0.10,
        help="the flip fraction assumed for a drift (cases changing either way), default 0.10",
    )
    parser.set_defaults(handler=_cmd_plan)


def _cmd_plan(args: argparse.Namespace) -> int:
    from evalkit.compare.plan import plan_tags, render_plan
    from evalkit.compare.policy import GatePolicy, tag_counts
    from evalkit.corpus.cases import load_corpus
    from evalkit.corpus.suite import load_suite

    suite = load_suite(args.config or find_config())
    cfg = suite.config
    policy = GatePolicy.from_suite(
        cfg.critical_tags, cfg.gate, cfg.budgets, str(suite.path), cfg.pass_rules.model_dump()
    )
    corpus = load_corpus(suite.root)
    import polars as pl

    frame = pl.DataFrame({"tags": [list(c.tags) for c in corpus.cases]},
                         schema={"tags": pl.List(pl.String)})  # fmt: skip
    counts = tag_counts(frame)
    judges = _judges(suite, corpus.cases, policy, args.db)
    rows = plan_tags(counts, policy, args.psi, cfg.replays, judges)
    print(render_plan(rows, policy))
    return 0


def _judges(
    suite: Suite, cases: Sequence[Case], policy: GatePolicy, db: str
) -> dict[str, list[JudgeState]]:
    """Per critical tag, the judge checks of its cases and whether a calibration record lets
    them gate (the latest record for the judge model and rubric, as `judge_gating` reads)."""
    from evalkit.compare.plan import JudgeState
    from evalkit.scorers.judge_client import load_rubric

    calibrations = _calibrations(db)
    model = suite.config.judge.model if suite.config.judge else None
    out: dict[str, list[JudgeState]] = {}
    for tag in policy.critical_tags:
        seen: dict[str, JudgeState] = {}
        for case in cases:
            if tag not in case.tags:
                continue
            for sc in case.scorers:
                rubric = sc.args.get("rubric") if sc.name == "judge" else None
                if rubric is None or str(rubric) in seen:
                    continue
                name = getattr(rubric, "relative", "") or str(rubric)
                try:
                    digest = load_rubric(Path(rubric), name=name).hash
                except (OSError, ValueError):
                    digest = None
                state = _state(calibrations, model, digest, policy, db)
                seen[str(rubric)] = JudgeState(sc.name, name, model, state)
        out[tag] = list(seen.values())
    return out


def _calibrations(db: str):
    if not Path(db).is_file():
        return None
    from evalkit.store import open_store

    with open_store(db, read_only=True) as store:
        return store.calibrations()


def _state(calibrations, model, digest, policy, db) -> str:
    if calibrations is None:
        return f"no store at {db}: calibration unknown; uncalibrated judges report, never block"
    if model is None or digest is None or calibrations.is_empty():
        return "no calibration record: reports, never blocks"
    rows = [r for r in calibrations.iter_rows(named=True)
            if r["judge_model"] == model and r["rubric_hash"] == digest]  # fmt: skip
    if not rows:
        return "no calibration record: reports, never blocks"
    last = rows[-1]
    lo, n = last.get("kappa_lo"), int(last.get("n") or 0)
    ok = lo is not None and lo >= policy.judge_kappa_min and n >= policy.judge_min_labels
    how = f"kappa lower bound {lo if lo is None else round(lo, 2)} on {n} labels"
    return f"calibrated ({how}): may gate" if ok else f"calibrated ({how}): too weak to gate"

"""``evalkit baseline promote`` and ``evalkit baseline show``: a person names the baseline."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalkit.cli.options import db_arg
from evalkit.errors import ConfigError

if TYPE_CHECKING:
    from evalkit.compare.policy import PinnedPolicy
    from evalkit.run_manifest import RunManifest
    from evalkit.store import Store


def add_parsers(sub: argparse._SubParsersAction) -> None:
    baseline = sub.add_parser("baseline", help="promote or show the baseline a suite gates against")
    baseline_sub = baseline.add_subparsers(dest="baseline_command", required=True)
    promote = baseline_sub.add_parser(
        "promote", help="make a complete run its suite's baseline (recorded with who and why)"
    )
    db_arg(promote)
    promote.add_argument("run", help="run id, or a label naming one run (label@latest)")
    promote.add_argument("--who", required=True, help="who promotes it")
    promote.add_argument("--reason", required=True, help="why this run is the new reference")
    promote.add_argument(
        "--policy",
        action="store_true",
        help="pin the gate policy of --config (critical_tags, gate:, budgets:, tiers:) instead "
        "of the one the run recorded: how a person accepts a looser policy",
    )
    promote.add_argument(
        "--config",
        default=None,
        help="the suite config the run was made with (default: the one it recorded): its "
        "corpus is pinned as the exam; with --policy, its policy is pinned too",
    )
    promote.set_defaults(handler=_cmd_promote)
    show = baseline_sub.add_parser("show", help="the promoted baseline of each suite, and history")
    db_arg(show)
    show.add_argument("--suite", help="only this suite")
    show.set_defaults(handler=_cmd_show)


def _cmd_promote(args: argparse.Namespace) -> int:
    from evalkit.compare.pairing import require_complete, run_tier
    from evalkit.compare.policy import GatePolicy, pinned_policy
    from evalkit.run.live_tools import refuse_live
    from evalkit.store import open_store

    with open_store(args.db, wait_s=args.wait, write=True) as store:
        run_id = store.resolve_run(args.run)
        manifest = store.manifest(run_id)
        refuse_live(manifest, run_id, "promoted as a baseline")  # before: it never could be
        require_complete(store, run_id, "promoted", db=args.db)
        suite, tier = manifest.suite or "", run_tier(store, run_id)
        _refuse_partial(run_id, manifest.selection)
        policy: dict[str, Any] | None
        if args.policy:
            policy, pinned = _config_policy(args.config, suite), f"{args.config} (--policy)"
        else:
            policy, pinned = manifest.gate_policy, f"recorded in run {run_id}'s manifest"
        checked = GatePolicy.from_manifest(policy, pinned) if policy is not None else GatePolicy()
        checked.validate_against(store.cases(run_id), manifest.selection)
        _refuse_errored(store, run_id, checked.max_error_rate)
        previous = store.current_baseline(suite, tier)
        before = pinned_policy(store, previous) if previous else None
        store.promote_baseline(suite, run_id, args.who, args.reason, tier, policy)
        exam_note = _pin_exam(store, run_id, manifest, suite, tier, args.who, args.config)
    was = f" (was {previous})" if previous else ""
    which = f"suite {suite!r}" + (f" tier {tier!r}" if tier else "")
    print(f"baseline of {which} is now {run_id}{was}")
    print(f"  promoted by {args.who}: {args.reason}")
    print(f"  {exam_note}")
    if policy is None:
        print(f"  no policy pinned: run {run_id} predates policy pinning (the gate decides under "
              "the config it is given); pin one with --policy")  # fmt: skip
        return 0
    print(f"  policy pinned: {pinned}")
    _print_changes(before, policy)
    return 0


def _pin_exam(
    store: Store, run_id: str, manifest: RunManifest, suite: str, tier: str | None, who: str,
    config: str | None,
) -> str:  # fmt: skip
    """Pin the exam with the promotion (issue 42): every file of the corpus the run ran
    (`evalkit.corpus.pinned.exam_files`), read from ``config`` or the suite config the run
    recorded, after checking it is what the run ran. One line for the person, saying what was
    pinned or why nothing was (the gate then judges on the run's own cases, as before)."""
    import hashlib

    import polars as pl

    from evalkit.corpus.cases import load_corpus
    from evalkit.corpus.pinned import exam_files
    from evalkit.corpus.suite import load_suite
    from evalkit.errors import EvalkitError

    recorded = manifest.run.config
    source = config if config and Path(config).is_file() else recorded
    if not source or not Path(source).is_file():
        return (
            "no exam pinned: the run recorded no suite config that still exists (pass --config "
            "with the suite it ran); the gate judges on the run's own cases"
        )
    try:
        loaded = load_suite(source)
        corpus = load_corpus(loaded.root, sealed=True)
    except EvalkitError as exc:
        return f"no exam pinned: {source} does not load ({' '.join(str(exc).split())[:200]})"
    ran = dict(store.cases(run_id).select("case_id", "case_hash").iter_rows())
    have = {case.id: case.hash for case in corpus.cases}
    differ = sorted(c for c, digest in ran.items() if have.get(c) != digest)
    recorded_files = manifest.scorer_files
    files = sorted(
        p for p, d in corpus.file_hashes.items() if p in recorded_files and recorded_files[p] != d
    )
    if differ or files:
        what = [f"{len(differ)} case(s) differ ({', '.join(differ[:3])})"] if differ else []
        what += [f"referenced files changed: {', '.join(files[:3])}"] if files else []
        return (
            f"no exam pinned: the corpus at {loaded.root} is not what run {run_id} ran "
            f"({'; '.join(what)}); promote from the checkout it ran, or pass --config"
        )
    pinned = exam_files(loaded.root, corpus, loaded.config.scorers)
    modules = sorted(  # a custom scorer module must be the source the run scored with
        p for p, content in pinned.items()
        if p in recorded_files and recorded_files[p] != hashlib.sha256(content).hexdigest()
    )  # fmt: skip
    if modules:
        return (
            f"no exam pinned: the scorer modules at {loaded.root} are not what run {run_id} "
            f"scored with ({', '.join(modules)}); promote from the checkout it ran"
        )
    rows = store.baselines(suite).filter(pl.col("run_id") == run_id)  # the promotion just made
    when = rows["promoted_at"][0] if rows.height else None
    store.save_exam(run_id, suite, tier, who, str(loaded.root), pinned, when)
    return f"exam pinned: {len(ran)} cases and {len(pinned)} files of {loaded.root}"


def _refuse_partial(run_id: str, selection: dict) -> None:
    """A run of some tags only is no baseline: it would pin less evidence than the suite has."""
    if selection.get("tier") or not (selection.get("tags") or selection.get("exclude_tags")):
        return
    flags = [f"--tag {t}" for t in selection.get("tags") or ()]
    flags += [f"--exclude-tag {t}" for t in selection.get("exclude_tags") or ()]
    raise ConfigError(
        f"run {run_id} ran only part of the suite ({' '.join(flags)}): promote a run of the full "
        "suite (`evalkit run` without --tag/--exclude-tag), or run a tier (`evalkit run --tier "
        "NAME`) to promote it as that tier's baseline"
    )


def _refuse_errored(store: Store, run_id: str, max_error_rate: float) -> None:
    """A baseline whose outputs errored beyond the policy's tolerance holds too little evidence."""
    outputs = store.outputs(run_id, ordered=False)
    errored = int(outputs["error"].is_not_null().sum()) if outputs.height else 0
    if outputs.height and errored / outputs.height > max_error_rate:
        raise ConfigError(
            f"run {run_id} errored on {errored} of {outputs.height} outputs "
            f"({errored / outputs.height:.1%}), above gate.max_error_rate {max_error_rate:g} of "
            "the policy it would pin: re-run the suite once the system answers and promote that "
            "run"
        )


def _config_policy(config: str, suite: str) -> dict[str, Any]:
    """The policy of a suite config, refused when the config is another suite's."""
    from evalkit.corpus.manifest import gate_policy
    from evalkit.corpus.suite import load_suite

    loaded = load_suite(config)
    if loaded.config.suite != suite:
        raise ConfigError(
            f"{config} is suite {loaded.config.suite!r} but the run is of suite {suite!r}: pass "
            "--config with that suite's evalkit.yaml"
        )
    return gate_policy(loaded)


def _print_changes(before: PinnedPolicy | None, policy: dict) -> None:
    from evalkit.compare.policy import policy_changes

    if before is None or before.policy is None:
        print("  no policy was pinned before for this suite")
        return
    try:
        changes = policy_changes(before.policy, policy)
    except ConfigError as exc:
        print(f"  the previously pinned policy cannot be read ({exc}); not compared")
        return
    if not changes.any:
        print(f"  policy unchanged from the previous pin ({before.source})")
        return
    print(f"  policy changes against the previous pin ({before.source}):")
    for line in (*changes.looser, *changes.stricter):
        print(f"    {line}")


def _cmd_show(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from evalkit.store import open_store

    with open_store(args.db, read_only=True, wait_s=args.wait) as store:
        history = store.baselines(args.suite)
    if history.is_empty():
        print("no baseline promoted yet: `evalkit baseline promote RUN --who NAME --reason TEXT`")
        return 0
    table = Table("suite", "tier", "run", "promoted at", "who", "reason", "policy", "current")
    seen: set[tuple[str, str | None]] = set()
    for row in history.iter_rows(named=True):
        key = (row["suite"], row["tier"])
        current = key not in seen
        seen.add(key)
        when = str(row["promoted_at"])[:19]
        table.add_row(row["suite"], row["tier"] or "(full)", row["run_id"], when, row["who"],
                      row["reason"], "pinned" if row["policy"] else "none",
                      "yes" if current else "")  # fmt: skip
    Console(width=160).print(table)
    return 0

"""Only the trusted side writes what the gate trusts: the gate's filter over decision records.

Promotions, policy promotions, flake lists and overrides are read through :class:`Trust`: the
context the gate runs in (`evalkit.provenance.current_writer`: a pull-request job, a nightly,
a laptop), the pinned policy's ``gate.trusted_writers`` and, in a pull-request job, the base
branch's commit. A record whose writer is not trusted excuses nothing and is listed in the
decision with the reason (`trust_findings`).

One exception, for the CI example that runs the base branch in a worktree and promotes it inside
the pull-request job: a promotion the job wrote is trusted when what it pins is provably the base
branch's — the promoted run's manifest records the base branch's commit with a clean tree, and
the promotion pins no other policy than that run recorded. A promotion of the pull request's own
run never is.

Examples:
    >>> from evalkit.provenance import Writer
    >>> from evalkit.run_manifest import RunInfo
    >>> pr = Writer(ci="ci", event="pull_request", job="9", base_ref="main", pull_request=True)
    >>> trust = Trust(pr, ("base_branch", "person"), "abc")
    >>> trust.why_not(Writer(ci="ci", event="pull_request", job="9", pull_request=True).to_json())
    'written by this pull-request job (ci job 9, ? → ?)'
    >>> row = {"written_by": Writer(ci="ci", job="9", pull_request=True).to_json(), "policy": None}
    >>> base_branch_run = RunManifest(run=RunInfo(git_sha="abc", git_dirty=False))
    >>> trust.why_not_promotion(row, base_branch_run) is None
    True
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from evalkit.compare.decision import Finding, UnreadTree
from evalkit.provenance import (
    DEFAULT_TRUSTED,
    Writer,
    base_commit,
    current_writer,
    trusted_rules,
    why_untrusted,
)
from evalkit.run_manifest import RunManifest

if TYPE_CHECKING:  # (not compare.analysis: it reads calibrations through this module)
    from evalkit.compare.policy import PinnedPolicy
    from evalkit.store import Store


@dataclass(frozen=True)
class Trust:
    """Where the gate runs (``context``), the writers the pinned policy trusts (``rules``) and
    the base branch's commit as this checkout knows it (None: not in a pull-request job)."""

    context: Writer
    rules: tuple[str, ...] = DEFAULT_TRUSTED
    base_commit: str | None = None

    @classmethod
    def here(cls, rules: tuple[str, ...] = DEFAULT_TRUSTED, where: Path | None = None) -> Trust:
        """The trust of a gate running in this process (its environment, its checkout)."""
        context = current_writer(where=where)
        return cls(context, tuple(rules), base_commit(context, where))

    def why_not(self, written_by: str | None) -> str | None:
        """Why a record written by ``written_by`` (`Writer` JSON) is not trusted; None: it is."""
        return why_untrusted(Writer.from_json(written_by), self.context, self.rules)

    def why_not_promotion(self, row: Mapping[str, Any], manifest: RunManifest) -> str | None:
        """As `why_not`, for a promotion ``row`` of the run whose manifest is ``manifest``: one a
        pull-request job wrote is trusted when it provably pins the base branch's run."""
        why = self.why_not(row.get("written_by"))
        if why is None:
            return None
        writer = Writer.from_json(row.get("written_by"))
        if writer is not None and writer.pull_request and self.pins_base_branch(row, manifest):
            return None
        return why

    def pins_base_branch(self, row: Mapping[str, Any], manifest: RunManifest) -> bool:
        """The run was made at the base branch's commit with a clean tree, and the promotion
        pins the policy that run recorded (or none)."""
        run = manifest.run
        if self.base_commit is None or run.git_sha != self.base_commit:
            return False
        policy = row.get("policy")
        same_policy = policy is None or json.loads(policy) == manifest.gate_policy
        return run.git_dirty is False and same_policy


def promotions(
    store: Store, suite: str, tier: str | None, context: Writer | None = None,
    base: str | None = None,
) -> pl.DataFrame:  # fmt: skip
    """Every promotion of ``suite`` (``tier``), newest first, with ``why_not`` (null: trusted),
    each judged under the writers its own pinned policy trusts (a pull-request job cannot
    write a trusted one, so it cannot choose them)."""
    rows = store.baselines(suite)
    rows = rows.filter(pl.col("tier").is_null() if tier is None else pl.col("tier") == tier)
    if "written_by" not in rows.columns:
        rows = rows.with_columns(written_by=pl.lit(None, pl.String))
    context = context or current_writer()
    base = base if base is not None else base_commit(context)
    reasons = []
    for row in rows.iter_rows(named=True):
        policy = json.loads(row["policy"]) if row.get("policy") else None
        trust = Trust(context, trusted_rules(policy), base)
        try:
            manifest = store.manifest(row["run_id"])
        except Exception:  # a promotion of a run this store lacks: judged on its writer alone
            manifest = RunManifest()
        reasons.append(trust.why_not_promotion(row, manifest))
    return rows.with_columns(why_not=pl.Series(reasons, dtype=pl.String))


def trusted_baseline(store: Store, suite: str, tier: str | None) -> str | None:
    """The run of the newest trusted promotion of ``suite`` (``tier``); None: none is."""
    rows = promotions(store, suite, tier).filter(pl.col("why_not").is_null())
    return str(rows["run_id"][0]) if rows.height else None


def trusted_pinned_policy(store: Store, base_run_id: str) -> PinnedPolicy:
    """The policy of the newest trusted promotion of ``base_run_id`` that pinned one, else the
    one its manifest recorded (`evalkit.compare.policy.pinned_policy`, trusted writers only)."""
    from evalkit.compare.policy import PinnedPolicy

    manifest = store.manifest(base_run_id)
    rows = promotions(store, manifest.suite or "", manifest.tier).filter(
        (pl.col("run_id") == base_run_id)
        & pl.col("policy").is_not_null()
        & pl.col("why_not").is_null()
    )
    if rows.height:
        row = rows.row(0, named=True)
        when = str(row.get("promoted_at") or "?")[:10]
        return PinnedPolicy(
            json.loads(row["policy"]), f"promoted by {row['who']} on {when}: {row['reason']}"
        )
    recorded = manifest.gate_policy
    if recorded is not None:
        return PinnedPolicy(dict(recorded), f"recorded in baseline run {base_run_id}'s manifest")
    return PinnedPolicy(None, "none (the baseline predates policy pinning)")


def trusted_overrides(
    overrides: pl.DataFrame, trust: Trust
) -> tuple[pl.DataFrame, list[dict[str, Any]]]:
    """(the overrides a trusted writer recorded, the others with their ``why_not``)."""
    if "written_by" not in overrides.columns:
        overrides = overrides.with_columns(written_by=pl.lit(None, pl.String))
    why = [trust.why_not(w) for w in overrides["written_by"].to_list()]
    judged = overrides.with_columns(why_not=pl.Series(why, dtype=pl.String))
    ignored = judged.filter(pl.col("why_not").is_not_null()).to_dicts()
    return judged.filter(pl.col("why_not").is_null()).drop("why_not"), ignored


def trust_findings(
    store: Store, comparison: Any, trust: Trust, ignored_overrides: list[dict[str, Any]]
) -> list[Finding]:
    """The decision records the gate ignored, each with who wrote it and why it excuses
    nothing: overrides of the pair, and promotions of the suite newer than the baseline."""
    out = []
    for row in ignored_overrides:
        msg = (
            f"override by {row['who']} ({row['reason']}) ignored: {row['why_not']}; "
            "it excuses nothing"
        )
        out.append(
            Finding(0, "trust", (), {"record": "override"}, msg, severity="warn", kind="untrusted")
        )
    manifest = comparison.base.manifest
    rows = promotions(store, manifest.suite or "", manifest.tier, trust.context, trust.base_commit)
    trusted_at = rows.filter(pl.col("run_id") == comparison.base.run_id)["promoted_at"]
    for row in rows.filter(pl.col("why_not").is_not_null()).iter_rows(named=True):
        if trusted_at.len() and row["promoted_at"] < trusted_at.max():
            continue  # older than the promotion in force: history, not an attempt
        msg = (
            f"promotion of {row['run_id']} by {row['who']} ({row['reason']}) ignored: "
            f"{row['why_not']}; the gate judges against {comparison.base.run_id}"
        )
        out.append(
            Finding(0, "trust", (), {"record": "promotion"}, msg, severity="warn", kind="untrusted")
        )
    return out


def trusted_calibrations(calibrations: pl.DataFrame, trust: Trust | None = None) -> pl.DataFrame:
    """The judge calibration records a trusted writer recorded (one a pull-request job
    measured lets no judge gate)."""
    if calibrations.is_empty() or "written_by" not in calibrations.columns:
        return calibrations
    trust = trust or Trust.here()
    reasons = {w: trust.why_not(w) for w in calibrations["written_by"].unique().to_list()}
    keep = [reasons[w] is None for w in calibrations["written_by"].to_list()]
    return calibrations.filter(pl.Series(keep, dtype=pl.Boolean))


def unread_tree(comparison: Any) -> UnreadTree | None:
    """Whether a Python candidate whose repository could not be read (its identity does not
    cover what it can read) was served cached answers, and which cases (None: it was not)."""
    repo = (comparison.cand.manifest.system or {}).get("repo")
    outputs = comparison.cand.outputs
    if not isinstance(repo, dict) or repo.get("digest") or "cached" not in outputs.columns:
        return None
    cached = outputs.filter(pl.col("cached").fill_null(False))["case_id"].unique().to_list()
    if not cached:
        return None
    return UnreadTree(str(repo.get("why") or "no reason recorded"), tuple(sorted(cached)))


def unreadable_tree_finding(unread: UnreadTree) -> Finding:
    """Missing evidence: the cached answers of a candidate whose repository could not be read
    are not evidence of what ran; the finding names the command that makes them evidence."""
    msg = (
        f"the candidate is a Python system whose repository could not be read ({unread.why}), "
        f"and {len(unread.cached)} of its cases were answered from the response cache, which "
        "is no evidence of what ran: verify it with `evalkit run --no-cache` (or run it from a "
        "git checkout) and gate that run"
    )
    return Finding(
        0,
        "cache",
        unread.cached,
        {"cached": len(unread.cached)},
        msg,
        severity="unverified",
        kind="unreadable-tree",
    )

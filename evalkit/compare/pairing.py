"""Which two runs a comparison is about: run references, the promoted baseline, completeness.

A gate that compares the wrong runs verifies nothing, so this is strict: a label that names
several runs is an error (:meth:`evalkit.store.Store.resolve_run`), a candidate without a named
baseline is compared with the baseline a person promoted for its suite, a run is never compared
with itself, and an incomplete run is refused unless the caller counts its missing outputs as
errors (``allow_incomplete``).

Examples:
    >>> base, cand = resolve_pair(store, None, "candidate")   # doctest: +SKIP
    >>> require_complete(store, cand, "candidate")            # doctest: +SKIP
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from evalkit.compare.trust import trusted_baseline
from evalkit.errors import ConfigError, IncompleteRunError
from evalkit.run.live_tools import refuse_live
from evalkit.store import Store


@dataclass(frozen=True)
class Completeness:
    """How much of a run is stored: ``expected`` = cases × replays."""

    run_id: str
    status: str
    cases: int
    replays: int
    stored: int

    @property
    def expected(self) -> int:
        return self.cases * self.replays

    @property
    def complete(self) -> bool:
        return self.status == "complete" and self.stored >= self.expected


def completeness(store: Store, run_id: str) -> Completeness:
    """What ``run_id`` holds against what it was asked to run."""
    manifest = store.manifest(run_id)
    replays = manifest.replays
    resolved = store.resolve_run(run_id)
    # counted in the store: a million cases and (case, replay) keys never come into Python
    (counts,) = store.records(
        "SELECT (SELECT count(*) FROM cases WHERE run_id = $1) AS cases, (SELECT count(*) "
        "FROM (SELECT DISTINCT case_id, replay FROM outputs WHERE run_id = $1)) AS stored",
        [resolved],
    )
    # a sharded run's cases arrive with its shards: the manifest says how many it selected
    cases = max(int(counts["cases"]), manifest.corpus.n_cases)
    return Completeness(run_id, store.run_status(run_id), cases, replays, int(counts["stored"]))


def require_complete(
    store: Store, run_id: str, role: str, allow_incomplete: bool = False, db: str | None = None
) -> Completeness:
    """Refuse an incomplete run with the command that completes it.

    With ``allow_incomplete`` the run is accepted and its missing outputs count as errored
    (the gate is then UNVERIFIED wherever they matter).

    Raises:
        IncompleteRunError: the run's status is not ``complete`` or outputs are missing.
    """
    state = completeness(store, run_id)
    if state.complete or allow_incomplete:
        return state
    where = f" --db {shlex.quote(db)}" if db else ""
    raise IncompleteRunError(
        f"the {role} run {run_id} is incomplete (status {state.status}, {state.stored} of "
        f"{state.expected} outputs stored): finish it with `evalkit run --resume {run_id}{where}`"
        " (same --config/--set/--prompt as it started with), or pass --allow-incomplete to count "
        "the missing outputs as errored (the gate is then unverified where they matter)"
    )


def run_tier(store: Store, run_id: str) -> str | None:
    """The tier (named selection) a run executed, or None for the full suite."""
    return store.manifest(run_id).tier


def require_tier(store: Store, run_ids: tuple[str, str], tier: str | None) -> None:
    """Refuse a pair whose runs did not both execute ``tier`` (``--tier``); without ``tier``,
    refuse runs of two different tiers, or of different ``--tag``/``--exclude-tag`` selections:
    a candidate that ran less than its baseline would drop evidence unseen.

    Raises:
        ConfigError: naming each run and the tier it ran.
    """
    ran = {run_id: run_tier(store, run_id) for run_id in run_ids}
    shown = ", ".join(f"{r} ran {t or 'the full suite'}" for r, t in ran.items())
    if tier is not None and any(t != tier for t in ran.values()):
        raise ConfigError(
            f"--tier {tier}: both runs must have run that tier ({shown}); run them with "
            f"`evalkit run --tier {tier}`"
        )
    if tier is None and len(set(ran.values())) > 1:
        raise ConfigError(
            f"the runs executed different selections ({shown}): gate runs of one tier "
            "against each other (--tier NAME)"
        )
    if any(ran.values()):
        return  # both ran the same tier: the tier's definition is pinned with the policy
    base, cand = (_selection_flags(store.manifest(r).selection) for r in run_ids)
    if base != cand:
        have = " ".join(cand) or "the full suite"
        want = " ".join(base) or "no --tag/--exclude-tag (the full suite)"
        raise ConfigError(
            f"the candidate {run_ids[1]} ran {have} but the baseline {run_ids[0]} ran "
            f"{' '.join(base) or 'the full suite'}: a candidate is gated on the baseline's "
            f"selection — run it again with {want}, or gate a tier both ran (--tier NAME)"
        )


def _selection_flags(selection: dict[str, Any] | None) -> list[str]:
    """A manifest selection as the ``evalkit run`` flags that make it (sealed cases only ever
    report, so ``--sealed`` is left out).

    Examples:
        >>> _selection_flags({"tags": ["billing"], "exclude_tags": ["agent"]})
        ['--tag billing', '--exclude-tag agent']
    """
    selection = selection or {}
    flags = [f"--tag {t}" for t in selection.get("tags") or ()]
    flags += [f"--exclude-tag {t}" for t in selection.get("exclude_tags") or ()]
    return flags + [f"(skip scorers {s})" for s in selection.get("skip_scorers") or ()]


def resolve_pair(store: Store, baseline: str | None, candidate: str) -> tuple[str, str]:
    """(baseline run id, candidate run id). Without ``baseline``, the baseline promoted for the
    candidate's suite (``evalkit baseline promote``).

    Raises:
        ConfigError: no promoted baseline, or both references name the same run.
        StoreError: an unknown or ambiguous reference.
    """
    cand = store.resolve_run(candidate)
    if baseline is None:
        suite, tier = store.manifest(cand).suite or "", run_tier(store, cand)
        promoted = trusted_baseline(store, suite, tier)  # a trusted writer's (compare.trust)
        if promoted is None:
            which = f"suite {suite!r}" + (f" tier {tier!r}" if tier else "")
            untrusted = store.current_baseline(suite, tier) is not None
            raise ConfigError(
                f"{which} has no promoted baseline"
                + (" a trusted writer promoted (this job's own promotions excuse nothing)"
                   if untrusted else "")
                + ": promote one with `evalkit baseline promote RUN --who NAME --reason TEXT`, "
                f"or name it: `evalkit gate BASELINE {candidate}`"
            )  # fmt: skip
        base = promoted
    else:
        base = store.resolve_run(baseline)
    for run_id in (base, cand):  # a live run is reported only (evalkit.run.live_tools)
        refuse_live(store.manifest(run_id), run_id, "compared or gated")
    if base == cand:
        raise ConfigError(
            f"refusing to compare run {cand} with itself: the baseline and the candidate must be "
            "different runs"
        )
    return base, cand

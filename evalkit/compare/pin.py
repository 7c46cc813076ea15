"""Gating a pair against the pin: the one path from two run references to a decision.

A promoted baseline pins what the verdict depends on — its corpus, selection, gate policy and
flake list — and the gate judges the candidate against that pin, never against what the pull
request under test says. `gate_pair` is what ``evalkit gate``, ``evalkit compare`` and
``notebooks/gate.ipynb`` call: it resolves the pair, refuses mismatched selections and
incomplete runs, decides under the pinned policy (a stricter one from the pull request applies
at once, a looser one makes the gate UNVERIFIED), and passes the corpus delta, the baseline's
errors and the candidate's sibling runs to the one `evalkit.compare.gate.decide`.

Examples:
    >>> comparison, decision = gate_pair(store, None, "candidate", "evalkit.yaml")  # doctest: +SKIP
    >>> decision.status                                                             # doctest: +SKIP
    'UNVERIFIED'
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import polars as pl

from evalkit.compare.analysis import load_comparison
from evalkit.compare.gate import gate_comparison
from evalkit.compare.not_run import (
    CaseReference,
    checked_out_cases,
    find_not_run,
    shown_as_not_run,
)
from evalkit.compare.pairing import require_complete, require_tier, resolve_pair
from evalkit.compare.policy import GatePolicy, effective_policy, load_policy_dict
from evalkit.compare.trust import trusted_pinned_policy
from evalkit.errors import EvalkitError
from evalkit.run_manifest import RunManifest

if TYPE_CHECKING:
    from evalkit.compare.analysis import Comparison
    from evalkit.compare.decision import GateDecision
    from evalkit.store import Store

#: At most this many sibling runs are gated for the report (newest first).
MAX_SIBLINGS = 10

#: When this environment variable names a file, each decision `gate_pair` takes for a pair
#: (not its siblings') appends a line to it: how a test counts the decisions one
#: ``evalkit gate`` takes across its CLI and the notebook's kernel (which inherits it).
COUNT_DECISIONS_ENV = "EVALKIT_COUNT_DECISIONS"


def _count_decision() -> None:
    import os

    if count_file := os.environ.get(COUNT_DECISIONS_ENV):
        with open(count_file, "a", encoding="utf-8") as out:
            out.write(f"{os.getpid()}\n")


def resolve_policy(
    store: Store, base_run_id: str, config_path: str | None
) -> tuple[GatePolicy, tuple[str, ...], str | None]:
    """(the policy to decide under, the pull request's loosening changes, where the pin is from).

    The pin is the baseline's promoted policy, else the one its manifest recorded; the pull
    request's (``config_path``) applies only where it is as strict or stricter.
    """
    pin = trusted_pinned_policy(store, base_run_id)  # a trusted writer's (compare.trust)
    proposed = load_policy_dict(config_path)
    source = str(config_path) if config_path else "the pinned policy"
    policy, changes = effective_policy(pin.policy, proposed, source)
    return policy, tuple(changes.looser), pin.source if pin.policy is not None else None


#: What makes two runs the same configuration for sibling purposes: who answered and how it
#: was asked (and judged), never the corpus, its referenced files or the scorers' sources —
#: a one-line corpus edit does not make a blocked run someone else's (issue 42, rule 3).
SIBLING_FIELDS = ("suite", "provider", "system", "model", "prompt", "tools", "sampling",
                  "replays", "judge")  # fmt: skip


def configuration_identity(manifest: RunManifest) -> str:
    """The sibling identity of a run: sha256 over `SIBLING_FIELDS` of its manifest.

    Examples:
        >>> a = {"model": {"id": "m"}, "corpus": {"hash": "1"}, "scorer_files": {"s": "1"}}
        >>> b = {"model": {"id": "m"}, "corpus": {"hash": "2"}, "scorer_files": {"s": "2"}}
        >>> same = RunManifest.from_stored(a), RunManifest.from_stored(b)
        >>> configuration_identity(same[0]) == configuration_identity(same[1])
        True
    """
    import hashlib

    from evalkit.records import canonical_json

    fields = {k: manifest.recorded(k) for k in SIBLING_FIELDS}
    return hashlib.sha256(canonical_json(fields).encode()).hexdigest()


def _selection_key(selection: dict[str, Any] | None) -> dict[str, Any]:
    """A selection as siblings compare it (the case ids a rebaseline ran are not a selection)."""
    return {k: v for k, v in (selection or {}).items() if k != "case_ids" and v}


def siblings(store: Store, comparison: Comparison) -> list[str]:
    """Every other complete run of the candidate's configuration identity
    (`configuration_identity`) and selection, whatever corpus it ran (newest first), leaving
    out the pair itself, rebaseline runs, pinned-exam runs and targeted re-asks."""
    manifest = comparison.cand.manifest
    identity = configuration_identity(manifest)
    runs = store.runs().filter(
        (pl.col("status") == "complete")
        & ~pl.col("run_id").is_in([comparison.base.run_id, comparison.cand.run_id])
        & ~pl.col("label").str.starts_with("rebaseline:")
        & ~pl.col("label").str.starts_with("exam:")
        & ~pl.col("label").str.starts_with("reask:")  # compare.reask: a flake's targeted re-asks
    )
    import json

    out: list[str] = []
    wanted = _selection_key(manifest.selection)
    for row in runs.sort("created_at", descending=True).iter_rows(named=True):
        # one query for every run's manifest
        other = RunManifest.from_stored(json.loads(row["manifest"] or "{}"))
        if other.exam or other.rebaseline:
            continue
        if configuration_identity(other) != identity:
            continue
        if _selection_key(other.selection) == wanted:
            out.append(row["run_id"])
            if len(out) == MAX_SIBLINGS:
                break
    return out


def _exam_or_plain_comparison(
    store: Store, base: str, cand: str, allow_diff: Sequence[str], policy: GatePolicy
) -> Comparison:
    """The candidate judged on the baseline's pinned exam (`evalkit.compare.exam`), or, for a
    baseline promoted without one, compared as it ran (`load_comparison`)."""
    from evalkit.compare.exam import load_exam_comparison

    args = (allow_diff, policy.judge_kappa_min, policy.judge_min_labels, policy.pass_rules)
    on_exam = load_exam_comparison(store, base, cand, *args, thin=True)
    if on_exam is not None:
        return on_exam
    # thin: the answers' text stays in the store (the report reads its shown cases' text)
    return load_comparison(store, base, cand, *args, thin=True)


def gate_pair(
    store: Store,
    baseline: str | None,
    candidate: str,
    config_path: str | None,
    allow_diff: Sequence[str] = (),
    *,
    tier: str | None = None,
    allow_incomplete: bool = False,
    db: str | None = None,
    with_siblings: bool = True,
    reference: Callable[[], CaseReference] | None = None,
) -> tuple[Comparison, GateDecision]:
    """The checked pair's comparison and the gate's decision against the pin.

    The baseline's cases the candidate holds none of are checked against the corpus checked
    out beside ``config_path`` (read only when there are such cases: ``reference``, default
    `checked_out_cases` under the baseline's selection, read once for the siblings too): one
    still there was not run, and the gate is UNVERIFIED (`evalkit.compare.not_run`); without
    ``config_path`` none can be told removed.

    Raises:
        ConfigError: no promoted baseline, a run compared with itself, selections that differ.
        IncompleteRunError: a run is incomplete (unless ``allow_incomplete``).
        ComparabilityError: the manifests differ beyond ``allow_diff``.
    """
    base, cand = resolve_pair(store, baseline, candidate)
    require_tier(store, (base, cand), tier)
    for run_id, role in ((base, "baseline"), (cand, "candidate")):
        require_complete(store, run_id, role, allow_incomplete, db)
    policy, looser, source = resolve_policy(store, base, config_path)
    comparison = _exam_or_plain_comparison(store, base, cand, allow_diff, policy)
    policy.validate_pair(
        comparison.base.cases, comparison.cand.cases, comparison.cand.manifest.selection, cand
    )
    if reference is None:
        selection = comparison.base.manifest.selection
        reference = functools.cache(lambda: checked_out_cases(config_path, selection))
    not_run = find_not_run(comparison, reference, store.run_status(cand))
    comparison = shown_as_not_run(comparison, not_run)  # never as the pull request's removal
    found: list[tuple[str, str]] = []
    for run_id in siblings(store, comparison) if with_siblings else ():
        try:
            _, other = gate_pair(
                store, base, run_id, config_path, allow_diff, tier=tier, with_siblings=False,
                reference=reference,
            )  # fmt: skip
            found.append((run_id, other.status))
        except EvalkitError as exc:  # shown, not hidden: it could not be gated against the pin
            found.append((run_id, f"not gated ({str(exc)[:80]})"))
    decision = gate_comparison(
        store, comparison, policy, looser, source, tuple(found), reasks=True, not_run=not_run
    )
    if with_siblings:
        _count_decision()
    if with_siblings and store.read_only:
        # DuckDB's memory of the gate's reads goes with the connection (the report reads its
        # shown cases back through its own); a later use reopens it
        store.release()
    return comparison, decision

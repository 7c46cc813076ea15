"""Served-model drift: the model the provider actually answered with, compared between the runs
and against the configured snapshot.

A provider can swap the model behind a name (``gpt-4o`` today is not ``gpt-4o`` last month), and
that change is not the pull request's. Every output records the model id the provider returned
(``outputs.model``); when the two runs were served different models (and the model is not the
declared variable under test), or a run was served something other than its ``system.snapshot``,
the gate says so in its first screen: a warning by default, a block with
``gate.served_model_change: block``.

Examples:
    >>> import polars as pl
    >>> served_models(pl.DataFrame({"model": ["m-0513", "m-0513", None]}))
    (('m-0513', 2),)
    >>> matches_snapshot("gpt-4o-2024-08-06", "gpt-4o"), matches_snapshot("gpt-4o-mini", "gpt-4o")
    (True, False)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import polars as pl

from evalkit.compare.decision import Finding, Severity

if TYPE_CHECKING:
    from evalkit.compare.policy import GatePolicy

_DATED = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{4}|\d{8}|latest|preview)$")


@dataclass(frozen=True)
class ServedModels:
    """What each run was served: ``(model id, outputs)`` most first, and what it asked for."""

    base: tuple[tuple[str, int], ...] = ()
    cand: tuple[tuple[str, int], ...] = ()
    base_snapshot: str | None = None
    cand_snapshot: str | None = None
    declared: bool = False  # the model is the declared variable under test: a change is the PR's


def served_models(outputs: pl.DataFrame) -> tuple[tuple[str, int], ...]:
    """Distinct served model ids of a run's outputs with their counts, most first."""
    if "model" not in outputs.columns or outputs.is_empty():
        return ()
    counts = outputs.drop_nulls("model").group_by("model").len().sort(["len", "model"])
    return tuple((str(m), int(n)) for m, n in reversed(counts.rows()))


def matches_snapshot(served: str, snapshot: str) -> bool:
    """Whether a served id is the configured snapshot, or a dated release of that name (a
    snapshot left unset is the model name, which providers answer with a dated id)."""
    return served == snapshot or (
        served.startswith(snapshot + "-") and bool(_DATED.search(served[len(snapshot) :]))
    )


def served_from(
    base_outputs: pl.DataFrame,
    cand_outputs: pl.DataFrame,
    base_manifest: Mapping[str, Any],
    cand_manifest: Mapping[str, Any],
    allow_diff: tuple[str, ...] | list[str] = (),
) -> ServedModels:
    """Both runs' served models and snapshots, from their outputs and manifests."""

    def snapshot(manifest: Mapping[str, Any]) -> str | None:
        model = manifest.get("model") or {}
        return model.get("snapshot") or model.get("id")

    ids = [(m.get("model") or {}).get("id") for m in (base_manifest, cand_manifest)]
    declared = "model" in allow_diff or ids[0] != ids[1]
    return ServedModels(
        served_models(base_outputs),
        served_models(cand_outputs),
        snapshot(base_manifest),
        snapshot(cand_manifest),
        declared,
    )


def served_findings(policy: GatePolicy, served: ServedModels | None) -> list[Finding]:
    """A finding when the runs were served different models (unless the model is the declared
    variable) and one per run served something other than its snapshot."""
    if served is None:
        return []
    severity: Severity = "block" if policy.served_model_change == "block" else "warn"
    found = []
    base_ids, cand_ids = {m for m, _ in served.base}, {m for m, _ in served.cand}
    if base_ids and cand_ids and base_ids != cand_ids and not served.declared:
        message = (
            f"the provider served another model: baseline {_shown(served.base)} → candidate "
            f"{_shown(served.cand)}, under the same configured model (a provider-side change, "
            "not this change)"
        )
        stats: dict[str, Any] = {"base": dict(served.base), "cand": dict(served.cand)}
        found.append(Finding(0, None, (), stats, message, severity, "served-model"))
    for side, models, snapshot in (
        ("baseline", served.base, served.base_snapshot),
        ("candidate", served.cand, served.cand_snapshot),
    ):
        off = [(m, n) for m, n in models if snapshot and not matches_snapshot(m, snapshot)]
        if off:
            message = f"the {side} was served {_shown(tuple(off))}, not its snapshot {snapshot!r}"
            stats = {"side": side, "snapshot": snapshot, "served": dict(off)}
            found.append(Finding(0, side, (), stats, message, severity, "served-snapshot"))
    return found


def _shown(models: tuple[tuple[str, int], ...]) -> str:
    parts = [f"{m} ({n} output{'s' if n != 1 else ''})" for m, n in models[:3]]
    return ", ".join(parts) + (f" and {len(models) - 3} more" if len(models) > 3 else "")

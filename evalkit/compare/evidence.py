"""Tier 0 of the gate: what it could not see. An errored output is no evidence of anything, on
either side: errored must_pass cases, errored cases in a critical tag, more errored outputs
than ``gate.max_error_rate``, or no case with an answer on both sides make the gate UNVERIFIED,
with the most common causes named (`top_causes`).

Examples:
    >>> named_ids(["a", "b", "c"], limit=2)
    'a, b and 1 more'
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import polars as pl

from evalkit.compare.decision import (
    Finding,
)
from evalkit.compare.policy import GatePolicy

if TYPE_CHECKING:
    from evalkit.compare.analysis import RunData


_ATTEMPTS = re.compile(r"\s*\(after \d+ attempts\)$")


def top_causes(errors: Sequence[str | None], k: int = 3) -> list[tuple[str, int]]:
    """The ``k`` most common error causes with their counts (retry counts folded together).

    Examples:
        >>> top_causes(["HTTP 400: bad model (after 5 attempts)", "HTTP 400: bad model", None])
        [('HTTP 400: bad model', 2)]
    """
    shown = [_ATTEMPTS.sub("", e.strip())[:160] for e in errors if e]
    return Counter(shown).most_common(k)


def causes_text(causes: Sequence[tuple[str, int]]) -> str:
    return "; ".join(f"{n} × {cause}" for cause, n in causes)


def named_ids(ids: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(ids[:limit])
    return shown + (f" and {len(ids) - limit} more" if len(ids) > limit else "")


def first_causes(errors: pl.DataFrame | None) -> dict[str, str]:
    """Each errored case's first stored error (``errors``: the candidate's outputs)."""
    if errors is None or errors.is_empty():
        return {}
    failed = errors.filter(pl.col("error").is_not_null())
    first = failed.group_by("case_id", maintain_order=True).first()
    return dict(first.select("case_id", "error").iter_rows())


def evidence_findings(
    paired: pl.DataFrame,
    policy: GatePolicy,
    errors: pl.DataFrame | None,
    by_case: Mapping[str, str],
    base_errors: pl.DataFrame | None = None,
) -> list[Finding]:
    """Tier 0: what the gate could not see, on either side. Errored cases in a critical tag or
    a must_pass case, more errored outputs than ``max_error_rate``, or no case with evidence on
    both sides make it UNVERIFIED: an outage of the baseline hides as much as one of the
    candidate."""
    if paired.height == 0:
        msg = "no case is paired between the runs (nothing ran, or every case was edited)"
        return [
            Finding(
                0,
                None,
                (),
                {"n": 0},
                f"{msg}: nothing was verified",
                severity="unverified",
                kind="nothing-paired",
            )
        ]
    out = []
    for side, role, frame in (("cand", "candidate", errors), ("base", "baseline", base_errors)):
        out += _side_evidence(paired, policy, frame, by_case if side == "cand" else {}, side, role)
    seen = paired.filter(~pl.col("base_error") & ~pl.col("cand_error"))
    if seen.height == 0 and not any(f.slice == "errors" for f in out):
        msg = (
            f"none of the {paired.height} paired cases has an answer on both sides (the "
            "baseline or the candidate errored on every one): nothing was verified"
        )
        out.append(
            Finding(0, None, (), {"n": 0}, msg, severity="unverified", kind="nothing-verified")
        )
    return out


def _side_evidence(
    paired: pl.DataFrame,
    policy: GatePolicy,
    errors: pl.DataFrame | None,
    by_case: Mapping[str, str],
    side: str,
    role: str,
) -> list[Finding]:
    errored = paired.filter(pl.col(f"{side}_error"))
    if errors is not None and errors.height:
        failed = errors.filter(pl.col("error").is_not_null())
        n_outputs, n_errored = errors.height, failed.height
        causes = top_causes(failed["error"].to_list())
        by_case = by_case or first_causes(errors)
    else:
        n_outputs, n_errored, causes = paired.height, errored.height, []
    kind = "errored" if side == "cand" else "baseline-errored"
    out = []
    if side == "base":  # the candidate's errored must_pass cases are a tier-1 finding
        ids = errored.filter(pl.col("criticality") == "must_pass")["case_id"].to_list()
        if ids:
            why = top_causes([by_case.get(i) for i in ids])
            msg = (
                f"{len(ids)} must_pass case(s) errored in the baseline ({named_ids(ids)}): what "
                "they did before is unknown, so they are unverified"
                + (f"; causes: {causes_text(why)}" if why else "")
            )
            out.append(
                Finding(
                    0,
                    "must_pass",
                    tuple(ids),
                    {"n_error": len(ids)},
                    msg,
                    severity="unverified",
                    kind=kind,
                )
            )
    for tag in policy.critical_tags:
        ids = errored.filter(pl.col("tags").list.contains(tag))["case_id"].to_list()
        if ids:
            why = top_causes([by_case.get(i) for i in ids])
            msg = (
                f"critical tag {tag!r}: {len(ids)} case(s) errored in the {role} "
                f"({named_ids(ids)}), so the tag is unverified"
                + (f"; causes: {causes_text(why)}" if why else "")
            )
            out.append(
                Finding(
                    0, tag, tuple(ids), {"n_error": len(ids)}, msg, severity="unverified", kind=kind
                )
            )
    rate = n_errored / n_outputs if n_outputs else 0.0
    if n_errored and rate > policy.max_error_rate:
        ids = errored["case_id"].to_list()
        msg = (
            f"{n_errored} of {n_outputs} {role} outputs errored ({rate:.0%}, more than "
            f"gate.max_error_rate {policy.max_error_rate:.0%})"
            + (f"; top causes: {causes_text(causes)}" if causes else "")
            + (f"; cases with no verdict: {named_ids(ids)}" if ids else "")
        )
        stat: dict[str, Any] = {"n_outputs": n_outputs, "n_errored": n_errored, "error_rate": rate}
        stat["top_causes"] = [[c, n] for c, n in causes]
        out.append(Finding(0, "errors", tuple(ids), stat, msg, severity="unverified", kind=kind))
    return out


def side_errors(run: RunData, paired: pl.DataFrame) -> pl.DataFrame:
    """One run's outputs of the paired, unsealed cases (``case_id, error``); a missing output
    (an incomplete run compared with ``--allow-incomplete``) counts as an errored one."""
    paired_ids = paired.filter(~pl.col("sealed").fill_null(False))["case_id"]
    outputs = run.outputs
    cols = [pl.col("case_id"), (pl.col("error") if "error" in outputs.columns
                                else pl.lit(None, pl.String)).alias("error")]  # fmt: skip
    replays = run.manifest.replays
    if replays == 1 and _same_ids(outputs["case_id"], paired_ids):
        # the usual pair: an output a paired case (no set of a million ids, nor a grouping of
        # them, to find none missing): every output kept, in its own order, as below
        return outputs.select(cols)
    present = outputs.select(cols).filter(pl.col("case_id").is_in(paired_ids.implode()))
    seen = present.group_by("case_id").len()
    missing = (
        pl.DataFrame({"case_id": paired_ids}).join(seen, on="case_id", how="left")
        .with_columns(pl.col("len").fill_null(0))
        .filter(pl.col("len") < replays)
    )  # fmt: skip
    filler = [
        {"case_id": r["case_id"], "error": "no output stored (the run is incomplete)"}
        for r in missing.iter_rows(named=True)
        for _ in range(replays - r["len"])
    ]
    if filler:
        present = pl.concat([present, pl.DataFrame(filler, schema=present.schema)])
    return present


def _same_ids(ids: pl.Series, paired_ids: pl.Series) -> bool:
    """Whether ``ids`` are ``paired_ids`` in some order: as they are (a run read in id order),
    else both sorted (a merged run's outputs in the order its shards wrote them; sorting a
    million ids holds a column of them, where `side_errors`' set and grouping held 180 MiB).

    Examples:
        >>> _same_ids(pl.Series(["b", "a"]), pl.Series(["a", "b"]))
        True
        >>> _same_ids(pl.Series(["a", "a"]), pl.Series(["a", "b"]))
        False
    """
    if ids.len() != paired_ids.len():
        return False
    if ids.equals(paired_ids, check_names=False):
        return True
    return ids.sort().equals(paired_ids.sort(), check_names=False)

"""The evidence the report shows for each flipped case, gathered from the stored runs: its
input, the output of the replay that agrees with each side's verdict, and what each scorer (or
the runner, or the provider) said; and the tool calls of the cases whose trajectories grew.

Examples:
    >>> ScorerNote("contains", False, 0.0, "no 'refund' in the reply").passed
    False
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import polars as pl

from evalkit.compare.verdicts import replay_verdicts

if TYPE_CHECKING:  # a Report read back from a file (the gate notebook's) needs no corpus or store
    from evalkit.compare.analysis import Comparison


@dataclass(frozen=True)
class ScorerNote:
    """What one scorer (or the runner) said about the replay shown; ``passed`` None = errored."""

    scorer: str
    passed: bool | None
    score: float | None
    reason: str


@dataclass(frozen=True, kw_only=True)
class CaseDetail:
    """A flipped case: its input, both outputs and each scorer's reason on each side."""

    case_id: str
    tags: tuple[str, ...]
    criticality: str
    blocking: bool
    input: str
    base_output: str | None
    cand_output: str | None
    base_notes: tuple[ScorerNote, ...]
    cand_notes: tuple[ScorerNote, ...]


def _input_text(raw: str | None) -> str:
    try:
        data = json.loads(raw or "{}")
    except json.JSONDecodeError:
        return raw or ""
    if isinstance(data, dict) and data.get("messages"):
        return "\n".join(f"{m.get('role')}: {m.get('content')}" for m in data["messages"])
    return json.dumps(data.get("vars", data) if isinstance(data, dict) else data, sort_keys=True)


def _shown(cmp: Comparison, side: str, ids: list[str]) -> dict[str, tuple[str | None, tuple]]:
    """Per case: the text of the first replay that agrees with the verdict, and its notes (a
    rebaselined case's baseline side is the rebaseline run's)."""
    run, v = (cmp.base, cmp.base_verdicts) if side == "base" else (cmp.cand, cmp.cand_verdicts)
    if side == "base" and cmp.rebaseline is not None:
        again = set(cmp.paired.filter(pl.col("origin") == "rebaselined")["case_id"])
        from evalkit.compare.analysis import verdicts_of  # not at import, as in `_shown_run`

        rb = cmp.rebaseline
        rv = verdicts_of(rb)  # a thin run's scores stay in its store
        return _shown_run(run, v, [i for i in ids if i not in again]) | _shown_run(
            rb, rv, [i for i in ids if i in again]
        )
    return _shown_run(run, v, ids)


def _shown_run(run: Any, v: pl.DataFrame, ids: list[str]) -> dict[str, tuple[str | None, tuple]]:
    if not ids or not run.scores.columns:
        return {}
    # not at import: a report read back from a file (the gate notebook's kernel) needs no store
    from evalkit.compare.analysis import output_details, score_details

    out = output_details(run, ids).with_columns(pl.col("replay").cast(pl.Int64))
    sc = score_details(run, ids).with_columns(pl.col("replay").cast(pl.Int64))
    agrees = (pl.col("passed") == pl.col("verdict")) | pl.col("verdict").is_null()
    mine = v.filter(pl.col("case_id").is_in(ids))  # not a join against a million verdicts
    pick = (
        replay_verdicts(out, sc)
        .join(mine.select("case_id", pl.col("passed").alias("verdict")), on="case_id")
        .filter(agrees)
        .group_by("case_id")
        .agg(pl.col("replay").min())
    )
    text = pl.coalesce("text", pl.format("[provider error] {}", "error")).alias("text")
    notes: dict[str, list[ScorerNote]] = {}
    for r in out.join(pick, on=["case_id", "replay"]).iter_rows(named=True):
        if r["fail_reason"]:
            notes[r["case_id"]] = [ScorerNote("runner", False, None, r["fail_reason"])]
    for r in sc.join(pick, on=["case_id", "replay"]).sort("scorer_index").iter_rows(named=True):
        passed = None if r["error"] else r["passed"]
        note = ScorerNote(r["scorer"], passed, r["score"], r["reason"] or "")
        notes.setdefault(r["case_id"], []).append(note)
    texts = out.join(pick, on=["case_id", "replay"]).select("case_id", text).iter_rows()
    return {case: (t, tuple(notes.get(case, ()))) for case, t in texts}


def case_details(
    cmp: Comparison, frame: pl.DataFrame, blocking: set[str]
) -> tuple[CaseDetail, ...]:
    from evalkit.compare.analysis import case_details_of  # not at import, as in `_shown_run`

    ids = frame["case_id"].to_list()
    inputs = dict(case_details_of(cmp.cand, ids).select("case_id", "input").rows())
    base, cand = _shown(cmp, "base", ids), _shown(cmp, "cand", ids)
    out = []
    for case, tags, crit in frame.select("case_id", "tags", "criticality").iter_rows():
        b_text, b_notes = base.get(case, (None, ()))
        c_text, c_notes = cand.get(case, (None, ()))
        text = _input_text(inputs.get(case))
        out.append(
            CaseDetail(
                case_id=case,
                tags=tuple(tags or ()),
                criticality=crit,
                blocking=case in blocking,
                input=text,
                base_output=b_text,
                cand_output=c_text,
                base_notes=b_notes,
                cand_notes=c_notes,
            )
        )
    return tuple(out)


#: Failing cases whose score rows `failure_reasons` reads back at once.
_REASON_CASES = 20_000


def failure_reasons(run: Any, ids: list[str]) -> dict[str, str]:
    """Per case: what failed it in ``run`` (failing or undecided scorers, the runner, the
    provider), each distinct reason once, in scorer order."""
    from evalkit.compare.analysis import score_details  # not at import, as in `_shown_run`

    mine = pl.col("case_id").is_in(ids)
    failing = (pl.col("passed") == False) | pl.col("error").fill_null(False)  # noqa: E712
    why = pl.format("{}: {}", "scorer", pl.col("reason").fill_null("")).alias("why")
    # read back a share of the cases at a time, each share's failing rows' reasons alone kept:
    # every score row of a hundred thousand failing cases, read at once, was held whole
    scored = pl.concat(
        [
            score_details(run, ids[at : at + _REASON_CASES])
            .filter(failing)
            .select("case_id", "replay", "scorer_index", why)
            for at in range(0, max(len(ids), 1), _REASON_CASES)
        ]
    ).sort("case_id", "replay", "scorer_index")
    said = [scored.select("case_id", "why")]
    out = run.outputs.filter(mine)
    for col, fmt in (("error", "provider error: {}"), ("fail_reason", "runner: {}")):
        if col in out.columns:
            said.append(out.select("case_id", pl.format(fmt, col)))
    rows = pl.concat([f.rename({f.columns[1]: "why"}) for f in said]).drop_nulls()
    grouped = rows.unique(maintain_order=True).group_by("case_id", maintain_order=True)
    return dict(grouped.agg(pl.col("why").str.join("; ")).iter_rows())


def trajectories(
    cmp: Comparison, cases: list[tuple[str, float, float]]
) -> tuple[tuple[str, float, float, str, str], ...]:
    """The grown cases with each side's tool calls (names, in order), replay 0."""

    def calls(outputs: pl.DataFrame, case_id: str) -> str:
        row = outputs.filter((pl.col("case_id") == case_id) & (pl.col("replay") == 0))
        if row.is_empty() or "tool_calls" not in row.columns:
            return ""
        try:
            made = json.loads(row["tool_calls"][0] or "[]")
        except (TypeError, ValueError):
            return ""
        names = [str((c.get("function") or {}).get("name") or c.get("name") or "?") for c in made
                 if isinstance(c, dict)]  # fmt: skip
        return " → ".join(names) or "(no tool calls)"

    from evalkit.compare.analysis import output_details

    ids = [case for case, _, _ in cases]
    base, cand = output_details(cmp.base, ids), output_details(cmp.cand, ids)
    return tuple((case, b, c, calls(base, case), calls(cand, case)) for case, b, c in cases)

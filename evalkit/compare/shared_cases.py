"""One copy of the cases two runs share (issue 48, item 4).

The usual gate's two runs ran the same corpus: their cases frames hold the same ids, hashes,
tags, criticality and groups row by row, and at a million cases each copy is a hundred MiB
and more (a hash is 64 characters). `share_cases` gives the candidate the baseline's own
columns wherever they are equal, and each run's outputs the ids of its cases where they are
the same rows, so the process holds each of them once: the values are unchanged, only whose
memory they are in.

Examples:
    >>> import polars as pl
    >>> from evalkit.compare.analysis import RunData
    >>> cases = pl.DataFrame({"run_id": ["b"], "case_id": ["a"], "case_hash": ["h"]})
    >>> out = pl.DataFrame({"run_id": ["b"], "case_id": ["a"]})
    >>> run = lambda r: RunData(run_id=r, label=r, manifest={}, scores=pl.DataFrame(),
    ...     cases=cases.with_columns(run_id=pl.lit(r)), outputs=out.with_columns(run_id=pl.lit(r)))
    >>> base, cand, shared = share_cases(run("b"), run("c"))
    >>> shared, cand.cases.rows()
    (4, [('c', 'a', 'h')])
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar, Protocol, TypeVar

import polars as pl


class _Frames(Protocol):
    """What `share_cases` reads of a run (`evalkit.compare.analysis.RunData`, which imports
    this module: named by its shape, not imported back), a dataclass."""

    __dataclass_fields__: ClassVar[dict[str, Any]]

    @property
    def cases(self) -> pl.DataFrame: ...
    @property
    def outputs(self) -> pl.DataFrame: ...


RunData = TypeVar("RunData", bound=_Frames)

#: The case columns two runs of one corpus hold alike (not ``run_id``: each run's own).
SHARED_CASE_COLUMNS = ("case_id", "case_hash", "tags", "criticality", "sealed", "case_group")


def share_cases(base: RunData, cand: RunData) -> tuple[RunData, RunData, int]:
    """``base`` and ``cand`` holding one copy of what their cases frames share, and how many
    columns now point at another frame's (`SHARED_CASE_COLUMNS` of ``cand.cases`` equal to
    ``base``'s, and each run's outputs ``case_id`` equal to its cases'; 0: none)."""
    shared = 0
    cases = cand.cases
    if _frame(base.cases) and _frame(cases) and base.cases.height == cases.height:
        both = [c for c in SHARED_CASE_COLUMNS if c in base.cases.columns and c in cases.columns]
        same = [c for c in both if same_column(base.cases[c], cases[c])]
        if same:
            cases = cases.with_columns(base.cases.get_column(c) for c in same)
            shared += len(same)
    runs = []
    for run, run_cases in ((base, base.cases), (cand, cases)):
        outputs = run.outputs
        if _ids_alike(outputs, run_cases):
            outputs = outputs.with_columns(run_cases.get_column("case_id"))
            shared += 1
        runs.append(replace(run, cases=run_cases, outputs=outputs))
    return runs[0], runs[1], shared


def _frame(frame: pl.DataFrame | None) -> bool:
    return isinstance(frame, pl.DataFrame) and frame.height > 0


def _ids_alike(outputs: pl.DataFrame, cases: pl.DataFrame) -> bool:
    """Whether ``outputs`` hold one row per case of ``cases``, in its order (one replay)."""
    if not (_frame(outputs) and _frame(cases)):
        return False
    if "case_id" not in outputs.columns or "case_id" not in cases.columns:
        return False
    return same_column(outputs["case_id"], cases["case_id"])


def same_column(a: pl.Series, b: pl.Series) -> bool:
    """The same values of the same type, row by row (nulls alike): a column another frame's
    can stand in for."""
    return a.dtype == b.dtype and a.len() == b.len() and a.equals(b, check_names=False)

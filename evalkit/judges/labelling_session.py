"""One rater labelling a sample (:func:`evalkit.judges.labelling.sample_outputs`) one output at a
time, through plain Python: the notebook view (:mod:`evalkit.judges.labelling_widget`) is buttons
calling it, and the tests script it.

Each label goes to the store at once through ``store.save_human_labels``, pinned to the output's
hash and keyed by rater and scorer, with the store opened only for that write: two people can
label the same sample from two kernels without seeing or replacing each other's labels, and a
notebook or a run can read the file between labels. Opening a session again resumes at the
rater's first unlabelled item. ``evalkit judges calibrate`` reads these labels as it reads imported
ones.

Blind: a session shows the case's input, the output and the rubric; it never reads the judge's
scores (the sample has none) nor another rater's labels.

Examples:
    >>> session = open_labelling("data/demo.duckdb", "baseline", "ana")  # doctest: +SKIP
    >>> session.current().output, str(session.progress)                 # doctest: +SKIP
    ('Thanks for reaching out ...', '0 of 40 labelled, on item 1')
    >>> session.label(4)                                                # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from evalkit.judges.labelling import (
    CLI_NAMES,
    DEFAULT_SAMPLE,
    LabelItem,
    LabellingError,
    LabelSample,
    SettingNames,
    Stratify,
    sample_outputs,
)
from evalkit.judges.labels import LabelError, parse_label
from evalkit.store import open_store

__all__ = ["WAIT_S", "LabellingSession", "Progress", "open_labelling"]

#: How long a label's write waits for another writer (the other rater's label, a run's batch).
WAIT_S = 30.0


@dataclass(frozen=True)
class Progress:
    """Where a rater is: labels given, items in the sample, the current item (1-based)."""

    labelled: int
    total: int
    position: int | None  # None: every item is labelled

    @property
    def remaining(self) -> int:
        return self.total - self.labelled

    def __str__(self) -> str:
        where = f", on item {self.position}" if self.position is not None else ": done"
        return f"{self.labelled} of {self.total} labelled{where}"


class LabellingSession:
    """One rater labelling a sample, one output at a time; each label is stored as it is given.

    ``current()`` is the item to label (None when all are); ``label(value)`` stores it and moves
    to the next unlabelled item (skipped ones come round again at the end); ``skip()`` moves on
    without a label; ``back()`` returns to the item shown before, to change its label. Use
    :func:`open_labelling` to make one from a store.

    ``note`` is kept on the session (``notes``) only: the store's labels have no note column.
    """

    def __init__(
        self,
        sample: LabelSample,
        rater: str,
        db: str | Path,
        *,
        existing: Mapping[str, int] | None = None,
        levels: Sequence[int] | None = None,
        wait_s: float = WAIT_S,
    ) -> None:
        name = str(rater).strip()
        if not name:
            raise LabellingError("rater is empty: label under your name (RATER = 'ana')")
        if name.startswith("judge:"):
            raise LabellingError(f"rater {name!r}: names starting 'judge:' mean a model judge")
        self.sample, self.rater, self.db, self.wait_s = sample, name, Path(db), wait_s
        self.levels = tuple(levels) if levels is not None else sample.rubric.levels
        self.source = f"labelling:{sample.run_id}"
        self.notes: dict[str, str] = {}
        hashes = {i.output_hash for i in sample.items}
        self._labels = {h: v for h, v in (existing or {}).items() if h in hashes}
        self._history: list[int] = []
        self._cursor = self._next_unlabelled(-1)

    @property
    def labels(self) -> dict[str, int]:
        """This rater's labels on the sample so far, by output hash."""
        return dict(self._labels)

    @property
    def progress(self) -> Progress:
        position = None if self._cursor is None else self._cursor + 1
        return Progress(len(self._labels), len(self.sample.items), position)

    @property
    def done(self) -> bool:
        return self._cursor is None

    def current(self) -> LabelItem | None:
        """The item to label now (None when every item has this rater's label)."""
        return None if self._cursor is None else self.sample.items[self._cursor]

    def label_of(self, item: LabelItem) -> int | None:
        """This rater's stored label of ``item`` (shown again after ``back()``), or None."""
        return self._labels.get(item.output_hash)

    def label(self, value: int | str, note: str | None = None) -> LabelItem | None:
        """Store ``value`` (a rubric level, or pass/fail on a 0/1 scale) for the current item
        and move to the next unlabelled one, which it returns.

        Raises:
            LabellingError: nothing left to label, or a value that is not one of ``levels``.
            StoreError: the store stayed locked by another writer for ``wait_s``.
        """
        item = self.current()
        if item is None:
            raise LabellingError(f"{self.rater} has labelled all {len(self._labels)} items")
        level = self._level(value)
        self._save(item, level)  # stored first: a failed write leaves the item unlabelled
        self._labels[item.output_hash] = level
        if note:
            self.notes[item.output_hash] = note
        return self._move(self._next_unlabelled(self._cursor))

    def skip(self) -> LabelItem | None:
        """Leave the current item unlabelled for now; it comes round again after the others."""
        if self._cursor is None:
            return None
        return self._move(self._next_unlabelled(self._cursor))

    def back(self) -> LabelItem | None:
        """Return to the item shown before (after resuming: the one before the current)."""
        if self._history:
            self._cursor = self._history.pop()
        else:
            end = len(self.sample.items) if self._cursor is None else self._cursor
            self._cursor = max(end - 1, 0) if self.sample.items else None
        return self.current()

    def _move(self, cursor: int | None) -> LabelItem | None:
        if self._cursor is not None and cursor != self._cursor:
            self._history.append(self._cursor)
        self._cursor = cursor
        return self.current()

    def _next_unlabelled(self, after: int | None) -> int | None:
        """The first unlabelled item after ``after``, wrapping round (``after`` itself last)."""
        n = len(self.sample.items)
        start = -1 if after is None else after
        for step in range(1, n + 1):
            index = (start + step) % n
            if self.sample.items[index].output_hash not in self._labels:
                return index
        return None

    def _level(self, value: int | str) -> int:
        try:
            level: int | None = parse_label(value, "label", 0)
        except LabelError:
            level = None
        if level is None or level not in self.levels:
            raise LabellingError(
                f"label {value!r} is not one of the rubric's levels {list(self.levels)}"
            )
        return level

    def _save(self, item: LabelItem, level: int) -> None:
        frame = pl.DataFrame(
            {
                "case_id": [item.case_id],
                "output_hash": [item.output_hash],
                "rater": [self.rater],
                "label": [level],
                "scorer": [self.sample.scorer],
                "source": [self.source],
            }
        )
        # open for this one write: between labels the file is free for the other rater's
        # session, a notebook reading it, or a run
        with open_store(self.db, wait_s=self.wait_s, write=True) as store:
            store.save_human_labels(frame)


def open_labelling(
    db: str | Path,
    run: str,
    rater: str,
    *,
    sample: int = DEFAULT_SAMPLE,
    stratify: Stratify = "tag",
    scorer: str = "judge",
    seed: int = 0,
    rubric: str | Path | None = None,
    roots: Sequence[str | Path] = (),
    levels: Sequence[int] | None = None,
    wait_s: float = WAIT_S,
    names: SettingNames = CLI_NAMES,
) -> LabellingSession:
    """A labelling session for ``rater`` on :func:`sample_outputs` of ``run`` in the store at
    ``db``, resuming after the labels this rater already gave these outputs (from a session
    or an imported sheet). The store is read and closed again.
    """
    with open_store(db, read_only=True, wait_s=wait_s) as store:
        chosen = sample_outputs(
            store, run, sample=sample, stratify=stratify, scorer=scorer, seed=seed,
            rubric=rubric, roots=roots, names=names,
        )  # fmt: skip
        stored = store.human_labels(scorer)
    mine = stored.filter(
        (pl.col("rater") == str(rater).strip()) & pl.col("output_hash").is_not_null()
    )
    existing = dict(mine.select("output_hash", "label").rows())
    return LabellingSession(chosen, rater, db, existing=existing, levels=levels, wait_s=wait_s)

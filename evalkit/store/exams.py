"""The pinned exam of a promotion: the corpus as promoted, file by file (issue 42, rule 1).

``evalkit baseline promote`` stores every file the promoted run's verdicts depend on — the case
files under ``cases/`` and ``sealed/``, every file a case references (schemas, rubrics, SQL
fixture databases, ``python_tests`` files) and the source of each custom scorer module (as
``module:NAME``) — so the gate can judge a candidate on that exam without the pull request's
files (`evalkit.compare.exam`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb
    import polars as pl


@dataclass(frozen=True, kw_only=True)
class StoredExam:
    """One pinned exam: which run it was promoted with, by whom and when, and its files
    (path relative to the corpus root, or ``module:NAME``, -> content)."""

    exam_id: str
    run_id: str
    suite: str
    tier: str | None
    who: str
    promoted_at: dt.datetime | None
    root: str
    files: dict[str, bytes] = field(repr=False)
    # ``{path: sha256}`` as stored, when ``files`` was read without its contents (``exam(...,
    # contents=False)``: `exam_contents` reads the files wanted).
    hashes: dict[str, str] | None = field(default=None, repr=False)

    def file_hashes(self) -> dict[str, str]:
        """``{path: sha256}`` of every pinned file."""
        if self.hashes is not None:
            return dict(sorted(self.hashes.items()))
        return {p: hashlib.sha256(c).hexdigest() for p, c in sorted(self.files.items())}


class ExamRecords:
    """Store methods for pinned exams (mixed into :class:`evalkit.store.Store`)."""

    if TYPE_CHECKING:  # read-only: Store's property

        @property
        def _con(self) -> duckdb.DuckDBPyConnection: ...

    _frame: Callable[..., pl.DataFrame]

    def save_exam(
        self, run_id: str, suite: str, tier: str | None, who: str, root: str,
        files: Mapping[str, bytes], promoted_at: dt.datetime | None = None,
    ) -> str:  # fmt: skip
        """Pin ``files`` as the exam of ``run_id``'s promotion made at ``promoted_at`` (its
        ``baselines`` row's time: the gate trusts an exam only as far as that promotion);
        returns the exam id."""
        exam_id = uuid.uuid4().hex[:16]
        now = promoted_at or dt.datetime.now(dt.UTC)
        rows = [
            (exam_id, path, hashlib.sha256(content).hexdigest(), content)
            for path, content in sorted(files.items())
        ]
        self._con.execute(
            "INSERT INTO exams (exam_id, run_id, suite, tier, who, promoted_at, root, n_files) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [exam_id, run_id, suite, tier, who, now, root, len(rows)],
        )
        if rows:
            self._con.executemany(
                "INSERT INTO exam_files (exam_id, path, sha256, content) VALUES (?, ?, ?, ?)", rows
            )
        return exam_id

    def exam(
        self,
        run_id: str,
        promotions: Sequence[dt.datetime] | None = None,
        *,
        contents: bool = True,
    ) -> StoredExam | None:
        """The newest exam pinned with a promotion of ``run_id`` — with one of ``promotions``
        (their times: the trusted ones, `evalkit.compare.trust`) when given; None when none was
        (a store from before exams, a promotion that could not read the run's corpus).
        ``contents`` False: its files' hashes alone (``hashes``; `exam_contents` reads files)."""
        if not self._has_exams():
            return None
        rows = self._con.execute(
            "SELECT exam_id, run_id, suite, tier, who, promoted_at, root FROM exams "
            "WHERE run_id = ? ORDER BY promoted_at DESC",
            [run_id],
        ).fetchall()
        if promotions is not None:
            trusted = {_instant(t) for t in promotions}
            rows = [r for r in rows if _instant(r[5]) in trusted]
        if not rows:
            return None
        exam_id, run, suite, tier, who, promoted_at, root = rows[0]
        if not contents:
            hashes = self._con.execute(
                "SELECT path, sha256 FROM exam_files WHERE exam_id = ? ORDER BY path", [exam_id]
            ).fetchall()
            return StoredExam(
                exam_id=exam_id, run_id=run, suite=suite, tier=tier, who=who,
                promoted_at=promoted_at, root=root, files={}, hashes=dict(hashes),
            )  # fmt: skip
        files = self._con.execute(
            "SELECT path, content FROM exam_files WHERE exam_id = ? ORDER BY path", [exam_id]
        ).fetchall()
        return StoredExam(
            exam_id=exam_id,
            run_id=run,
            suite=suite,
            tier=tier,
            who=who,
            promoted_at=promoted_at,
            root=root,
            files={path: bytes(content) for path, content in files},
        )

    def exam_contents(self, exam_id: str, paths: Sequence[str]) -> dict[str, bytes]:
        """``{path: content}`` of the pinned files ``paths`` of exam ``exam_id``."""
        if not paths:
            return {}
        rows = self._con.execute(
            "SELECT path, content FROM exam_files WHERE exam_id = ? AND list_contains(?, path)",
            [exam_id, list(paths)],
        ).fetchall()
        return {path: bytes(content) for path, content in rows}

    def _has_exams(self) -> bool:
        """False for a store made before exams were pinned, opened read-only."""
        rows = self._con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = 'exam_files'"
        ).fetchall()
        return bool(rows[0][0])


def _instant(value: dt.datetime | None) -> float | None:
    """A timestamp as seconds since the epoch (naive ones read as UTC), to match two records."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return round(value.timestamp(), 6)

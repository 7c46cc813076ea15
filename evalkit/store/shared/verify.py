"""A published run checked as one unit before a pull takes it: what the pusher sealed, the
shared tables must still hold, row for row.

A push records a *seal* with the rows that publish them: the run's ``runs`` row carries the row
count and a content digest of its ``cases`` and ``outputs``, each ``scorings`` row those of its
``scores`` and ``scoring_cases`` (column ``published``, a JSON object; only the shared tables
have it). Anyone who can append to the shared tables can append rows naming a published run,
so a pull reads the run's rows and refuses them unless:

- each key is there once (one ``runs`` row, one ``scorings`` row per scoring, one case per
  case id, one output per (case, replay), one score per (case, replay, scorer, scoring));
- every output's and score's case id is one of the run's cases (its manifest's corpus: the
  cases the run recorded, whose ids and hashes give the manifest's corpus hash);
- every score belongs to one of the run's scorings;
- each sealed table's rows count and digest as sealed.

A run pushed before seals existed has none: its rows get every check but the last. A
promotion must name a published run that passes them (:func:`verify_promotions`). A promotion's
pinned exam (its ``exams`` row sealing its ``exam_files``) always carries a seal, and must be
what its push sealed, file for file (:func:`verify_exams`).

Examples:
    >>> import pyarrow as pa
    >>> rows = pa.table({"case_id": ["b", "a"], "replay": [0, 0]})
    >>> seal = table_seal(rows)
    >>> seal["rows"], seal == table_seal(rows.take([1, 0]))  # row order does not matter
    (2, True)
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

from evalkit.errors import StoreError

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    import polars as pl
    import pyarrow as pa

#: The column of the shared ``runs`` and ``scorings`` tables that holds a seal (JSON).
SEAL_COLUMN = "published"
#: Which tables' seals each sealing table carries.
SEALED_BY = {
    "runs": ("cases", "outputs"),
    "scorings": ("scores", "scoring_cases"),
    "exams": ("exam_files",),
}
#: What names one row of a run's table: a second row with the same values is a forgery.
IDENTITY: dict[str, tuple[str, ...]] = {
    "runs": ("run_id",),
    "cases": ("case_id",),
    "outputs": ("case_id", "replay"),
    "scorings": ("scoring_id",),
    "scores": ("scoring_id", "case_id", "replay", "scorer", "scorer_index"),
    "scoring_cases": ("scoring_id", "case_id"),
    "exams": ("exam_id",),
    "exam_files": ("exam_id", "path"),
}


class UnverifiedRun(StoreError):
    """A published run whose shared rows are not what its pusher sealed (one line: the run,
    the table and what is wrong); nothing of it is pulled."""

    def __init__(self, run_id: str, table: str, problem: str) -> None:
        super().__init__(
            f"run {run_id}: shared table {table} {problem}; refusing to pull it (nothing "
            "written locally): rows were added or changed after its push, see who committed "
            "them in the table's snapshot history"
        )
        self.run_id = run_id
        self.table = table


def table_seal(rows: pa.Table) -> dict[str, Any]:
    """``{"rows": n, "sha256": digest}`` of ``rows``, whatever their order: the sha256 of
    each row's canonical JSON (sorted keys; timestamps in ISO form), the lines sorted."""
    lines = sorted(
        json.dumps(row, sort_keys=True, default=_iso, ensure_ascii=False)
        for row in rows.to_pylist()
    )
    digest = hashlib.sha256()
    for line in lines:
        digest.update(line.encode("utf-8"))
        digest.update(b"\n")
    return {"rows": rows.num_rows, "sha256": digest.hexdigest()}


def _iso(value: Any) -> str:
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def seal_of(tables: Mapping[str, pa.Table]) -> str:
    """The seal (JSON text) of ``tables`` (name -> the rows a push publishes)."""
    return json.dumps({name: table_seal(rows) for name, rows in tables.items()}, sort_keys=True)


#: The column naming the rows a sealing table's row seals, per sealing table and per sealed one.
SEAL_GROUP = {
    "runs": "run_id", "cases": "run_id", "outputs": "run_id",
    "scorings": "scoring_id", "scores": "scoring_id", "scoring_cases": "scoring_id",
    "exams": "exam_id", "exam_files": "exam_id",
}  # fmt: skip


def sealed(
    name: str, rows: pa.Table, seals: Mapping[str, Mapping[Any, Mapping[str, Any]]]
) -> pa.Table:
    """``rows`` of table ``name`` to push, each with the seal of the rows it publishes where
    ``name`` is a sealing table (``seals``: per sealed table, the seal of each group of its
    rows, keyed by :data:`SEAL_GROUP`'s column: :class:`~evalkit.store.shared.seals.SealBuilder`).

    Examples:
        >>> import pyarrow as pa
        >>> runs = pa.table({"run_id": ["r1"], "published": pa.nulls(1, pa.string())})
        >>> cases = pa.table({"run_id": ["r1"], "case_id": ["a"]})
        >>> made = sealed("runs", runs, {"cases": {"r1": table_seal(cases)}, "outputs": {}})
        >>> json.loads(made["published"][0].as_py())["cases"] == table_seal(cases)
        True
    """
    import pyarrow as pa

    from evalkit.store.shared.seals import empty_seal

    if name not in SEALED_BY or not rows.num_rows:
        return rows
    texts = [
        json.dumps(
            {t: dict(seals[t].get(key) or empty_seal()) for t in SEALED_BY[name]}, sort_keys=True
        )
        for key in rows.column(SEAL_GROUP[name]).to_pylist()
    ]
    index = rows.schema.get_field_index(SEAL_COLUMN)
    return rows.set_column(index, SEAL_COLUMN, pa.array(texts, pa.string()))


def verify_run(run_id: str, frames: Mapping[str, pl.DataFrame]) -> None:
    """Check the shared rows of published run ``run_id`` (``frames``: ``runs``, ``cases``,
    ``outputs``, ``scorings``, ``scores``, ``scoring_cases`` as read for it).

    Raises:
        UnverifiedRun: the first table found not to be what the push sealed.
    """
    import polars as pl

    runs = frames["runs"]
    if runs.height != 1:
        problem = "has no row for it" if not runs.height else f"has {runs.height} rows for it"
        raise UnverifiedRun(run_id, "runs", f"{problem} (a published run has one)")
    for name in ("cases", "outputs", "scorings", "scores", "scoring_cases"):
        _unique(run_id, name, frames[name])
    case_ids = set(frames["cases"]["case_id"].to_list())
    for name in ("outputs", "scores", "scoring_cases"):
        strangers = frames[name].filter(~pl.col("case_id").is_in(list(case_ids)))
        if strangers.height:
            shown = ", ".join(sorted({str(c) for c in strangers["case_id"].to_list()})[:3])
            raise UnverifiedRun(
                run_id, name, f"has {strangers.height} rows for case ids the run does not "
                f"have (e.g. {shown})"
            )  # fmt: skip
    scoring_ids = set(frames["scorings"]["scoring_id"].to_list())
    orphans = frames["scores"].filter(~pl.col("scoring_id").is_in(list(scoring_ids)))
    if orphans.height:
        raise UnverifiedRun(run_id, "scores", f"has {orphans.height} rows of no scoring of the run")
    sealed = _seal(runs.row(0, named=True))
    if sealed is None:
        return  # pushed before seals: the checks above are all there is
    _check_seal(run_id, sealed, frames, SEALED_BY["runs"])
    for scoring in frames["scorings"].iter_rows(named=True):
        scoring_seal = _seal(scoring)
        if scoring_seal is None:
            raise UnverifiedRun(
                run_id, "scorings", f"has scoring {scoring['scoring_id']} with no seal"
            )
        of_scoring = {
            name: frames[name].filter(pl.col("scoring_id") == scoring["scoring_id"])
            for name in SEALED_BY["scorings"]
        }
        _check_seal(run_id, scoring_seal, of_scoring, SEALED_BY["scorings"])


def verify_promotions(promotions: pl.DataFrame, published: Iterable[str]) -> None:
    """Every promotion in ``promotions`` names one of the ``published`` runs.

    Raises:
        StoreError: one names a run the shared store has no ``runs`` row for.
    """
    known = set(published)
    for row in promotions.iter_rows(named=True):
        if row["run_id"] not in known:
            raise StoreError(
                f"run {row['run_id']}: shared table baselines promotes it for suite "
                f"{row['suite']!r} (by {row['who']!r}), but the run was never published; "
                "refusing to pull (nothing written locally)"
            )


def verify_exams(exams: pl.DataFrame, files: pl.DataFrame) -> None:
    """Check the shared pinned exams of a pull (``exams`` rows and their ``exam_files``): each
    exam once, each of its files once and hashing to its ``sha256``, and its files what its
    push sealed (an exam is trusted as far as its promotion: a file added or changed since
    would change what the gate judges on).

    Raises:
        UnverifiedRun: the first exam found not to be what its push sealed, naming its run.
    """
    import hashlib

    import polars as pl

    for exam in exams.iter_rows(named=True):
        run_id, exam_id = str(exam["run_id"]), exam["exam_id"]
        own = {"exams": exams.filter(pl.col("exam_id") == exam_id)}
        own["exam_files"] = files.filter(pl.col("exam_id") == exam_id)
        for name, frame in own.items():
            _unique(run_id, name, frame)
        for path, digest, content in own["exam_files"].select("path", "sha256", "content").rows():
            if hashlib.sha256(content or b"").hexdigest() != digest:
                raise UnverifiedRun(
                    run_id, "exam_files", f"holds pinned file {path} whose content is not its hash"
                )
        seal = _seal(exam)
        if seal is None:
            raise UnverifiedRun(run_id, "exams", f"has exam {exam_id} with no seal")
        _check_seal(run_id, seal, own, SEALED_BY["exams"])


def _seal(row: Mapping[str, Any]) -> dict[str, Any] | None:
    text = row.get(SEAL_COLUMN)
    if not text:
        return None
    try:
        seal = json.loads(text)
    except ValueError:
        seal = None
    if not isinstance(seal, dict):
        raise UnverifiedRun(str(row.get("run_id")), "runs", "holds a seal that is not JSON")
    return seal


def _unique(run_id: str, name: str, frame: pl.DataFrame) -> None:
    key = list(IDENTITY[name])
    doubled = frame.height - frame.select(key).unique().height
    if doubled:
        what = ", ".join(IDENTITY[name])
        raise UnverifiedRun(run_id, name, f"has {doubled} rows repeating a ({what}) of another")


def _check_seal(
    run_id: str, seal: Mapping[str, Any], frames: Mapping[str, pl.DataFrame], names: Iterable[str]
) -> None:
    for name in names:
        want = seal.get(name)
        if not isinstance(want, dict):
            raise UnverifiedRun(run_id, name, "is missing from the run's seal")
        got = table_seal(frames[name].to_arrow())
        if got["rows"] != want.get("rows"):
            raise UnverifiedRun(
                run_id, name, f"holds {got['rows']} rows of it where its push sealed "
                f"{want.get('rows')}"
            )  # fmt: skip
        if got["sha256"] != want.get("sha256"):
            raise UnverifiedRun(run_id, name, "holds rows whose content differs from its seal")

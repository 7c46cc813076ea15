"""Human labels: read a CSV or JSONL file of ratings, validate it, and store it for calibration.

One label per line, with these columns (CSV header or JSON keys):

=============  ========  ===================================================================
column         required  meaning
=============  ========  ===================================================================
case_id        one of    the case the rater judged
output_hash    the two   :func:`output_hash` of the exact output text the rater read
rater          yes       who labelled (any name; the judge is never a rater here)
label          yes       an integer score level (``4``), or a word: ``pass``/``true`` -> 1,
                         ``fail``/``false`` -> 0 (JSON ``true``/``false`` likewise)
scorer         no        which check the label is for (default ``judge``)
note           no        free text, ignored
=============  ========  ===================================================================

A labelling sheet (``evalkit labels export``, :mod:`evalkit.judges.labelling`) imports as it is:
its context columns (:data:`SHEET_COLUMNS`: item, stratum, input, output, rubric) are read and
ignored, and its rows left without a label are skipped (in any other file an empty label is an
error). A quoted CSV cell may span lines, as a sheet's inputs and outputs do. A CSV sheet's
cells that a spreadsheet would run as a formula were written with a leading ``'``
(:func:`neutralise_cell`); import takes it off again (:func:`restore_cell`), so the labels name
the very case ids, hashes and raters the sheet was made from.

Blank lines and, in CSV, lines starting with ``#`` are skipped. A bad value is a one-line
:class:`LabelError` naming ``file:line`` (the CLI exits 2). A label is keyed by (case_id,
output_hash, rater, scorer): a key twice in one file is an error, and importing a file again
replaces the stored labels instead of adding them twice.

A label with only a ``case_id`` describes "the output of that case"; ``--run RUN`` pins it to
the hash of that run's output (replay 0), so it is never compared with a different answer.

Examples:
    >>> output_hash("Refund issued.")[:12]
    '50b2fadcc141'
    >>> parse_label("pass", "labels.csv", 3), parse_label("4", "labels.csv", 4)
    (1, 4)
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from evalkit.errors import EvalkitError

if TYPE_CHECKING:
    from evalkit.store import Store

__all__ = [
    "FAIL_WORDS",
    "LABEL_COLUMNS",
    "PASS_WORDS",
    "SHEET_COLUMNS",
    "LabelError",
    "LabelImport",
    "import_labels",
    "neutralise_cell",
    "output_hash",
    "parse_label",
    "read_labels",
    "restore_cell",
]

PASS_WORDS = frozenset({"pass", "passed", "true"})
FAIL_WORDS = frozenset({"fail", "failed", "false"})
LABEL_COLUMNS = ("case_id", "output_hash", "rater", "label", "scorer", "note")
#: What a labelling sheet shows the rater besides the label columns; import ignores them.
SHEET_COLUMNS = ("item", "stratum", "input", "output", "rubric")
_HASH = re.compile(r"[0-9a-f]{64}")
#: A cell starting with one of these is a formula to a spreadsheet (OWASP "CSV Injection");
#: ``'`` is there so that a cell that already starts with the escape survives the round trip.
_FORMULA_LEADS = ("=", "+", "-", "@", "\t", "\r", "'")
_FRAME_SCHEMA = pl.Schema(
    {
        "case_id": pl.String,
        "output_hash": pl.String,
        "rater": pl.String,
        "label": pl.Int32,
        "scorer": pl.String,
        "source": pl.String,
        "line": pl.Int32,
    }
)


class LabelError(EvalkitError):
    """A label file problem, rendered ``file:line: message`` (one line).

    Examples:
        >>> str(LabelError("rater is empty", path="h.csv", line=4))
        'h.csv:4: rater is empty'
    """

    def __init__(self, message: str, *, path: str | Path, line: int | None = None) -> None:
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {' '.join(str(message).split())}")


def output_hash(text: str) -> str:
    """The id of an output text: sha256 of its UTF-8 bytes, as 64 hex digits.

    Labels, calibration and the pairwise judge all use this one definition.
    """
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def neutralise_cell(text: str) -> str:
    """A CSV cell no spreadsheet runs as a formula: a leading ``'`` before ``= + - @``, tab, CR
    (and ``'``), as the OWASP CSV-injection guidance says; :func:`restore_cell` undoes it.

    Examples:
        >>> neutralise_cell("=1+1"), neutralise_cell("-2"), neutralise_cell("Refund issued.")
        ("'=1+1", "'-2", 'Refund issued.')
        >>> all(restore_cell(neutralise_cell(t)) == t for t in ["-1", "'=", "''", "@a", ""])
        True
    """
    return "'" + text if text.startswith(_FORMULA_LEADS) else text


def restore_cell(text: str) -> str:
    """The cell :func:`neutralise_cell` was given: its leading ``'`` taken off again."""
    return text[1:] if text.startswith("'") and text[1:].startswith(_FORMULA_LEADS) else text


def parse_label(value: Any, path: str | Path, line: int) -> int:
    """An integer label from a cell: an integer (``"4"``, ``4``) or a pass/fail word (1/0).

    Raises:
        LabelError: anything else, naming ``path:line``.
    """
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        word = value.strip().lower()
        if word in PASS_WORDS:
            return 1
        if word in FAIL_WORDS:
            return 0
        if re.fullmatch(r"[+-]?\d+", word):
            return int(word)
    raise LabelError(
        f"label {value!r} is not an integer score level or pass/fail", path=path, line=line
    )


def read_labels(path: str | Path) -> pl.DataFrame:
    """Read and validate a label file (``.csv``, ``.jsonl`` or ``.ndjson``).

    Returns one row per label: ``case_id, output_hash, rater, label, scorer, source, line``.

    Raises:
        LabelError: unreadable file, unknown or missing column, bad value, duplicate key.
    """
    file = Path(path)
    suffix = file.suffix.lower()
    if suffix not in (".csv", ".jsonl", ".ndjson"):
        raise LabelError("label files must be .csv or .jsonl", path=file)
    try:
        text = file.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise LabelError("no such file", path=file) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise LabelError(f"cannot read the file ({type(exc).__name__})", path=file) from None
    records = _csv_records(text, file) if suffix == ".csv" else _jsonl_records(text, file)
    rows: list[dict[str, Any]] = []
    seen: dict[tuple[str, str, str, str], int] = {}
    for line, record in records:
        if "output" in record and _blank(record.get("label")):
            continue  # a sheet's row nobody labelled (yet): not a mistake, just not a label
        row = _validated(record, file, line)
        key = (row["case_id"] or "", row["output_hash"] or "", row["rater"], row["scorer"])
        if key in seen:
            item = row["case_id"] or row["output_hash"]
            raise LabelError(
                f"rater {row['rater']!r} labelled {item} for scorer {row['scorer']!r} twice "
                f"(first on line {seen[key]})",
                path=file,
                line=line,
            )
        seen[key] = line
        rows.append({**row, "source": str(file), "line": line})
    if not rows:
        raise LabelError("no labels in the file", path=file)
    return pl.DataFrame(rows, schema=_FRAME_SCHEMA)


def _csv_records(text: str, file: Path) -> list[tuple[int, dict[str, Any]]]:
    header: list[str] | None = None
    records: list[tuple[int, dict[str, Any]]] = []
    for number, cells in _csv_rows(text, file):
        cells = [c.strip() for c in cells]
        if header is None:
            header = cells
            _check_columns(header, file, number)
            continue
        if len(cells) != len(header):
            raise LabelError(
                f"{len(cells)} cells but the header has {len(header)} columns",
                path=file,
                line=number,
            )
        if "output" in header:  # a labelling sheet: its cells were neutralised on export
            cells = [restore_cell(c) for c in cells]
        values = [v if v != "" else None for v in cells]
        records.append((number, dict(zip(header, values, strict=True))))
    if header is None:
        raise LabelError("empty file: expected a header such as case_id,rater,label", path=file)
    return records


def _csv_rows(text: str, file: Path) -> Iterator[tuple[int, list[str]]]:
    """(first line, cells) of each CSV record. A record goes on over the next lines while a
    quoted cell is open (a sheet's outputs hold newlines); blank and ``#`` lines between
    records are skipped."""
    start, pending = 0, ""
    for number, raw in enumerate(io.StringIO(text, newline=""), start=1):
        if not pending:
            if not raw.strip() or raw.lstrip().startswith("#"):
                continue
            start = number
        pending += raw
        try:
            rows = list(csv.reader(io.StringIO(pending, newline=""), strict=True))
        except csv.Error as exc:
            if "unexpected end of data" in str(exc):
                continue  # a quoted cell still open: the record goes on on the next line
            raise LabelError(f"bad CSV ({exc})", path=file, line=start) from None
        pending = ""
        yield start, rows[0]
    if pending:
        raise LabelError("bad CSV (a quoted cell is never closed)", path=file, line=start)


def _jsonl_records(text: str, file: Path) -> list[tuple[int, dict[str, Any]]]:
    records: list[tuple[int, dict[str, Any]]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise LabelError(f"not JSON ({exc.msg})", path=file, line=number) from None
        if not isinstance(record, dict):
            raise LabelError("each line must be a JSON object", path=file, line=number)
        _check_columns(list(record), file, number)
        records.append((number, record))
    return records


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _check_columns(columns: list[str], file: Path, line: int) -> None:
    unknown = [c for c in columns if c not in LABEL_COLUMNS and c not in SHEET_COLUMNS]
    if unknown:
        raise LabelError(
            f"unknown column {unknown[0]!r} (columns: {', '.join(LABEL_COLUMNS)})",
            path=file,
            line=line,
        )
    if len(set(columns)) != len(columns):
        raise LabelError("a column appears twice", path=file, line=line)
    missing = [c for c in ("rater", "label") if c not in columns]
    if not ("case_id" in columns or "output_hash" in columns):
        missing.insert(0, "case_id or output_hash")
    if missing:
        raise LabelError(f"missing column {missing[0]}", path=file, line=line)


def _validated(record: dict[str, Any], file: Path, line: int) -> dict[str, Any]:
    def text(name: str) -> str | None:
        value = record.get(name)
        if value is None:
            return None
        if not isinstance(value, str | int) or isinstance(value, bool):
            raise LabelError(f"{name} must be text, got {value!r}", path=file, line=line)
        return str(value).strip() or None

    case_id, digest, rater = text("case_id"), text("output_hash"), text("rater")
    if case_id is None and digest is None:
        raise LabelError("needs a case_id or an output_hash", path=file, line=line)
    if digest is not None and not _HASH.fullmatch(digest):
        raise LabelError(
            f"output_hash {digest[:20]!r} is not a sha256 (64 lower-case hex digits)",
            path=file,
            line=line,
        )
    if rater is None:
        raise LabelError("rater is empty", path=file, line=line)
    if record.get("label") is None:
        raise LabelError("label is empty", path=file, line=line)
    label = parse_label(record["label"], file, line)
    return {
        "case_id": case_id,
        "output_hash": digest,
        "rater": rater,
        "label": label,
        "scorer": text("scorer") or "judge",
    }


@dataclass(frozen=True)
class LabelImport:
    """What ``evalkit labels import`` stored."""

    source: str
    labels: int
    replaced: int  # stored labels with the same key that these replaced
    raters: tuple[str, ...]
    items: int  # distinct (case_id, output_hash)
    scorers: tuple[str, ...]
    run_id: str | None  # the run the labels were pinned to, if any

    @property
    def new(self) -> int:
        return self.labels - self.replaced


def import_labels(store: Store, path: str | Path, run: str | None = None) -> LabelImport:
    """Read, validate and store a label file; with ``run``, pin each label to that run's output.

    Pinning fills the missing half of each label from the run's replay-0 outputs: a case-only
    label gets the hash of the case's output, a hash-only label gets its case id, and a label
    with both must agree with the run.

    Raises:
        LabelError: a bad file, or (with ``run``) a label the run has no output for.
    """
    frame = read_labels(path)
    run_id = None
    if run is not None:
        run_id = store.resolve_run(run)
        frame = _pin(frame, store.outputs(run_id), run_id)
    replaced = store.save_human_labels(frame.drop("line"))
    return LabelImport(
        source=str(path),
        labels=frame.height,
        replaced=replaced,
        raters=tuple(sorted(frame["rater"].unique().to_list())),
        items=frame.select("case_id", "output_hash").unique().height,
        scorers=tuple(sorted(frame["scorer"].unique().to_list())),
        run_id=run_id,
    )


def _pin(frame: pl.DataFrame, outputs: pl.DataFrame, run_id: str) -> pl.DataFrame:
    first = outputs.filter((pl.col("replay") == 0) & pl.col("text").is_not_null())
    by_case = {c: output_hash(t) for c, t in first.select("case_id", "text").rows()}
    by_hash: dict[str, set[str]] = {}
    for case_id, digest in by_case.items():
        by_hash.setdefault(digest, set()).add(case_id)
    rows = []
    for row in frame.iter_rows(named=True):
        where = {"path": row["source"], "line": row["line"]}
        case_id, digest = row["case_id"], row["output_hash"]
        if digest is None:
            if case_id not in by_case:
                raise LabelError(f"run {run_id} has no output for case {case_id}", **where)
            digest = by_case[case_id]
        elif digest not in by_hash:
            raise LabelError(f"run {run_id} has no output with hash {digest[:12]}…", **where)
        elif case_id is not None and case_id not in by_hash[digest]:
            owners = ", ".join(sorted(by_hash[digest]))
            raise LabelError(
                f"output {digest[:12]}… belongs to {owners} in run {run_id}, not {case_id}",
                **where,
            )
        elif case_id is None and len(by_hash[digest]) == 1:
            case_id = next(iter(by_hash[digest]))
        rows.append({**row, "case_id": case_id, "output_hash": digest})
    return pl.DataFrame(rows, schema=_FRAME_SCHEMA)

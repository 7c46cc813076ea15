"""Reading JSON, JSON Lines and CSV that evalkit did not write: bounded by the whole file.

Imported logs and production traces are someone else's files. Whatever they hold, reading one
ends in plain data of bounded size or one :class:`~evalkit.errors.CorpusError` naming the file
(and line): a line or document larger than :data:`MAX_DOCUMENT_BYTES` is refused before it is
held whole, nesting deeper than :data:`MAX_JSON_DEPTH` is refused (never a ``RecursionError``
further on), and text that is not UTF-8 is refused where it is. Every JSON value the readers
hand on was at most :data:`MAX_DOCUMENT_BYTES` of text, which bounds what parsing it can cost
(a few hundred MB for the worst-case shapes, such as millions of empty objects).

Examples:
    >>> json_value('{"a": [1, 2]}', "rows.jsonl", 3)
    {'a': [1, 2]}
    >>> json_value("[" * 100 + "]" * 100, "rows.jsonl", 4)
    Traceback (most recent call last):
    ...
    evalkit.errors.CorpusError: rows.jsonl:4: JSON nested deeper than 64 levels
"""

from __future__ import annotations

import codecs
import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from evalkit.errors import CorpusError

#: One JSON document (a line of JSON Lines, a zip member, a whole file) or one CSV line.
MAX_DOCUMENT_BYTES = 16 << 20
MAX_JSON_DEPTH = 64
#: The csv module's own default field limit, refused in one line rather than raised.
MAX_CSV_CELL_CHARS = 131_072


def json_value(
    text: str | bytes, path: str | Path, line: int | None = None, invalid: str = "invalid JSON"
) -> Any:
    """``text`` parsed as JSON, refused in one line when too large, too deep or not JSON
    (``invalid`` says that last).

    Raises:
        CorpusError: ``path:line: what is wrong``.
    """
    if len(text) > MAX_DOCUMENT_BYTES:
        raise CorpusError(_too_large(len(text)), path=path, line=line)
    try:
        value = json.loads(text)
    except RecursionError:
        too_deep_error = f"JSON nested deeper than {MAX_JSON_DEPTH} levels"
        raise CorpusError(too_deep_error, path=path, line=line) from None
    except UnicodeDecodeError as exc:
        raise CorpusError(f"not UTF-8 text ({exc.reason})", path=path, line=line) from None
    except ValueError as exc:
        raise CorpusError(f"{invalid}: {str(exc)[:200]}", path=path, line=line) from None
    if too_deep(value):
        raise CorpusError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels", path=path, line=line)
    return value


def loads_or_none(text: str) -> Any:
    """``text`` as JSON, or None when it is not JSON or nests too deeply (a string found inside
    an already bounded document, such as a tool call's arguments).

    Examples:
        >>> loads_or_none('{"order": 8812}'), loads_or_none("not json"), loads_or_none("[" * 9999)
        ({'order': 8812}, None, None)
    """
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return None if too_deep(value) else value


def too_deep(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``value`` nests lists and dicts more than ``limit`` levels (walked without
    recursion).

    Examples:
        >>> too_deep({"a": [[1]]}, 3), too_deep({"a": [[1]]}, 2)
        (False, True)
    """
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = (
            item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        )
        for child in children:
            if isinstance(child, dict | list):
                if depth + 1 > limit:
                    return True
                stack.append((child, depth + 1))
    return False


def read_document(path: str | Path) -> Any:
    """A whole file as one JSON document, refused (before reading) when it is larger than
    :data:`MAX_DOCUMENT_BYTES`.

    Raises:
        CorpusError: unreadable, too large, not UTF-8, not JSON or too deep.
    """
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_DOCUMENT_BYTES:
            raise CorpusError(_too_large(size), path=path)
        data = path.read_bytes()
    except OSError as exc:
        raise CorpusError(f"cannot read: {exc.strerror or exc}", path=path) from None
    return json_value(data, path)


def text_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of each line, streamed: a line longer than
    :data:`MAX_DOCUMENT_BYTES` or not UTF-8 is refused at its number (a leading BOM is dropped).

    Raises:
        CorpusError: unreadable file, a line too long or not UTF-8.
    """
    path = Path(path)
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise CorpusError(f"cannot read: {exc.strerror or exc}", path=path) from None
    with handle:
        yield from _decoded_lines(handle, path)


def json_lines(path: str | Path, invalid: str = "invalid JSON") -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` of each non-blank line of a JSON Lines file, streamed.

    Raises:
        CorpusError: as :func:`text_lines` and :func:`json_value`, naming the line.
    """
    for number, text in text_lines(path):
        if text.strip():
            yield number, json_value(text, path, number, invalid)


def csv_records(path: str | Path) -> Iterator[tuple[int, dict[str, str]]]:
    """``(line number, row)`` of a CSV file with a header row, streamed; a cell longer than
    :data:`MAX_CSV_CELL_CHARS`, a line too long or text that is not UTF-8 refused at its line.

    Raises:
        CorpusError: ``path:line: what is wrong``.
    """
    path = Path(path)
    at = [0]  # the number of the last line the reader took

    def lines() -> Iterator[str]:
        for number, text in text_lines(path):
            at[0] = number
            yield text

    reader = csv.DictReader(lines())
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            line = at[0]
            if "field larger than field limit" in str(exc):
                message = f"a cell is longer than {MAX_CSV_CELL_CHARS:,} characters"
            else:
                message = f"bad CSV ({exc})"
            raise CorpusError(message, path=path, line=line) from None
        yield at[0], {k: v for k, v in row.items() if k is not None}


def _decoded_lines(handle: BinaryIO, path: Path) -> Iterator[tuple[int, str]]:
    number = 0
    while raw := handle.readline(MAX_DOCUMENT_BYTES + 1):
        number += 1
        if len(raw) > MAX_DOCUMENT_BYTES:
            raise CorpusError(
                f"line is longer than {MAX_DOCUMENT_BYTES >> 20} MiB; split it", path=path,
                line=number,
            )  # fmt: skip
        if number == 1 and raw.startswith(codecs.BOM_UTF8):
            raw = raw[len(codecs.BOM_UTF8) :]
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            where = f"{exc.reason} at byte {exc.start}"
            raise CorpusError(f"not UTF-8 text ({where})", path=path, line=number) from None
        yield number, text


def _too_large(size: int) -> str:
    return (
        f"{size / (1 << 20):.1f} MiB in one JSON document, more than the "
        f"{MAX_DOCUMENT_BYTES >> 20} MiB limit; split it (JSON Lines: one record a line)"
    )

"""The ``--json`` report written to a file as it is encoded, the same bytes as `to_json`.

`to_json` returns the whole document as one string: at a million cases its lists of
always-passing (and unstable, failing-in-both) cases become a million Python strings, then a
million encoded pieces, then the joined text and its UTF-8 bytes, all held at once on top of
the decision's frames. `write_json` writes each piece as it is encoded and reads those lists
from their column (`evalkit.report.case_ids.CaseIds`) a slice at a time.

Examples (a list of ids as `to_json` lays it out, one id a batch; tests/report/test_json_file.py
checks whole reports against `to_json`):
    >>> import io
    >>> out = io.StringIO()
    >>> _write_ids(out, ["a", "b"], batch=1)
    >>> out.getvalue()
    '[\\n    "a",\\n    "b"\\n  ]'
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from json.encoder import encode_basestring_ascii
from typing import TextIO

from evalkit.report.build import Report, to_dict
from evalkit.report.case_ids import CaseIds

#: Ids encoded and written at a time: a slice of the column as Python strings.
_BATCH = 20_000
#: `to_json`'s layout: ``indent=2``; the id lists are values of the top-level object, so their
#: items sit two levels deep and their closing bracket one.
_ITEM, _CLOSE = "\n    ", "\n  "


def write_json(report: Report, out: TextIO) -> None:
    """Write `to_json`'s text of ``report`` to ``out`` as it is encoded: never the whole
    document, nor the id lists as Python strings, at once."""
    token = uuid.uuid4().hex  # no case id or reason can be one of these markers by chance
    later: dict[str, Sequence[str]] = {}

    def mark(ids: Sequence[str]) -> str:
        marker = f"\x00evalkit-case-ids-{token}-{len(later)}"
        later[encode_basestring_ascii(marker)] = ids
        return marker

    encoder = json.JSONEncoder(indent=2, default=str)
    for piece in encoder.iterencode(to_dict(report, case_ids=mark)):
        ids = later.get(piece)
        if ids is None:
            out.write(piece)
        else:
            _write_ids(out, ids)


def _write_ids(out: TextIO, ids: Sequence[str], batch: int | None = None) -> None:
    """``ids`` as `to_json` lays out a top-level list of strings, ``batch`` ids at a time
    (default `_BATCH`)."""
    batch = batch or _BATCH
    if not len(ids):
        out.write("[]")
        return
    out.write("[")
    for start in range(0, len(ids), batch):
        some = (
            ids.series.slice(start, batch).to_list()
            if isinstance(ids, CaseIds)
            else list(ids[start : start + batch])
        )
        out.write(_ITEM + f",{_ITEM}".join(map(encode_basestring_ascii, some)))
        if start + batch < len(ids):
            out.write(",")
    out.write(_CLOSE + "]")

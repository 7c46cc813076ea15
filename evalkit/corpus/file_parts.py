"""Case files evalkit writes (imports, trace samples) cut into files of a bounded size.

A corpus file is read case by case, but a person reviews and diffs it: an import of 60,000 rows
is written as several files of at most ``WRITTEN_FILE_CASES`` cases and about
``WRITTEN_FILE_BYTES`` bytes each, far below what the loader accepts in one file
(``evalkit.corpus.cases.MAX_CASE_FILE_BYTES``, ``MAX_CASES_PER_FILE``), so what evalkit writes
always loads. The first file keeps the name asked for; the next ones are numbered from 2
(``jsonl_rows.yaml``, ``jsonl_rows-2.yaml``, ...).

Examples:
    >>> [len(part) for part in cut_into_files(["- id: a\\n"] * 5, max_cases=2)]
    [2, 2, 1]
    >>> numbered_path(Path("cases/jsonl_rows.yaml"), 3).as_posix()
    'cases/jsonl_rows-3.yaml'
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

#: At most this many cases in one file evalkit writes (a module setting).
WRITTEN_FILE_CASES = 2_000
#: A file evalkit writes closes before this many bytes of cases (one larger case fills one file).
WRITTEN_FILE_BYTES = 2 << 20


def cut_into_files(
    texts: Sequence[str],
    max_cases: int | None = None,
    max_bytes: int | None = None,
) -> list[list[str]]:
    """The case texts, in order, in runs of at most ``max_cases`` cases and ``max_bytes``
    UTF-8 bytes (defaults: the module settings, read now); a case larger than ``max_bytes``
    alone makes a run. No text: no run.

    Examples:
        >>> cut_into_files(["aaaa", "bb", "cc", "d"], max_bytes=4)
        [['aaaa'], ['bb', 'cc'], ['d']]
    """
    max_cases = WRITTEN_FILE_CASES if max_cases is None else max_cases
    max_bytes = WRITTEN_FILE_BYTES if max_bytes is None else max_bytes
    runs: list[list[str]] = []
    current: list[str] = []
    size = 0
    for text in texts:
        length = len(text.encode("utf-8"))
        if current and (len(current) >= max_cases or size + length > max_bytes):
            runs.append(current)
            current, size = [], 0
        current.append(text)
        size += length
    if current:
        runs.append(current)
    return runs


def numbered_path(path: Path, number: int) -> Path:
    """The ``number``-th file of a cut: ``path`` itself for 1, else ``<stem>-<number><suffix>``."""
    return path if number == 1 else path.with_name(f"{path.stem}-{number}{path.suffix}")


def later_parts(path: Path, kept: int) -> list[Path]:
    """Files numbered after ``kept`` that a cut of ``path`` made (``<stem>-<n><suffix>``, n >
    ``kept``), in number order: what a smaller rewrite of the same cut leaves behind."""
    pattern = re.compile(rf"{re.escape(path.stem)}-([0-9]+){re.escape(path.suffix)}")
    found = []
    if path.parent.is_dir():
        for entry in path.parent.iterdir():
            match = pattern.fullmatch(entry.name)
            if match and int(match.group(1)) > kept and entry.is_file():
                found.append((int(match.group(1)), entry))
    return [entry for _, entry in sorted(found)]

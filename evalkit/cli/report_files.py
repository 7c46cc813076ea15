"""A report file the CLI writes (``--json``, ``--junit``, ``--html``, ``--markdown``; a run's
summary): whole or not at all, and a path it cannot write said in one line.

Each is written beside its path under a temporary name and moved over it, so a reader (a CI
step uploading ``report.json``) sees the last report or this one, never half of one, and a
gate stopped mid-write leaves no partial file.

Examples:
    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> write_report(folder / "out" / "r.json", "{}")
    >>> (folder / "out" / "r.json").read_text()
    '{}'
    >>> write_report(folder, "{}")
    Traceback (most recent call last):
    evalkit.errors.EvalkitError: ... cannot write the report: Is a directory (EISDIR)...
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from evalkit.errors import EvalkitError
from evalkit.store.lock import os_reason


def write_report(
    path: str | Path, content: str | Callable[[TextIO], object], what: str = "report"
) -> None:
    """Write ``content`` (a text, or what a function writes into a file) to ``path`` (its
    folders made), atomically; ``what`` names it in the error (``summary``: a run's ``--json``).

    Raises:
        EvalkitError: naming the path, when it cannot be written (a folder, no permission,
            a full disk); nothing is left at the path or beside it.
    """
    target = Path(path)
    temp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        if target.is_dir():
            raise IsADirectoryError(21, "Is a directory", str(target))
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(temp, "w", encoding="utf-8") as out:
            if isinstance(content, str):
                out.write(content)
            else:
                content(out)
        os.replace(temp, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise EvalkitError(f"{target}: cannot write the {what}: {os_reason(exc)}") from None

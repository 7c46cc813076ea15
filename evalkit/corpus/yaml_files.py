"""YAML files on disk: found under a directory (symlinks kept inside the corpus root), read
bounded in size, and parsed with every refusal as one ``file:line: what is wrong`` line.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evalkit.corpus.yaml_input import YAMLInputError, parse_yaml
from evalkit.errors import CorpusError


def read_yaml_file(path: Path, rel: str, max_bytes: int) -> tuple[Any, Any]:
    """``parse_yaml`` of a file, refused before reading when larger than ``max_bytes``.

    Raises:
        CorpusError: ``rel:line: what is wrong``, one line.
    """
    return parse_yaml_text(read_yaml_text(path, rel, max_bytes), rel)


def read_yaml_text(path: Path, rel: str, max_bytes: int) -> str:
    """A YAML file's text, refused before reading when larger than ``max_bytes``.

    Raises:
        CorpusError: ``rel: what is wrong`` (too large, not UTF-8, unreadable), one line.
    """
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise CorpusError(
                f"file is {size / (1 << 20):.1f} MB, more than the {max_bytes / (1 << 20):g} MB "
                "limit; split it into several files",
                path=rel,
            )
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise CorpusError(f"not UTF-8 text ({exc.reason} at byte {exc.start})", path=rel) from None
    except OSError as exc:
        raise CorpusError(f"cannot read: {exc.strerror or exc}", path=rel) from None


def parse_yaml_text(text: str, rel: str) -> tuple[Any, Any]:
    """``parse_yaml`` of the text of the file ``rel``.

    Raises:
        CorpusError: ``rel:line: what is wrong``, one line.
    """
    try:
        return parse_yaml(text)
    except YAMLInputError as exc:
        raise CorpusError(exc.problem, path=rel, line=exc.line, column=exc.column) from None


def find_yaml_files(directory: Path, root: Path, globs: Sequence[str]) -> list[Path]:
    """Files matching ``globs`` under ``directory``, following symlinks that stay inside
    ``root``; a symlink (to a file or a directory) that leaves it is refused, never loaded or
    skipped silently.

    Raises:
        CorpusError: the first symlink leaving ``root``.
    """
    if not directory.is_dir():
        return []
    found: list[Path] = []
    visited: set[Path] = set()
    pending = [directory]
    while pending:
        current = pending.pop()
        real = current.resolve()
        if real in visited:  # a link cycle, or a folder linked twice
            continue
        visited.add(real)
        for entry in sorted(current.iterdir()):
            if entry.is_symlink():
                target = entry.resolve()
                if not target.is_relative_to(root):
                    kind = "directory" if target.is_dir() else "file"
                    raise CorpusError(
                        f"symlinked {kind} leaves the corpus root (-> {target}); copy it in "
                        "or link to something inside the root",
                        path=_relative(entry, root),
                    )
            if entry.is_dir():
                pending.append(entry)
            elif entry.is_file() and any(entry.match(glob) for glob in globs):
                found.append(entry)
    return sorted(found)


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)

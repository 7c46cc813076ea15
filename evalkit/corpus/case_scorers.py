"""Binding a case's ``expect`` entries to scorers: once per distinct entry, for selected cases.

A corpus repeats a few ``expect`` entries over thousands of cases (the same schema, the same
rubric), so one load builds each distinct built-in entry once and shares it (a factory reads
its files and compiles its schema or pattern once), resolves each file name once, and hashes
each file once. With ``defer_scorers`` a case's scorers are built on first use: a run that
selects two cases of 100,000 builds two cases' scorers; :meth:`Corpus.select` builds those of
the cases it keeps, so a bad argument still stops the run before any model call, with its
file, line and case id. File arguments are resolved and hashed at load either way (the run's
``file_hashes`` cover the whole corpus).

Examples:
    >>> from pathlib import Path
    >>> binder = ScorerBinder(Path("."))
    >>> entries = (ExpectEntry("contains", {"text": "refund"}, 3),)
    >>> [s.name for s in binder.build(entries, "cases/a.yaml", "a-1")]
    ['contains']
    >>> binder.build(entries, "cases/a.yaml", "a-2")[0] is binder.build(entries, "x", "y")[0]
    True
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalkit.errors import CorpusError
from evalkit.scorers import SCORERS, Scorer, build_scorer
from evalkit.scorers.registry import ScorerArgError


@dataclass(frozen=True)
class ExpectEntry:
    """One validated ``expect`` entry and the line it is on."""

    name: str
    args: dict[str, Any]
    line: int


class ScorerBinder:
    """One corpus load's scorer building: resolved file names, file hashes and built scorers,
    shared by every case of the load (files do not change during one load)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.file_hashes: dict[str, str] = {}  # every file argument named by a loaded case
        self._paths: dict[str, Path] = {}
        self._built: dict[tuple[str, str], Scorer] = {}

    def hash_files(self, entries: tuple[ExpectEntry, ...], rel: str, case_id: str) -> None:
        """Resolve and hash the entries' file arguments (missing files fail here, at load)."""
        for entry in entries:
            for arg in SCORERS[entry.name].files:
                name = entry.args.get(arg)
                if name is None or str(name) in self.file_hashes:
                    continue
                with _located(rel, entry, case_id):
                    path = self.resolve(str(name))
                    self.file_hashes[str(name)] = hashlib.sha256(path.read_bytes()).hexdigest()

    def build(self, entries: tuple[ExpectEntry, ...], rel: str, case_id: str) -> tuple[Scorer, ...]:
        """The entries' scorers, cheapest first (stable within a tier).

        Raises:
            CorpusError: ``rel:line: case id: ...`` for arguments a factory refuses.
        """
        scorers = []
        for entry in entries:
            key = _share_key(entry)
            built = self._built.get(key) if key is not None else None
            if built is None:
                with _located(rel, entry, case_id):
                    built = build_scorer(entry.name, entry.args, self.resolve)
                if key is not None:
                    self._built[key] = built
            scorers.append(built)
        scorers.sort(key=lambda s: s.tier)
        return tuple(scorers)

    def resolve(self, name: str) -> Path:
        """A file argument as a path under the root, refused when absolute, outside or absent."""
        path = self._paths.get(name)
        if path is None:
            path = self._paths[name] = _resolve(self.root, name)
        return path


class PendingScorers:
    """A case's scorers not built yet (``load_corpus(defer_scorers=True)``)."""

    __slots__ = ("binder", "case_id", "entries", "rel")

    def __init__(
        self, binder: ScorerBinder, entries: tuple[ExpectEntry, ...], rel: str, case_id: str
    ) -> None:
        self.binder, self.entries, self.rel, self.case_id = binder, entries, rel, case_id

    def build(self) -> tuple[Scorer, ...]:
        return self.binder.build(self.entries, self.rel, self.case_id)


class DeferredScorers:
    """The ``Case.scorers`` attribute: a tuple, or :class:`PendingScorers` built on first read.

    A data descriptor set on the frozen dataclass after it is made, so ``Case(..., scorers=...)``,
    ``replace`` and equality work unchanged while a deferred load never builds what no one reads.
    """

    def __get__(self, case: Any, owner: type | None = None) -> Any:
        if case is None:
            return self
        value = case.__dict__["scorers"]
        if isinstance(value, PendingScorers):
            value = case.__dict__["scorers"] = value.build()
        return value

    def __set__(self, case: Any, value: Any) -> None:
        case.__dict__["scorers"] = value


def is_pending(case: Any) -> bool:
    """Whether a case's scorers are still unbuilt (tests and benchmarks count with it)."""
    return isinstance(case.__dict__.get("scorers"), PendingScorers)


def _share_key(entry: ExpectEntry) -> tuple[str, str] | None:
    """Built-in scorers are shared by identical entries (their factories keep no state); one
    from a suite's own module is built per case, as it may."""
    if not SCORERS[entry.name].factory.__module__.startswith("evalkit.scorers."):
        return None
    try:
        return entry.name, json.dumps(entry.args)  # exact JSON: order and number types kept
    except (TypeError, ValueError):
        return None


class _located:
    """Re-raise a factory's problem as ``CorpusError`` at the entry's file, line and case id."""

    def __init__(self, rel: str, entry: ExpectEntry, case_id: str) -> None:
        self.name = entry.name
        self.where = {"path": rel, "line": entry.line, "case_id": case_id}

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> bool:
        if exc is None or not isinstance(exc, Exception):
            return False
        if isinstance(exc, ScorerArgError):
            raise CorpusError(str(exc), **self.where) from None
        if isinstance(exc, CorpusError):
            raise CorpusError(exc.message, **self.where) from None
        # a factory's own bug or limit (deep JSON, huge regex repeat)
        message = f"scorer {self.name!r} cannot use these args: {type(exc).__name__}: {exc}"
        raise CorpusError(message[:300], **self.where) from None


def _resolve(root: Path, name: str) -> Path:
    shown = repr(name) if len(name) <= 120 else f"{name[:120]!r}..."
    try:
        candidate = Path(name)
        if candidate.is_absolute():
            raise CorpusError(f"file {shown} must be relative to the corpus root")
        resolved = (root / candidate).resolve()
        if not resolved.is_relative_to(root):
            raise CorpusError(f"file {shown} is outside the corpus root {root}")
        if not resolved.is_file():
            raise CorpusError(f"file {shown} not found under the corpus root {root}")
    except (OSError, ValueError) as exc:  # NUL bytes, names too long for the OS
        reason = getattr(exc, "strerror", None) or exc  # strerror: without the long name
        raise CorpusError(f"file {shown} is not a usable path: {reason}") from None
    return resolved

"""Binding a case's ``expect`` entries to scorers: once per distinct entry, for selected cases.

A corpus repeats a few ``expect`` entries over thousands of cases (the same schema, the same
rubric), so one load builds each distinct built-in entry once and shares it (a factory reads
its files and compiles its schema or pattern once), resolves each file name once, and hashes
each file once. Whole lists repeat too: cases writing the same list the same way share one
:class:`SharedExpect` (validated, its files hashed and its canonical JSON written once, its
scorers built once; one object instead of a set of entries per case). With
``defer_scorers`` a case's scorers are built on first use: a run that selects two cases of
100,000 builds two cases' scorers; :meth:`Corpus.select` builds those of the cases it keeps,
so a bad argument still stops the run before any model call, with its file, line and case
id. File arguments are resolved and hashed at load either way (the run's ``file_hashes``
cover the whole corpus).

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
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from evalkit.corpus.case_spec import ScorerSpec
from evalkit.errors import CorpusError
from evalkit.scorers import SCORERS, Scorer, build_scorer
from evalkit.scorers.registry import ScorerArgError


@dataclass(frozen=True, slots=True)
class ExpectEntry:
    """One validated ``expect`` entry and the line it is on."""

    name: str
    args: dict[str, Any]
    line: int


#: An entry as a load keeps it: name, arguments and the key identical entries share a scorer
#: under (None: built per case, see :func:`_share_key`).
_Entry = tuple[str, dict[str, Any], tuple[str, str] | None]


class SharedExpect:
    """A validated ``expect`` list, one object for every case of a load that writes the same
    list the same way (a corpus repeats a few lists over thousands of cases): the validated
    entries (given back to validation, which takes a validated entry as it is), each entry's
    share key, the list's canonical JSON (its part of the case hash) and, once built and when
    every entry is shareable, the scorers themselves."""

    __slots__ = ("built", "canonical", "entries", "specs")

    def __init__(self, specs: Sequence[ScorerSpec], canonical: str) -> None:
        self.specs = tuple(specs)
        self.entries: tuple[_Entry, ...] = tuple(
            (spec.scorer, spec.args, _share_key(spec.scorer, spec.args)) for spec in specs
        )
        self.canonical = canonical
        self.built: tuple[Scorer, ...] | None = None


class ScorerBinder:
    """One corpus load's scorer building: resolved file names, file hashes, shared ``expect``
    lists and built scorers, shared by every case of the load (files do not change during one
    load)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.file_hashes: dict[str, str] = {}  # every file argument named by a loaded case
        self._paths: dict[str, Path] = {}
        self._built: dict[tuple[str, str], Scorer] = {}
        self._expects: dict[Hashable, SharedExpect] = {}
        self._offsets: dict[tuple[int, ...], tuple[int, ...]] = {}
        #: How many ``expect`` lists were validated, hashed and checked (not found shared):
        #: tests count with it.
        self.expects_checked = 0

    def known_expect(self, key: Hashable | None) -> SharedExpect | None:
        """The shared list remembered under ``key`` (see :meth:`share_expect`), if any."""
        return None if key is None else self._expects.get(key)

    def share_expect(
        self,
        key: Hashable | None,
        specs: Sequence[ScorerSpec],
        canonical: str,
        lines: Sequence[int],
        rel: str,
        case_id: str,
    ) -> SharedExpect:
        """A validated list's files resolved and hashed (a missing file fails here, at load,
        at its entry's line), remembered under ``key`` for the next case writing it (None:
        not remembered)."""
        self.expects_checked += 1
        entries = tuple(ExpectEntry(s.scorer, s.args, n) for s, n in zip(specs, lines, strict=True))
        self.hash_files(entries, rel, case_id)
        shared = SharedExpect(specs, canonical)
        if key is not None:
            self._expects[key] = shared
        return shared

    def shared_offsets(self, offsets: tuple[int, ...]) -> tuple[int, ...]:
        """One tuple per distinct layout of entry lines (relative to the case's line)."""
        return self._offsets.setdefault(offsets, offsets)

    def hash_files(self, entries: tuple[ExpectEntry, ...], rel: str, case_id: str) -> None:
        """Resolve and hash the entries' file arguments (missing files fail here, at load)."""
        for entry in entries:
            for arg in SCORERS[entry.name].files:
                name = entry.args.get(arg)
                if name is None or str(name) in self.file_hashes:
                    continue
                with _located(rel, entry.name, entry.line, case_id):
                    path = self.resolve(str(name))
                    self.file_hashes[str(name)] = hashlib.sha256(path.read_bytes()).hexdigest()

    def build(self, entries: tuple[ExpectEntry, ...], rel: str, case_id: str) -> tuple[Scorer, ...]:
        """The entries' scorers, cheapest first (stable within a tier).

        Raises:
            CorpusError: ``rel:line: case id: ...`` for arguments a factory refuses.
        """
        scorers = [
            self._scorer(e.name, e.args, _share_key(e.name, e.args), rel, e.line, case_id)
            for e in entries
        ]
        scorers.sort(key=lambda s: s.tier)
        return tuple(scorers)

    def bind(
        self, shared: SharedExpect, rel: str, case_id: str, line: int, offsets: tuple[int, ...]
    ) -> tuple[Scorer, ...]:
        """A shared list's scorers, cheapest first: built at most once per load when every
        entry is shareable (then every case writing the list gets the same tuple).

        Raises:
            CorpusError: ``rel:line: case id: ...`` at the refused entry's line in this case.
        """
        if shared.built is not None:
            return shared.built
        scorers = [
            self._scorer(name, args, key, rel, line + offset, case_id)
            for (name, args, key), offset in zip(shared.entries, offsets, strict=True)
        ]
        scorers.sort(key=lambda s: s.tier)
        built = tuple(scorers)
        if all(key is not None for _, _, key in shared.entries):
            shared.built = built
        return built

    def _scorer(
        self,
        name: str,
        args: dict[str, Any],
        key: tuple[str, str] | None,
        rel: str,
        line: int,
        case_id: str,
    ) -> Scorer:
        built = self._built.get(key) if key is not None else None
        if built is None:
            with _located(rel, name, line, case_id):
                built = build_scorer(name, args, self.resolve)
            if key is not None:
                self._built[key] = built
        return built

    def resolve(self, name: str) -> Path:
        """A file argument as a path under the root, refused when absolute, outside or absent."""
        path = self._paths.get(name)
        if path is None:
            path = self._paths[name] = _resolve(self.root, name)
        return path


class PendingScorers:
    """A case's scorers not built yet (``load_corpus(defer_scorers=True)``): what building
    needs and nothing else (the shared list, the layout of its lines, the case's place)."""

    __slots__ = ("binder", "case_id", "line", "offsets", "rel", "shared")

    def __init__(
        self,
        binder: ScorerBinder,
        shared: SharedExpect,
        rel: str,
        case_id: str,
        line: int,
        offsets: tuple[int, ...],
    ) -> None:
        self.binder, self.shared, self.rel, self.case_id = binder, shared, rel, case_id
        self.line, self.offsets = line, offsets

    def build(self) -> tuple[Scorer, ...]:
        return self.binder.bind(self.shared, self.rel, self.case_id, self.line, self.offsets)


class DeferredScorers:
    """The ``Case.scorers`` attribute: a tuple, or :class:`PendingScorers` built on first read.

    A data descriptor set on the frozen, slotted dataclass after it is made, over the slot the
    dataclass made for the field (``slot``), so ``Case(..., scorers=...)``, ``replace``,
    pickling and equality work unchanged while a deferred load never builds what no one reads.
    """

    def __init__(self, slot: Any) -> None:
        self._slot = slot

    def __get__(self, case: Any, owner: type | None = None) -> Any:
        if case is None:
            return self
        value = self._slot.__get__(case, owner)
        if isinstance(value, PendingScorers):
            value = value.build()
            self._slot.__set__(case, value)
        return value

    def __set__(self, case: Any, value: Any) -> None:
        self._slot.__set__(case, value)

    def stored(self, case: Any) -> Any:
        """What the case holds: its scorers, or :class:`PendingScorers` (nothing is built)."""
        return self._slot.__get__(case, type(case))


def is_pending(case: Any) -> bool:
    """Whether a case's scorers are still unbuilt (tests and benchmarks count with it)."""
    attribute = getattr(type(case), "scorers", None)
    return isinstance(attribute, DeferredScorers) and isinstance(
        attribute.stored(case), PendingScorers
    )


def _share_key(name: str, args: dict[str, Any]) -> tuple[str, str] | None:
    """Built-in scorers are shared by identical entries (their factories keep no state); one
    from a suite's own module is built per case, as it may."""
    if not SCORERS[name].factory.__module__.startswith("evalkit.scorers."):
        return None
    try:
        return name, json.dumps(args)  # exact JSON: order and number types kept
    except (TypeError, ValueError):
        return None


class _located:
    """Re-raise a factory's problem as ``CorpusError`` at the entry's file, line and case id."""

    def __init__(self, rel: str, name: str, line: int, case_id: str) -> None:
        self.name = name
        self.rel, self.line, self.case_id = rel, line, case_id

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> Literal[False]:
        if exc is None or not isinstance(exc, Exception):
            return False
        if isinstance(exc, ScorerArgError):
            raise CorpusError(
                str(exc), path=self.rel, line=self.line, case_id=self.case_id
            ) from None
        if isinstance(exc, CorpusError):
            raise CorpusError(
                exc.message, path=self.rel, line=self.line, case_id=self.case_id
            ) from None
        # a factory's own bug or limit (deep JSON, huge regex repeat)
        message = f"scorer {self.name!r} cannot use these args: {type(exc).__name__}: {exc}"
        raise CorpusError(
            message[:300], path=self.rel, line=self.line, case_id=self.case_id
        ) from None


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

"""Scorer registry: decorated *factories* that turn YAML arguments into a scoring function.

A factory runs when the corpus loads, so bad arguments, a missing schema file or an invalid
regex fail before any model call. Each factory returns a function ``(output, case) -> Score``.

Examples:
    >>> from evalkit.scorers.registry import scorer, build_scorer
    >>> @scorer("shout", primary="word")
    ... def shout(word: str):
    ...     def score(output, case):
    ...         ok = word.upper() in (output.text or "")
    ...         return check(ok, f"{word.upper()!r} {'found' if ok else 'missing'}")
    ...     return score
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import inspect
import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from evalkit.records import Output, Score

if TYPE_CHECKING:
    from _collections_abc import dict_items, dict_keys, dict_values


class ScoredCase(Protocol):
    """What a scoring function may read of the case it scores. ``evalkit.corpus.cases.Case``
    has these fields; the registry needs no case model (so the corpus can validate scorer
    arguments at load time through it without an import circle)."""

    @property
    def id(self) -> str: ...
    @property
    def messages(self) -> tuple[dict[str, Any], ...] | None: ...
    @property
    def vars(self) -> dict[str, Any] | None: ...
    @property
    def fixtures(self) -> dict[str, Any]: ...


ScoreFn = Callable[[Output, ScoredCase], Score]

#: Cost tiers: the runner applies scorers cheapest first.
DETERMINISTIC, EXECUTABLE, SIMILARITY, JUDGE = 0, 1, 2, 3


@dataclass(frozen=True)
class ScorerDef:
    """A registered scorer factory and what the loader needs to know about it."""

    name: str
    factory: Callable[..., ScoreFn]
    tier: int = DETERMINISTIC
    files: tuple[str, ...] = ()  # argument names that are paths relative to the corpus root
    primary: str | None = None  # argument filled by the short form ``- contains: refund``
    trajectory: bool = False  # scores the tool-call trajectory rather than the final text
    threaded: bool = False  # may take long (a bounded regex): scored off the event loop


@dataclass(frozen=True)
class Scorer:
    """A scorer bound to its arguments: call it on an output."""

    name: str
    args: dict[str, Any]
    # A Score or an awaitable of one; a model judge's also takes the run's judge client.
    fn: Callable[..., Any] = field(repr=False, compare=False)
    tier: int = DETERMINISTIC
    file_hashes: dict[str, str] = field(default_factory=dict, compare=False)
    threaded: bool = False

    def __call__(self, output: Output, case: ScoredCase) -> Score:
        return self._named(self.fn(output, case))

    async def ascore(self, output: Output, case: ScoredCase, judge: Any = None) -> Score:
        """Score an output; awaits scoring functions that are coroutines (model judges get
        the run's judge client)."""
        if self.threaded:  # a worker thread: a slow search never stalls the other cases
            return self._named(await asyncio.to_thread(self.fn, output, case))
        result = self.fn(output, case, judge) if self.tier == JUDGE else self.fn(output, case)
        if inspect.isawaitable(result):
            result = await result
        return self._named(result)

    def _named(self, score: Score) -> Score:
        return Score(self.name, score.score, score.passed, score.reason, score.error, score.details)


class CorpusPath(type(Path())):  # type: ignore[misc]
    """A resolved file argument that remembers how the case named it (``relative``), so stored
    details and messages say ``rubrics/tone.md`` rather than a machine-specific absolute path."""

    relative: str = ""


#: Where each built-in scorer registers itself. A lookup of a built-in name imports its module
#: alone, so a run whose cases name ``json_valid`` and ``max_words`` never imports the similarity
#: (rapidfuzz), sandbox or judge modules; listing the registry imports them all.
#: tests/run/test_fixed_cost_scorers.py holds this equal to what the modules register.
BUILTIN_MODULES: dict[str, str] = {
    **dict.fromkeys(
        (
            "exact", "normalized_match", "contains", "not_contains", "regex", "forbidden_regex",
            "max_words", "max_chars",
        ),
        "evalkit.scorers.deterministic",
    ),
    **dict.fromkeys(
        ("json_valid", "json_schema", "json_fields", "one_of", "numeric_close"),
        "evalkit.scorers.structured",
    ),
    **dict.fromkeys(
        ("tool_called", "tool_not_called", "tool_order", "max_steps", "no_unexpected_calls"),
        "evalkit.scorers.trajectory",
    ),
    **dict.fromkeys(("python_tests", "sql_result"), "evalkit.scorers.executable"),
    **dict.fromkeys(("similar", "embedding_similar"), "evalkit.scorers.similarity"),
    "judge": "evalkit.scorers.judge",
}  # fmt: skip
_BUILTIN_MODULE_NAMES = frozenset(BUILTIN_MODULES.values())


class ScorerRegistry(dict[str, ScorerDef]):
    """:data:`SCORERS`: name -> :class:`ScorerDef`, whose built-in entries register on first
    use. ``SCORERS[name]``, ``.get`` and ``in`` import only the module of ``name`` (see
    :data:`BUILTIN_MODULES`); iterating, ``len``, ``keys``/``values``/``items`` and ``dict()``
    import every built-in module first, so a listing is complete. A scorer registered from
    outside evalkit loads the built-ins first too, so it replaces one as it always did.

    Examples:
        >>> "contains" in SCORERS, SCORERS["contains"].primary, "contans" in SCORERS
        (True, 'text', False)
        >>> SCORERS["judge"].factory.__module__
        'evalkit.scorers.judge'
    """

    def __missing__(self, name: str) -> ScorerDef:
        module = BUILTIN_MODULES.get(name)
        if module is None or module in sys.modules:  # unknown, or removed after registering
            raise KeyError(name)
        importlib.import_module(module)
        return dict.__getitem__(self, name)

    def get(self, name: str, default: ScorerDef | None = None) -> ScorerDef | None:  # type: ignore[override]
        try:
            return self[name]
        except KeyError:
            return default

    def __contains__(self, name: object) -> bool:
        if dict.__contains__(self, name):
            return True
        module = BUILTIN_MODULES.get(name) if isinstance(name, str) else None
        return module is not None and module not in sys.modules  # registers when looked up

    def load_all(self) -> None:
        """Import every built-in scorer module (each registers its scorers)."""
        for module in sorted(_BUILTIN_MODULE_NAMES - sys.modules.keys()):
            importlib.import_module(module)

    def __iter__(self) -> Iterator[str]:
        self.load_all()
        return dict.__iter__(self)

    def __len__(self) -> int:
        self.load_all()
        return dict.__len__(self)

    def keys(self) -> dict_keys[str, ScorerDef]:
        self.load_all()
        return dict.keys(self)

    def values(self) -> dict_values[str, ScorerDef]:
        self.load_all()
        return dict.values(self)

    def items(self) -> dict_items[str, ScorerDef]:
        self.load_all()
        return dict.items(self)

    def copy(self) -> dict[str, ScorerDef]:
        return dict(self)

    def __repr__(self) -> str:
        return f"ScorerRegistry({sorted(self)})"


SCORERS: ScorerRegistry = ScorerRegistry()


def scorer(
    name: str,
    *,
    tier: int = DETERMINISTIC,
    files: tuple[str, ...] = (),
    primary: str | None = None,
    trajectory: bool = False,
    threaded: bool = False,
) -> Callable[[Callable[..., ScoreFn]], Callable[..., ScoreFn]]:
    """Register a scorer factory under ``name``."""

    def register(factory: Callable[..., ScoreFn]) -> Callable[..., ScoreFn]:
        if factory.__module__ not in _BUILTIN_MODULE_NAMES:
            SCORERS.load_all()  # a suite's own scorer replaces a built-in, never the reverse
        SCORERS[name] = ScorerDef(name, factory, tier, files, primary, trajectory, threaded)
        return factory

    return register


def check(passed: bool, reason: str, score: float | None = None, **details: Any) -> Score:
    """Build a Score from inside a scoring function (the registry fills in the name)."""
    value = (1.0 if passed else 0.0) if score is None else float(score)
    return Score("", value, bool(passed), reason, False, dict(details))


def scorer_error(reason: str, **details: Any) -> Score:
    """A score that could not be decided: counted as neither pass nor fail."""
    return Score("", 0.0, False, reason, True, dict(details))


class ScorerArgError(ValueError):
    """Raised by a factory for an argument it cannot accept (the loader adds file:line:id)."""


def build_scorer(
    name: str, args: dict[str, Any], resolve: Callable[[str], Path] | None = None
) -> Scorer:
    """Bind a registered scorer to its arguments, resolving file arguments with ``resolve``.

    Raises:
        KeyError: unknown scorer name.
        ScorerArgError: arguments the factory does not accept (message says which).
    """
    definition = SCORERS[name]
    key = _shared_key(definition, args)
    if key is not None and (shared := _SHARED.get(key)) is not None:
        return shared
    bound = dict(args)
    file_hashes: dict[str, str] = {}
    for arg in definition.files:
        if arg in bound and resolve is not None:
            path = CorpusPath(resolve(str(bound[arg])))
            path.relative = str(bound[arg])
            file_hashes[path.relative] = _file_sha256(path)
            bound[arg] = path
    signature = factory_signature(definition.factory)
    try:
        signature.bind(**bound)
    except TypeError as exc:
        accepted = ", ".join(signature.parameters) or "no arguments"
        raise ScorerArgError(f"bad args for scorer {name!r}: {exc} (accepts: {accepted})") from None
    try:
        fn = definition.factory(**bound)
    except ScorerArgError:
        raise
    except (TypeError, ValueError) as exc:
        raise ScorerArgError(f"bad args for scorer {name!r}: {exc}") from None
    built = Scorer(name, dict(args), fn, definition.tier, file_hashes, definition.threaded)
    if key is not None:
        if len(_SHARED) >= _SHARED_MAX:
            _SHARED.clear()
        _SHARED[key] = built
    return built


@functools.lru_cache(maxsize=1024)
def factory_signature(factory: Callable[..., ScoreFn]) -> inspect.Signature:
    """``inspect.signature`` of a factory, worked out once per factory (it walks the function's
    code and annotations: a corpus of distinct entries asked it once per entry)."""
    return inspect.signature(factory)


#: Bound built-in deterministic scorers without file arguments, shared by every case that
#: names the same scorer with the same arguments: a corpus repeats a few ``expect`` entries
#: over thousands of cases, and a bound copy per case would repeat its signature check and
#: hold its own arguments.
_SHARED: dict[tuple[ScorerDef, str], Scorer] = {}
_SHARED_MAX = 4096


def _shared_key(definition: ScorerDef, args: dict[str, Any]) -> tuple[ScorerDef, str] | None:
    """The sharing key, or None for a scorer that is built anew each time: one from outside
    evalkit (it may keep state), a model-judged, executable or similarity one, or one reading
    files. The arguments' exact JSON (order and number types kept) is part of the key."""
    if (
        definition.tier != DETERMINISTIC
        or not definition.factory.__module__.startswith("evalkit.scorers.")
        or any(arg in args for arg in definition.files)
    ):
        return None
    try:
        return definition, json.dumps(args)
    except (TypeError, ValueError):
        return None


def _file_sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()

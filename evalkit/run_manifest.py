"""The run manifest as a typed, frozen record: what every module reads, whatever version stored it.

A manifest is stored as JSON (the ``runs`` table, a shard's ``manifest/<writer>.json``, the team
store) with its ``version``; :meth:`RunManifest.from_stored` is the one way back, migrating every
shape an older evalkit wrote and refusing one a newer evalkit wrote, in one line. The
configuration's own parts (``system``, ``prompt``, ``tools``, ``sampling``, ...) stay in their
JSON form: ``config_hash`` and ``manifest_diff`` hash them exactly as they were recorded, so a
migration never makes two configurations look alike. Built by :mod:`evalkit.corpus.manifest`.

Examples:
    >>> stored = {"suite": "support", "replays": 3, "run": {"run_id": "r1", "label": "base"}}
    >>> manifest = RunManifest.from_stored(stored)
    >>> manifest.version, manifest.run.label, manifest.kind, manifest.replays
    (1, 'base', 'fixtures', 3)
    >>> RunManifest.from_stored(manifest.to_dict()) == manifest
    True
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from evalkit.errors import StoreError

#: The version this evalkit writes; it reads this one and every older one.
MANIFEST_VERSION = 1

#: Manifest fields that identify a configuration; each is one logical thing a change can vary.
COMPARABLE_FIELDS = (
    "suite",
    "provider",
    "system",
    "model",
    "prompt",
    "tools",
    "sampling",
    "judge",
    "replays",
    "scorer_files",
    "harness",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunInfo:
    """The manifest's ``run``: this run's id, label and start, how it ran, and the git state."""

    run_id: str = ""
    label: str = ""
    created_at: str | None = None
    concurrency: int | None = None
    cache: bool = True  # False: a --no-cache run, which stays uncached when resumed
    config: str | None = None  # the suite config's path, which a promotion pins the exam from
    git_sha: str | None = None
    git_dirty: bool | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunInfo:
        return cls(**_known(cls, data))

    def to_json(self) -> dict[str, Any]:
        return _as_json(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class CorpusInfo:
    """The manifest's ``corpus``: its hash and size, and each share's when the run was cut."""

    hash: str | None = None
    n_cases: int = 0
    shares: dict[str, Any] | None = None  # {count, hashes, sizes}: written only when cut

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CorpusInfo:
        return cls(**_known(cls, data))

    def to_json(self) -> dict[str, Any]:
        found = _as_json(self)
        if self.shares is None:
            del found["shares"]
        return found


@dataclass(frozen=True, slots=True, kw_only=True)
class ProviderInfo:
    """The manifest's ``provider``: who answered, at which endpoint (never a key)."""

    name: str | None = None
    base_url: str | None = None
    function: str | None = None
    simulator: bool = False

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ProviderInfo:
        return cls(**_known(cls, data))

    def to_json(self) -> dict[str, Any]:
        return _as_json(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelInfo:
    """The manifest's ``model``: the id sent and the snapshot pinned (the id when none)."""

    id: str | None = None
    snapshot: str | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ModelInfo:
        return cls(**_known(cls, data))

    def to_json(self) -> dict[str, Any]:
        return _as_json(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class JudgeInfo:
    """The manifest's ``judge``: the judge model and the hashes of the rubrics it used."""

    model: str | None = None
    snapshot: str | None = None
    provider: str | None = None
    rubric_hashes: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> JudgeInfo:
        return cls(**_known(cls, data))

    def to_json(self) -> dict[str, Any]:
        return _as_json(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunManifest:
    """Everything that produced a run (never keys), as a typed value; see the module docstring.

    ``run_scorer_files`` and ``rescoring`` are set only on a rescored run as a comparison loads
    it (:func:`evalkit.compare.analysis.load_run`), never stored; ``exam`` and ``rebaseline``
    mark the runs the gate makes of a baseline's configuration; ``extra`` keeps any other
    top-level entry as it was stored, so a rewrite loses nothing.
    """

    version: int = MANIFEST_VERSION
    suite: str | None = None
    kind: str = "fixtures"  # "live": reported only, never promoted or gated
    provider: ProviderInfo | None = None
    system: dict[str, Any] | None = None
    model: ModelInfo | None = None
    prompt: dict[str, Any] | None = None
    tools: dict[str, Any] | None = None
    sampling: dict[str, Any] | None = None
    judge: JudgeInfo | None = None
    replays: int = 1
    scorer_files: dict[str, Any] = field(default_factory=dict)
    harness: dict[str, Any] = field(default_factory=dict)
    corpus: CorpusInfo = field(default_factory=CorpusInfo)
    gate_policy: dict[str, Any] | None = None
    rerun: dict[str, Any] | None = None
    selection: dict[str, Any] = field(default_factory=dict)
    requests: dict[str, Any] = field(default_factory=dict)
    client: dict[str, Any] = field(default_factory=dict)
    run: RunInfo = field(default_factory=RunInfo)
    sandbox: dict[str, Any] | None = None
    warnings: tuple[str, ...] = ()
    config_hash: str = ""
    exam: dict[str, Any] | None = None
    rebaseline: dict[str, Any] | None = None
    run_scorer_files: dict[str, Any] | None = None
    rescoring: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_stored(cls, stored: Mapping[str, Any], *, source: str = "") -> RunManifest:
        """The manifest a stored JSON object records, migrated from the version that wrote it.

        ``source`` names where it was read (a store and run, a file) for the error.

        Raises:
            StoreError: one line, when a newer evalkit wrote it or it is not a manifest.
        """
        where = f"{source}: " if source else ""
        if not isinstance(stored, Mapping):
            raise StoreError(f"{where}the run manifest is not a JSON object")
        version = stored.get("version", 0)
        if not isinstance(version, int) or isinstance(version, bool) or version < 0:
            raise StoreError(f"{where}the run manifest's version {version!r} is not a version")
        if version > MANIFEST_VERSION:
            raise StoreError(
                f"{where}the run manifest is version {version}, written by a newer evalkit; "
                f"this one reads versions up to {MANIFEST_VERSION}: upgrade evalkit "
                "(pip install -U evalkit)"
            )
        data = dict(stored)
        for migrate in _MIGRATIONS[version:]:
            data = migrate(data)
        return cls._from_current(data)

    @classmethod
    def _from_current(cls, data: dict[str, Any]) -> RunManifest:
        names = _FIELD_NAMES
        known = {k: v for k, v in data.items() if k in names}
        typed: dict[str, Callable[[Mapping[str, Any]], Any]] = {
            "provider": ProviderInfo.from_json,
            "model": ModelInfo.from_json,
            "judge": JudgeInfo.from_json,
            "corpus": CorpusInfo.from_json,
            "run": RunInfo.from_json,
        }
        for name, parse in typed.items():
            if isinstance(known.get(name), Mapping):
                known[name] = parse(known[name])
            elif name in known and name in ("corpus", "run"):
                del known[name]  # absent or not an object: the empty default
        if "warnings" in known:
            known["warnings"] = tuple(known["warnings"] or ())
        for name in ("replays", *_DICT_FIELDS):  # null where a value is due: the default
            if name in known and known[name] is None:
                del known[name]
        return cls(**known, extra={k: v for k, v in data.items() if k not in names})

    def to_dict(self) -> dict[str, Any]:
        """The JSON form stored, with this version; :meth:`from_stored`'s inverse."""
        found: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "extra":
                continue
            if value is None and f.name in _OMITTED_WHEN_NONE:
                continue
            found[f.name] = _json_of(value)
        return {**self.extra, **found}

    def recorded(self, name: str) -> Any:
        """The JSON form of the top-level entry ``name`` (None when it records none), as the
        hash and the comparison of manifests read it.

        Examples:
            >>> RunManifest(model=ModelInfo(id="m", snapshot="m")).recorded("model")
            {'id': 'm', 'snapshot': 'm'}
        """
        if name in _FIELD_NAMES:
            return _json_of(getattr(self, name))
        return self.extra.get(name)

    @property
    def is_live(self) -> bool:
        """Whether it is of a ``kind: live`` configuration (its tools answered live)."""
        return self.kind == "live" or "live" in (self.tools or {})

    @property
    def tier(self) -> str | None:
        """The tier its ``selection`` ran, if any."""
        return self.selection.get("tier")

    def with_run(self, **changes: Any) -> RunManifest:
        """A copy whose ``run`` has ``changes`` (e.g. ``cache=False``)."""
        return replace(self, run=replace(self.run, **changes))

    def with_corpus(self, **changes: Any) -> RunManifest:
        """A copy whose ``corpus`` has ``changes`` (e.g. ``shares=...``)."""
        return replace(self, corpus=replace(self.corpus, **changes))

    def with_entries(self, entries: Mapping[str, Any]) -> RunManifest:
        """A copy with the top-level ``entries`` it lacks (such as ``exam`` or ``rebaseline``)."""
        return RunManifest.from_stored({**entries, **self.to_dict()})


def as_manifest(manifest: RunManifest | Mapping[str, Any], *, source: str = "") -> RunManifest:
    """``manifest`` itself, or the record a stored JSON object of one migrates to."""
    if isinstance(manifest, RunManifest):
        return manifest
    return RunManifest.from_stored(manifest, source=source)


def _from_unversioned(data: dict[str, Any]) -> dict[str, Any]:
    """Every manifest evalkit wrote before manifests carried a version (version 0).

    What each shape lacks, oldest first: ``warnings``; ``tools.offer``; ``system`` and
    ``requests``; ``gate_policy``, ``rerun`` and ``requests.base_url_from``; ``sandbox`` (only
    with executable scorers); ``kind`` and ``tools.live``; ``corpus.shares`` (only when cut);
    ``run.config``. The configuration's parts are left as recorded (their hash is the stored
    ``config_hash``); the rest get what the readers took an absence to mean.
    """
    stored_run = data.get("run")
    run: Mapping[str, Any] = stored_run if isinstance(stored_run, Mapping) else {}
    return {
        **data,
        "version": 1,
        "kind": data.get("kind") or "fixtures",
        "warnings": list(data.get("warnings") or ()),
        "requests": dict(data.get("requests") or {}),
        "run": {**run, "cache": bool(run.get("cache", True)), "config": run.get("config")},
    }


#: ``_MIGRATIONS[v]`` turns a version ``v`` manifest into version ``v + 1``.
_MIGRATIONS: tuple[Callable[[dict[str, Any]], dict[str, Any]], ...] = (_from_unversioned,)

_FIELD_NAMES = frozenset(f.name for f in fields(RunManifest)) - {"extra"}
_DICT_FIELDS = ("scorer_files", "harness", "selection", "requests", "client")
#: Entries written only when present (older shapes, and the ones only some runs have).
_OMITTED_WHEN_NONE = frozenset(
    {"gate_policy", "rerun", "sandbox", "exam", "rebaseline", "run_scorer_files", "rescoring"}
)


@functools.cache
def _names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls))


def _known(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    names = _names(cls)
    return {k: v for k, v in data.items() if k in names}


def _as_json(record: Any) -> dict[str, Any]:
    return {f.name: getattr(record, f.name) for f in fields(record)}


def _json_of(value: Any) -> Any:
    if hasattr(value, "to_json"):
        return value.to_json()
    if isinstance(value, tuple):
        return list(value)
    return value

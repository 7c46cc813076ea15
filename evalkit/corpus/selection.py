"""Selections: which cases a run executes and which scorers it applies, by name (``tiers:``).

A tier in ``evalkit.yaml`` names a selection so a fast smoke run and the full run can both be
gated, each against runs of the same selection::

    tiers:
      smoke: {tags: [smoke], skip_scorers: [judge]}

``skip_scorers`` takes scorer kinds (``deterministic``, ``executable``, ``similarity``,
``judge``) or scorer names (``python_tests``). A case left with no scorer is not selected.

Examples:
    >>> Selection(tier="smoke", tags=("smoke",)).to_manifest()["tier"]
    'smoke'
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, overload

from pydantic import BaseModel, ConfigDict, Field

from evalkit.corpus.cases import Corpus
from evalkit.corpus.fact_rows import FactRows
from evalkit.errors import ConfigError
from evalkit.scorers.registry import DETERMINISTIC, EXECUTABLE, JUDGE, SCORERS, SIMILARITY

if TYPE_CHECKING:  # a plain run selects loaded cases: the index reader stays unimported
    from evalkit.corpus.case_facts import CorpusFacts

#: Scorer kinds a tier may skip, by the tier the registry gives them.
SCORER_KINDS = {
    "deterministic": DETERMINISTIC,
    "executable": EXECUTABLE,
    "similarity": SIMILARITY,
    "judge": JUDGE,
}
#: What a selection applies to: loaded cases, or the facts of a corpus read through its index
#: (a shard selects on facts, then builds only its share).
CorpusT = TypeVar("CorpusT", Corpus, "CorpusFacts")


class TierConfig(BaseModel):
    """One entry of ``tiers:`` in evalkit.yaml."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tags: list[str] = Field(default_factory=list)  # cases with any of these (all when empty)
    exclude_tags: list[str] = Field(default_factory=list)
    skip_scorers: list[str] = Field(default_factory=list)  # kinds or scorer names
    sealed: bool = False


@dataclass(frozen=True)
class Selection:
    """What a run executes: a tier's (or the command line's) tags, exclusions and skips."""

    tier: str | None = None
    tags: tuple[str, ...] = ()
    exclude_tags: tuple[str, ...] = ()
    skip_scorers: tuple[str, ...] = ()
    sealed: bool = False

    # Overloads rather than CorpusT alone: mypy maps a ``Corpus | CorpusFacts`` argument through
    # overloads one member at a time, never through a constrained TypeVar.
    @overload
    def apply(self, corpus: Corpus) -> Corpus: ...
    @overload
    def apply(self, corpus: CorpusFacts) -> CorpusFacts: ...
    def apply(self, corpus: CorpusT) -> CorpusT:
        """The selected cases, each without the skipped scorers; cases left unscored drop out.
        On :class:`CorpusFacts` the same choice is made from the facts (nothing is built)."""
        chosen = corpus.select(tags=self.tags, exclude_tags=self.exclude_tags)
        if not self.skip_scorers:
            return chosen
        kinds = {SCORER_KINDS[s] for s in self.skip_scorers if s in SCORER_KINDS}
        names = set(self.skip_scorers) - set(SCORER_KINDS)
        if isinstance(chosen.cases, FactRows):  # columns: the same choice, per scorer list
            rows = chosen.cases.keep_scorers(lambda s: s.tier not in kinds and s.name not in names)
            return replace(chosen, cases=rows)
        kept = []
        for case in chosen.cases:
            scorers = tuple(s for s in case.scorers if s.tier not in kinds and s.name not in names)
            if scorers:
                kept.append(case if scorers == case.scorers else replace(case, scorers=scorers))
        return replace(chosen, cases=tuple(kept))

    @classmethod
    def from_manifest(cls, stored: Mapping[str, Any]) -> Selection:
        """The selection a manifest's ``selection`` entry records (:meth:`to_manifest`).

        Examples:
            >>> Selection.from_manifest(Selection("smoke", ("a",)).to_manifest()).tags
            ('a',)
        """
        return cls(
            stored.get("tier"),
            tuple(stored.get("tags") or ()),
            tuple(stored.get("exclude_tags") or ()),
            tuple(stored.get("skip_scorers") or ()),
            bool(stored.get("sealed")),
        )

    def to_manifest(self) -> dict[str, Any]:
        """The manifest's ``selection`` entry."""
        return {
            "tier": self.tier,
            "tags": sorted(self.tags),
            "exclude_tags": sorted(self.exclude_tags),
            "skip_scorers": sorted(self.skip_scorers),
            "sealed": self.sealed,
        }


def resolve_selection(
    tiers: Mapping[str, TierConfig],
    tier: str | None = None,
    *,
    tags: Iterable[str] = (),
    exclude_tags: Iterable[str] = (),
    sealed: bool = False,
) -> Selection:
    """The selection of ``tier`` (from the suite's ``tiers:``) or of explicit tags.

    ``exclude_tags`` and ``sealed`` add to a tier's; ``tags`` cannot be combined with a tier
    (put them in the tier).

    Raises:
        ConfigError: an unknown tier (with the defined ones), tags given with a tier, or a
            ``skip_scorers`` entry that is neither a scorer kind nor a scorer name.

    Examples:
        >>> resolve_selection({"smoke": TierConfig(tags=["smoke"])}, "smoke").tags
        ('smoke',)
    """
    tags, exclude_tags = tuple(tags), tuple(exclude_tags)
    if tier is None:
        return Selection(None, tags, exclude_tags, (), sealed)
    if tier not in tiers:
        defined = ", ".join(sorted(tiers)) or "none (add tiers: to evalkit.yaml)"
        guess = difflib.get_close_matches(tier, list(tiers), n=1)
        hint = f"; did you mean {guess[0]!r}?" if guess else ""
        raise ConfigError(f"--tier {tier!r}: no such tier{hint} (defined: {defined})")
    if tags:
        raise ConfigError(
            f"--tier {tier} with --tag {', '.join(tags)}: a tier names its own tags; "
            "add them to the tier in evalkit.yaml or drop --tier"
        )
    config = tiers[tier]
    for name in config.skip_scorers:
        if name not in SCORER_KINDS and name not in SCORERS:
            known = [*SCORER_KINDS, *SCORERS]
            guess = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {guess[0]!r}?" if guess else ""
            raise ConfigError(
                f"tiers.{tier}.skip_scorers: {name!r} is neither a scorer kind "
                f"({', '.join(SCORER_KINDS)}) nor a scorer name{hint}"
            )
    return Selection(
        tier,
        tuple(config.tags),
        tuple(dict.fromkeys([*config.exclude_tags, *exclude_tags])),
        tuple(config.skip_scorers),
        config.sealed or sealed,
    )


class _Tiered(Protocol):
    tiers: Mapping[str, TierConfig]


class TieredSuite(Protocol):
    """What :func:`resolve_tier` reads of a loaded suite (``evalkit.corpus.suite.Suite``, which
    imports this module for ``TierConfig``)."""

    @property
    def config(self) -> _Tiered: ...


def resolve_tier(suite: TieredSuite, tier: str | None) -> Selection:
    """The selection a suite's tier names (for ``evalkit run --tier`` and ``gate --tier``).

    Raises:
        ConfigError: as :func:`resolve_selection`.
    """
    return resolve_selection(suite.config.tiers, tier)

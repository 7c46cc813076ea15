"""What a run will execute, checked before anything is recorded: the suite with its overrides,
the selected cases, and the gate policy's warnings. ``evalkit run`` and `evalkit.Project.run`
both start here, so a notebook's run refuses and warns exactly as the command does.

Examples:
    >>> plan = plan_run("evalkit.yaml", tier="smoke")          # doctest: +SKIP
    >>> len(plan.corpus.cases), plan.selection.tier            # doctest: +SKIP
    (12, 'smoke')
"""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalkit.errors import EvalkitError

if TYPE_CHECKING:
    from evalkit.corpus.case_facts import CorpusFacts
    from evalkit.corpus.cases import Corpus
    from evalkit.corpus.drafts import CaseSummary
    from evalkit.corpus.selection import Selection
    from evalkit.corpus.suite import Suite

#: Loads the corpus a run selects from (``evalkit run --shard`` reads only the case index).
CorpusLoader = Callable[["Suite", "Selection"], "Corpus | CorpusFacts"]


@dataclass(frozen=True)
class RunPlan:
    """A run about to start: its suite, its selected cases and the policy warnings it keeps."""

    suite: Suite
    corpus: Corpus | CorpusFacts
    selection: Selection
    warnings: tuple[str, ...]


def load_selected_corpus(suite: Suite, selection: Selection) -> Corpus:
    """Every case loaded, scorers built only for the selected ones (``selection.apply``)."""
    from evalkit.corpus.cases import load_corpus

    return load_corpus(
        suite.root, defer_scorers=True, sealed=selection.sealed,
        user_template=suite.config.system.user_template,
    )  # fmt: skip


def plan_run(
    config: str | Path,
    *,
    overrides: Sequence[str] = (),
    prompt: str | Path | None = None,
    tier: str | None = None,
    tags: Sequence[str] = (),
    exclude_tags: Sequence[str] = (),
    sealed: bool = False,
    resume_selection: Mapping[str, Any] | None = None,
    load: CorpusLoader = load_selected_corpus,
) -> RunPlan:
    """Load the suite, select the cases and check them as the gate will.

    ``resume_selection`` is a stored run's selection (``--resume`` keeps it).

    Raises:
        ConfigError: the config or a policy the gate would refuse.
        EvalkitError: an unknown tag (with a did-you-mean), nothing selected, drafts.
    """
    from evalkit.corpus.drafts import refuse_drafts
    from evalkit.corpus.selection import Selection, resolve_selection
    from evalkit.corpus.suite import load_suite

    suite = load_suite(config, overrides=list(overrides), prompt=prompt)
    if resume_selection is not None:
        selection = Selection.from_manifest(resume_selection)
    else:
        selection = resolve_selection(
            suite.config.tiers, tier, tags=tags, exclude_tags=exclude_tags, sealed=sealed
        )
    corpus = load(suite, selection)
    full_counts = tag_counts(corpus.cases)
    check_tags(corpus.cases, (*selection.tags, *selection.exclude_tags))
    corpus = selection.apply(corpus)
    if not corpus.cases:
        raise EvalkitError("no cases selected (check the tier, tags and excluded tags)")
    refuse_drafts(corpus.cases, suite.config.kind)  # drafts never gate: review them first
    partial = bool(selection.tier or selection.tags or selection.exclude_tags)
    warnings = policy_warnings(suite, full_counts, corpus.cases if partial else None)
    return RunPlan(suite, corpus, selection, tuple(warnings))


def check_tags(cases: Sequence[CaseSummary], wanted: Sequence[str]) -> None:
    """An unknown tag to select or exclude is an error with a did-you-mean and the tags there
    are."""
    from evalkit.corpus.fact_rows import FactRows

    if isinstance(cases, FactRows):  # columns: the tag lists, not every case
        known = sorted(cases.known_tags())
    else:
        known = sorted({tag for case in cases for tag in case.tags})
    for tag in wanted:
        if tag not in known:
            close = difflib.get_close_matches(tag, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise EvalkitError(f"unknown tag {tag!r}{hint}; tags: {', '.join(known) or 'none'}")


def tag_counts(cases: Sequence[CaseSummary]) -> dict[str, int]:
    """Cases per tag, sealed cases left out (they never gate)."""
    from evalkit.corpus.fact_rows import FactRows

    if isinstance(cases, FactRows):
        return cases.tag_counts()
    return dict(Counter(tag for case in cases if not case.sealed for tag in case.tags))


def policy_warnings(
    suite: Suite, corpus_counts: dict[str, int], selected: Sequence[CaseSummary] | None = None
) -> list[str]:
    """The gate policy checks (``check_policy``): raise on a bad policy, return warnings."""
    from evalkit.compare.policy import check_policy

    counts = tag_counts(selected) if selected is not None else None
    return check_policy(suite.config, corpus_counts, counts, str(suite.path))

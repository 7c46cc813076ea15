"""Which traces become drafts: deduplicated, then stratified by what the corpus lacks.

1. **Dedupe** by content: a trace whose user turns (casefolded, whitespace collapsed; as read
   or as scrubbed) equal a corpus case's — its ``messages``, or its ``vars`` rendered through
   the suite's user template, or its ``vars.message`` alone — or an earlier trace's is dropped.
2. **Slices**: with ``by``, a trace's value of that attribute (``app.intent``,
   ``gen_ai.request.model``); without, the tags of the corpus case its user turns are closest to
   (rapidfuzz token-set similarity). A trace counts for its neediest tag, the one its draft
   is tagged with.
3. **Power-guided counts**: each slice needs ``required_n_paired(max(psi, drop), drop)`` cases
   for the gate's one-sided paired test to see a net ``drop`` with ``power``
   (:mod:`evalkit.stats.sizing`); its deficit is that minus the cases it has. Drafts go one at a
   time to the slice with the largest remaining deficit (then to the least covered), so the
   slice that needs the most cases gets the most drafts; within a slice the traces are drawn
   with a seeded generator.

Examples:
    With 13 billing and 9 orders cases, each 246 short of what a 5-point drop needs, orders (the
    larger deficit) gets drafts until the two deficits meet, then they alternate:

    >>> allocate({"billing": 50, "orders": 50}, {"billing": 13, "orders": 9}, need=246, n=10)
    {'billing': 3, 'orders': 7}
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from evalkit.corpus.cases import Case
from evalkit.corpus.messages import render_template
from evalkit.corpus.traces.drafting import scrub
from evalkit.corpus.traces.records import Trace, normalize_text
from evalkit.stats.sizing import required_n_paired


@dataclass(frozen=True)
class SliceCount:
    """One slice's figures: cases it has, cases it needs, unique traces seen, drafts chosen."""

    slice: str
    in_corpus: int
    needed: int
    traces: int
    drafts: int


@dataclass(frozen=True)
class Sample:
    """The chosen traces (each with its draft's tags), per-slice figures, and what was dropped."""

    chosen: tuple[tuple[Trace, tuple[str, ...]], ...]
    slices: tuple[SliceCount, ...]
    duplicates_of_corpus: int
    duplicates_of_traces: int
    seed: int
    required_n: int


def corpus_keys(cases: Sequence[Case], user_template: str = "{{message}}") -> set[tuple[str, ...]]:
    """The user-turn keys of every corpus case (what a trace must not repeat)."""
    keys: set[tuple[str, ...]] = set()
    for case in cases:
        if case.messages is not None:
            keys.add(tuple(normalize_text(m["content"]) for m in case.messages
                           if m.get("role") == "user"))  # fmt: skip
            continue
        variables = case.vars or {}
        with contextlib.suppress(KeyError):
            keys.add((normalize_text(render_template(user_template, variables)),))
        if "message" in variables:
            keys.add((normalize_text(str(variables["message"])),))
    return keys


def allocate(
    available: Mapping[str, int], have: Mapping[str, int], need: int, n: int
) -> dict[str, int]:
    """``n`` drafts over slices: one at a time to the largest remaining deficit
    (``need - have - given``), never more than a slice's available traces."""
    given = dict.fromkeys(available, 0)
    for _ in range(n):
        open_ = [s for s in available if given[s] < available[s]]
        if not open_:
            break
        best = max(open_, key=lambda s: (need - have.get(s, 0) - given[s], -have.get(s, 0), s))
        given[best] += 1
    return {s: k for s, k in given.items() if k}


def sample(
    traces: Sequence[Trace],
    corpus: Sequence[Case],
    n: int,
    *,
    by: str | None = None,
    user_template: str = "{{message}}",
    drop: float = 0.05,
    psi: float = 0.10,
    alpha: float = 0.05,
    power: float = 0.8,
    seed: int = 0,
    patterns: Sequence[re.Pattern[str]] = (),
) -> Sample:
    """Pick up to ``n`` traces (see the module docstring); ``patterns`` are the user's
    ``--redact`` ones, so a trace matches a draft written from it before."""
    known = corpus_keys(corpus, user_template)
    unique: list[Trace] = []
    seen: set[tuple[str, ...]] = set()
    dup_corpus = dup_traces = 0
    for trace in traces:
        key = trace.user_texts()
        if not key:
            continue
        # as read and as its draft would say it (a draft of it holds the scrubbed text)
        keys = {key, tuple(normalize_text(scrub(t, patterns)) for t in key)}
        if keys & known:
            dup_corpus += 1
        elif keys & seen:
            dup_traces += 1
        else:
            seen.update(keys)
            unique.append(trace)
    have: dict[str, int] = {}
    for case in corpus:
        if not case.sealed:
            for tag in case.tags:
                have[tag] = have.get(tag, 0) + 1
    labelled = [(trace, _slices(trace, by, corpus)) for trace in unique]
    need = required_n_paired(max(psi, drop), drop, alpha, power, "one-sided")
    by_slice: dict[str, list[tuple[Trace, tuple[str, ...]]]] = {}
    for trace, tags in labelled:
        # a trace resembling a multi-tag case counts for its neediest tag
        home = max(tags, key=lambda t: (need - have.get(t, 0), t)) if tags else "(untagged)"
        by_slice.setdefault(home, []).append((trace, (home,) if tags else ()))
    counts = allocate({s: len(v) for s, v in by_slice.items()}, have, need, n)
    rng = np.random.default_rng(seed)
    chosen: list[tuple[Trace, tuple[str, ...]]] = []
    for name in sorted(by_slice):
        pool = by_slice[name]
        picks = sorted(rng.choice(len(pool), size=counts.get(name, 0), replace=False).tolist())
        chosen.extend(pool[i] for i in picks)
    slices = tuple(
        SliceCount(name, have.get(name, 0), need, len(by_slice[name]), counts.get(name, 0))
        for name in sorted(by_slice, key=lambda s: (-(need - have.get(s, 0)), s))
    )
    return Sample(tuple(chosen), slices, dup_corpus, dup_traces, seed, need)


def _slices(trace: Trace, by: str | None, corpus: Sequence[Case]) -> tuple[str, ...]:
    if by is not None:
        value = trace.attributes.get(by)
        return () if value is None or value == "" else (str(value),)
    return _nearest_tags(trace, corpus)


def _nearest_tags(trace: Trace, corpus: Sequence[Case]) -> tuple[str, ...]:
    from rapidfuzz import fuzz, process

    texts = {
        i: " ".join(m["content"] for m in c.messages if m.get("role") == "user")
        if c.messages is not None
        else " ".join(str(v) for v in (c.vars or {}).values())
        for i, c in enumerate(corpus)
        if c.tags and not c.sealed
    }
    if not texts:
        return ()
    query = " ".join(trace.user_texts())
    match = process.extractOne(query, texts, scorer=fuzz.token_set_ratio, processor=str.lower)
    return corpus[match[2]].tags if match is not None else ()

"""The candidate answers the pinned exam: its configuration run on the pinned versions of the
cases it has no answer to (issue 42, rule 1).

A pull request that rewords, removes, retires, drafts or moves a case out of what its run
loads leaves the candidate without an answer to that case *as pinned*. `answer_pinned` runs
the candidate's configuration (provider, endpoint, model, sampling, prompt and tools, from its
manifest, as `evalkit.run.rebaseline.baseline_suite` rebuilds one) on exactly those pinned
cases, read from the exam stored with the baseline's promotion, through the response cache
(an unchanged system costs no model call). ``evalkit gate --rebaseline`` calls it; the gate
reads the newest such run (`find_exam_run`).

Examples:
    >>> result = answer_pinned(store, suite, "base", "cand")  # doctest: +SKIP
    >>> result.run_id, result.cases, result.cache_hits         # doctest: +SKIP
    ('20261207T043310-77ab01', 6, 6)
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from pathlib import Path

import polars as pl

from evalkit.corpus.pinned import load_pinned_corpus
from evalkit.corpus.suite import Suite
from evalkit.records import canonical_json
from evalkit.run.rebaseline import (
    IDENTITY_FIELDS,
    RebaselineResult,
    baseline_suite,
    holds_cases,
)
from evalkit.run.runner import RunOptions, run_suite
from evalkit.run_manifest import RunManifest
from evalkit.store import Store

__all__ = ["EXAM_LABEL_PREFIX", "answer_pinned", "find_exam_run", "unanswered"]

#: The label prefix of exam runs (``exam:<baseline run id>``).
EXAM_LABEL_PREFIX = "exam:"


def unanswered(pinned_inputs: Mapping[str, str], cand_cases: pl.DataFrame) -> list[str]:
    """Pinned case ids whose pinned input the candidate's run did not ask (``pinned_inputs``:
    case id -> its input JSON as pinned).

    Examples:
        >>> cand = pl.DataFrame({"case_id": ["a", "b"], "input": ["x", "y2"]})
        >>> unanswered({"a": "x", "b": "y", "c": "z"}, cand)
        ['b', 'c']
    """
    asked = dict(zip(cand_cases["case_id"].to_list(), cand_cases["input"].to_list(), strict=True))
    return sorted(c for c, text in pinned_inputs.items() if asked.get(c) != text)


def _same_identity(a: RunManifest, b: RunManifest) -> bool:
    return all(
        canonical_json(a.recorded(k)) == canonical_json(b.recorded(k)) for k in IDENTITY_FIELDS
    )


def find_exam_run(
    store: Store, base_run_id: str, cand_manifest: RunManifest, wanted: Mapping[str, str] = {}
) -> str | None:
    """The newest complete exam run for ``base_run_id`` made by the candidate's configuration
    (the same `IDENTITY_FIELDS`) holding every ``(case_id, hash)`` of ``wanted``; None if none."""
    runs = store.runs().filter(
        (pl.col("status") == "complete") & pl.col("label").str.starts_with(EXAM_LABEL_PREFIX)
    )
    for row in runs.sort("created_at", descending=True).iter_rows(named=True):
        manifest = RunManifest.from_stored(json.loads(row["manifest"]))
        if (manifest.exam or {}).get("of") != base_run_id:
            continue
        if not _same_identity(manifest, cand_manifest):
            continue
        if holds_cases(store, row["run_id"], wanted):
            return row["run_id"]
    return None


def answer_pinned(
    store: Store,
    suite: Suite,
    base_run_id: str,
    cand_run_id: str,
    *,
    progress: bool = False,
    use_cache: bool = True,
) -> RebaselineResult:
    """Run the candidate's configuration on the pinned cases it has no answer to (see the
    module docstring); ``reason`` says why nothing ran (no exam pinned, nothing unanswered, a
    configuration that cannot be rebuilt)."""
    exam = store.exam(base_run_id)  # the gate reads it only if a trusted promotion pinned it
    if exam is None:
        return RebaselineResult(
            run_id=None,
            cases=0,
            requests=0,
            cache_hits=0,
            reused=False,
            reason="no exam was pinned with the baseline",
        )
    cand_manifest = store.manifest(cand_run_id)
    ran = set(store.cases(base_run_id)["case_id"].to_list())
    with tempfile.TemporaryDirectory(prefix="evalkit-exam-") as scratch:
        corpus = load_pinned_corpus(exam.files, Path(scratch))
        pinned = {c.id: c for c in corpus.cases if c.id in ran and not c.sealed}
        missing = unanswered({c: case.input_json() for c, case in pinned.items()},
                             store.cases(cand_run_id))  # fmt: skip
        if not missing:
            return RebaselineResult(
                run_id=None,
                cases=0,
                requests=0,
                cache_hits=0,
                reused=False,
                reason="every pinned case was answered",
            )
        wanted = {c: pinned[c].hash for c in missing}
        found = find_exam_run(store, base_run_id, cand_manifest, wanted)
        if found is not None:
            return RebaselineResult(
                run_id=found, cases=len(wanted), requests=0, cache_hits=0, reused=True, reason=None
            )
        built = baseline_suite(suite, cand_manifest)
        if isinstance(built, str):
            return RebaselineResult(
                run_id=None,
                cases=0,
                requests=0,
                cache_hits=0,
                reused=False,
                reason=built.replace("baseline", "candidate"),
            )
        stored = cand_manifest.selection
        options = RunOptions(
            label=f"{EXAM_LABEL_PREFIX}{base_run_id}",
            use_cache=use_cache,
            progress=progress,
            selection={**stored, "case_ids": sorted(wanted)},
            extra_manifest={"exam": {"of": base_run_id, "for": cand_run_id,
                                     "exam_id": exam.exam_id}},
        )  # fmt: skip
        summary = run_suite(built, corpus.select(ids=sorted(wanted)), store, options)
    return RebaselineResult(
        run_id=summary.run_id,
        cases=summary.cases,
        requests=summary.requests,
        cache_hits=summary.cache_hits,
        reused=False,
        reason=None,
    )

"""Rebaselining: the baseline's configuration run on the cases a pull request added or edited.

Any edit gives a case a new hash, so edited and added cases never pair between a baseline and a
candidate; a pull request that rewords the cases its candidate broke would make them vanish
from the comparison. ``rebaseline`` runs the *baseline's* configuration — provider, endpoint,
model, sampling, prompt text and tool schemas, all from its manifest (``rerun``) — on exactly
those cases, as they are in the candidate, so they pair. It goes through the response cache (a
repeated rebaseline costs no model call) and reuses an earlier rebaseline run that covers the
same cases. A configuration that cannot be rebuilt (a baseline recorded before ``rerun``, a
Python system whose code changed) is a reason, never a run of something else.

Examples:
    >>> result = rebaseline(store, suite, "20261130T041502-3f9a1c", "cand")  # doctest: +SKIP
    >>> result.run_id, result.cases, result.requests, result.reused          # doctest: +SKIP
    ('20261130T041733-9c0e2d', 3, 3, False)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import polars as pl
from pydantic import ValidationError

from evalkit.corpus.cases import Case, Corpus, load_corpus
from evalkit.corpus.manifest import build_manifest
from evalkit.corpus.messages import template_vars
from evalkit.corpus.selection import Selection
from evalkit.corpus.suite import Suite, SuiteConfig, SystemConfig
from evalkit.errors import EvalkitError
from evalkit.records import canonical_json
from evalkit.run.runner import RunOptions, run_suite
from evalkit.run_manifest import ModelInfo, ProviderInfo, RunManifest
from evalkit.store import Store

__all__ = [
    "IDENTITY_FIELDS",
    "LABEL_PREFIX",
    "NOTHING_CHANGED",
    "RebaselineResult",
    "baseline_suite",
    "delta_cases",
    "find_rebaseline",
    "rebaseline",
]

#: The manifest fields that say who answered and how it was asked: a rebaseline run must
#: record exactly the baseline's (judge, scorers and corpus are the candidate's, as compared).
IDENTITY_FIELDS = ("provider", "system", "model", "prompt", "tools", "sampling", "replays")
#: The label prefix of rebaseline runs (``rebaseline:<baseline run id>``).
LABEL_PREFIX = "rebaseline:"
#: ``RebaselineResult.reason`` when the candidate added or edited no case.
NOTHING_CHANGED = "nothing added or edited"


@dataclass(frozen=True, kw_only=True)
class RebaselineResult:
    """What :func:`rebaseline` did: the run (None: none made or found), how many delta cases it
    holds, the requests and cache hits it cost, whether an earlier run was reused, and why
    some or all cases could not be rebaselined (None: every added or edited case was)."""

    run_id: str | None
    cases: int
    requests: int
    cache_hits: int
    reused: bool
    reason: str | None


def delta_cases(base_cases: pl.DataFrame, cand_cases: pl.DataFrame) -> dict[str, str]:
    """``case_id → candidate case hash`` of the candidate's unsealed cases that the baseline
    lacks (added) or holds with another hash (edited), by case id.

    Examples:
        >>> b = pl.DataFrame({"case_id": ["a", "b"], "case_hash": ["1", "2"]})
        >>> c = pl.DataFrame({"case_id": ["a", "b", "c", "s"], "case_hash": ["1", "9", "3", "4"],
        ...     "sealed": [False, False, False, True]})
        >>> delta_cases(b, c)
        {'b': '9', 'c': '3'}
    """
    cand = cand_cases.select(
        "case_id", "case_hash", *(["sealed"] if "sealed" in cand_cases.columns else [])
    )
    if "sealed" in cand.columns:
        cand = cand.filter(~pl.col("sealed").fill_null(False))
    # joined in Polars, not as a dict per side: a million cases' ids as Python strings
    base = base_cases.select("case_id", pl.col("case_hash").alias("_base"))
    changed = (
        cand.join(base, on="case_id", how="left")
        .filter(pl.col("_base").ne_missing(pl.col("case_hash")))
        .sort("case_id", "case_hash")
    )
    return dict(changed.select("case_id", "case_hash").iter_rows())


def baseline_suite(suite: Suite, base_manifest: RunManifest) -> Suite | str:
    """``suite`` (the pull request's) with the baseline's configuration put back, or a one-line
    reason why it cannot be.

    From the baseline's manifest: provider, endpoint, function, model and snapshot, sampling,
    ``max_steps``, ``offer_tools``, replays, and (``rerun``) the system prompt text, user
    template, prompt version and tool schemas. The rest (keys, concurrency, judge, rate limits)
    stays the pull request's. The endpoint keeps the pull request's URL, credentials included,
    when it is the baseline's; otherwise it is the one the baseline recorded. The result must
    record the baseline's :data:`IDENTITY_FIELDS` exactly: a Python system whose code
    fingerprint changed, a system version or index that moved, or a field this evalkit cannot
    rebuild is the reason, naming the fields.
    """
    rerun = base_manifest.rerun
    if not isinstance(rerun, dict):
        return (
            "the baseline's manifest records no prompt text or tool schemas (no 'rerun': it was "
            "made by an older evalkit); run the baseline configuration again to rebaseline"
        )
    try:
        rebuilt = _rebuilt(suite, base_manifest, rerun)
        empty = Corpus(suite.root, (), {})
        fresh = build_manifest(
            rebuilt, empty, run_id="rebaseline", label="rebaseline", selection={}
        )
    except (EvalkitError, ValidationError, KeyError, TypeError, ValueError) as exc:
        text = " ".join(str(exc).split())
        return f"the baseline configuration cannot be rebuilt: {text[:300]}"
    differing = [
        name
        for name in IDENTITY_FIELDS
        if canonical_json(fresh.recorded(name)) != canonical_json(base_manifest.recorded(name))
    ]
    return _mismatch(differing, base_manifest, fresh) if differing else rebuilt


def find_rebaseline(store: Store, base_run_id: str, wanted: Mapping[str, str]) -> str | None:
    """The newest complete run whose manifest says ``rebaseline.of == base_run_id`` and whose
    stored cases include every ``(case_id, hash)`` of ``wanted``; None when there is none."""
    runs = store.runs().filter(
        (pl.col("status") == "complete")
        & pl.col("manifest").str.contains(base_run_id, literal=True)
    )
    for row in runs.sort("created_at", descending=True).iter_rows(named=True):
        marker = RunManifest.from_stored(json.loads(row["manifest"])).rebaseline or {}
        if marker.get("of") != base_run_id:
            continue
        if holds_cases(store, row["run_id"], wanted):
            return row["run_id"]
    return None


def holds_cases(store: Store, run_id: str, wanted: Mapping[str, str]) -> bool:
    """Whether run ``run_id`` stored every ``(case_id, hash)`` of ``wanted``."""
    cases = store.cases(run_id)
    stored = dict(zip(cases["case_id"].to_list(), cases["case_hash"].to_list(), strict=True))
    return all(stored.get(case_id) == digest for case_id, digest in wanted.items())


def rebaseline(
    store: Store,
    suite: Suite,
    base_run_id: str,
    cand_run_id: str,
    *,
    progress: bool = False,
    use_cache: bool = True,
) -> RebaselineResult:
    """Run the baseline's configuration on the candidate's added and edited cases.

    The cases come from the corpus at ``suite.root`` (the candidate's, loaded with its
    selection's ``sealed`` flag and ``skip_scorers``); a case whose hash moved since the
    candidate ran is skipped (counted in ``reason``). An earlier complete rebaseline of
    ``base_run_id`` holding every remaining case is returned (``reused``) instead of a new run.
    The run is labelled ``rebaseline:<base_run_id>`` and its manifest records
    ``rebaseline: {of, for}`` and the case ids under ``selection``.

    Raises:
        StoreError: a run id that is not in the store.
        CorpusError: the corpus at ``suite.root`` no longer loads.
    """
    delta = delta_cases(store.cases(base_run_id), store.cases(cand_run_id))
    if not delta:
        return RebaselineResult(
            run_id=None, cases=0, requests=0, cache_hits=0, reused=False, reason=NOTHING_CHANGED
        )
    built = baseline_suite(suite, store.manifest(base_run_id))
    if isinstance(built, str):
        return RebaselineResult(
            run_id=None, cases=0, requests=0, cache_hits=0, reused=False, reason=built
        )
    stored = store.manifest(cand_run_id).selection
    selection = Selection(
        skip_scorers=tuple(stored.get("skip_scorers") or ()), sealed=bool(stored.get("sealed"))
    )
    corpus = selection.apply(load_corpus(suite.root, sealed=selection.sealed))
    current = {case.id: case for case in corpus.cases}
    moved = [case_id for case_id, digest in delta.items() if _hash(current, case_id) != digest]
    template = built.config.system.user_template
    unrenderable = [
        case_id
        for case_id in delta
        if case_id not in moved and not _renders(current[case_id], template)
    ]
    wanted = {k: v for k, v in delta.items() if k not in moved and k not in unrenderable}
    notes = []
    if moved:
        notes.append(
            f"{len(moved)} added/edited case(s) changed since the candidate ran "
            f"({_shown(moved)}): run the candidate again to include them"
        )
    if unrenderable:
        notes.append(
            f"{len(unrenderable)} case(s) lack input.vars the baseline's user_template uses "
            f"({_shown(unrenderable)})"
        )
    reason = "; ".join(notes) or None
    if not wanted:
        return RebaselineResult(
            run_id=None, cases=0, requests=0, cache_hits=0, reused=False, reason=reason
        )
    found = find_rebaseline(store, base_run_id, wanted)
    if found is not None:
        return RebaselineResult(
            run_id=found, cases=len(wanted), requests=0, cache_hits=0, reused=True, reason=reason
        )
    options = RunOptions(
        label=f"{LABEL_PREFIX}{base_run_id}",
        use_cache=use_cache,
        progress=progress,
        selection={**stored, "case_ids": sorted(wanted)},
        extra_manifest={"rebaseline": {"of": base_run_id, "for": cand_run_id}},
    )
    summary = run_suite(built, corpus.select(ids=sorted(wanted)), store, options)
    return RebaselineResult(
        run_id=summary.run_id,
        cases=summary.cases,
        requests=summary.requests,
        cache_hits=summary.cache_hits,
        reused=False,
        reason=reason,
    )


def _rebuilt(suite: Suite, base: RunManifest, rerun: dict[str, Any]) -> Suite:
    """The suite with the baseline's fields put back (validated again)."""
    system = suite.config.system
    provider, model = base.provider or ProviderInfo(), base.model or ModelInfo()
    tools = base.tools or {}
    snapshot = model.snapshot
    updates: dict[str, Any] = {
        "provider": provider.name,
        "function": provider.function,
        "model": model.id,
        "snapshot": None if snapshot in (None, model.id) else snapshot,
        "sampling": base.sampling,
        "max_steps": tools["max_steps"],
        "offer_tools": tools["offer"],
        "user_template": rerun["user_template"],
        "prompt": rerun.get("prompt"),
        "prompt_version": rerun.get("prompt_version"),
        **_endpoint(system, provider, base.requests),
    }
    config = SuiteConfig.model_validate(
        {
            **suite.config.model_dump(),
            "system": {**system.model_dump(), **updates},
            "replays": base.replays,
        }
    )
    return Suite(config, suite.path, suite.root, rerun.get("system_prompt"), rerun.get("tools"))


def _endpoint(system: SystemConfig, provider: ProviderInfo, requests: dict[str, Any]) -> dict:
    """Where the rebuilt system sends requests: the pull request's URL (its credentials) when
    it is the endpoint the baseline recorded, else the recorded one (and its replicas)."""
    if provider.name == "python":
        return {"base_url": None, "base_urls": []}
    recorded = provider.base_url
    mine = system.effective_endpoint()
    if mine.url is not None and mine.recorded == recorded:
        return {"base_url": mine.url, "transport": system.resolved_transport()}
    transport = requests.get("transport")
    return {
        "base_url": recorded,
        "base_urls": list(requests.get("replicas") or []),
        "transport": transport if transport in ("openai", "lean") else "auto",
    }


def _mismatch(differing: list[str], base: RunManifest, fresh: RunManifest) -> str:
    """One line naming what the rebuilt configuration would record differently."""
    parts = []
    fields: list[str] = []
    for name in differing:
        old, new = base.recorded(name), fresh.recorded(name)
        if isinstance(old, dict) and isinstance(new, dict):
            keys = sorted(k for k in old.keys() | new.keys() if _differs(old.get(k), new.get(k)))
            fields += [f"{name}.{k}" for k in keys] or [name]
        else:
            fields.append(name)
    code = "system.code_fingerprint"
    if code in fields:
        was = (base.system or {}).get("code_fingerprint")
        now = (fresh.system or {}).get("code_fingerprint")
        parts.append(
            "the Python system's code changed since the baseline ran (code fingerprint "
            f"{str(was)[:12]} → {str(now)[:12]}); promote a baseline of the new code instead"
        )
        fields = [f for f in fields if f not in (code, "system.code")]
    if fields:
        parts.append(f"{', '.join(fields)} would differ from the baseline's manifest")
    return "the baseline configuration cannot be rebuilt: " + "; ".join(parts)


def _differs(a: Any, b: Any) -> bool:
    return canonical_json(a) != canonical_json(b)


def _hash(cases: Mapping[str, Case], case_id: str) -> str | None:
    case = cases.get(case_id)
    return case.hash if case is not None else None


def _renders(case: Case, user_template: str) -> bool:
    """Whether the case's input fills every variable of ``user_template``."""
    if case.messages is not None:
        return True
    return not template_vars(user_template) - set(case.vars or {}) - {"documents"}


def _shown(ids: list[str], limit: int = 5) -> str:
    more = f" and {len(ids) - limit} more" if len(ids) > limit else ""
    return ", ".join(ids[:limit]) + more

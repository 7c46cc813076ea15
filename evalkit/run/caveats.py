"""Warnings a run carries into ``manifest["warnings"]``: printed by ``evalkit run``, shown by the
compare and gate reports.

Before the run: the judge shares the model family of the system under test (in the manifest
builder), a model named by an alias with no pinned snapshot, fewer than ``MIN_JUDGE_REPLAYS``
replays where a judge decides a critical tag or a must_pass case. After it: a run mostly served
from the response cache, and a run with fewer outputs than selected cases × replays.

Examples:
    >>> is_pinned("gpt-4o-2024-08-06"), is_pinned("gpt-4o")
    (True, False)
"""

from __future__ import annotations

import re

from evalkit.corpus.cases import Corpus
from evalkit.corpus.suite import Suite
from evalkit.scorers.registry import JUDGE

MIN_JUDGE_REPLAYS = 5
#: Share of cached outputs above which a run is "mostly cached".
MOSTLY_CACHED = 0.5
#: A model name ending in a date or a release number names a snapshot, not an alias.
_PINNED = re.compile(r"[-@_:](\d{8}|\d{4}-\d{2}-\d{2}|\d{3,4}|v\d+(\.\d+)*)$")


def is_pinned(model: str) -> bool:
    """Whether a model name pins a snapshot by itself (``claude-3-5-sonnet-20241022``)."""
    return bool(_PINNED.search(model))


def config_warnings(suite: Suite, corpus: Corpus) -> list[str]:
    """What is worth knowing before any model call (the judge-family warning is the manifest's)."""
    config = suite.config
    system, judge = config.system, config.judge
    warnings: list[str] = []
    simulated = system.provider == "demo" or system.model.startswith("demo-")
    pinned = bool(system.snapshot) or is_pinned(system.model)
    if system.provider != "python" and not simulated and not pinned:
        warnings.append(
            f"model {system.model!r} is an alias with no pinned snapshot: the provider may "
            "move it under you between baseline and candidate; set system.snapshot"
        )
    judged = [c for c in corpus.cases if any(s.tier == JUDGE for s in c.scorers)]
    judge_pinned = judge is None or bool(judge.snapshot) or is_pinned(judge.model)
    if judged and judge is not None and not judge.model.startswith("demo-") and not judge_pinned:
        warnings.append(
            f"judge model {judge.model!r} is an alias with no pinned snapshot: its verdicts "
            "may drift between runs; set judge.snapshot"
        )
    if judged and config.replays < MIN_JUDGE_REPLAYS:
        gated = sorted({t for c in judged for t in c.tags if t in config.critical_tags})
        must_pass = sum(c.must_pass for c in judged)
        where = [f"critical tag(s) {', '.join(gated)}"] if gated else []
        where += [f"{must_pass} must_pass case(s)"] if must_pass else []
        if where:
            warnings.append(
                f"replays {config.replays} < {MIN_JUDGE_REPLAYS} where a judge decides "
                f"{' and '.join(where)}: one judge verdict per case is noisy; "
                f"set replays: {MIN_JUDGE_REPLAYS} (or --replays {MIN_JUDGE_REPLAYS})"
            )
    return warnings


def result_warnings(outputs: int, cached: int, expected: int) -> list[str]:
    """What the stored outputs say about the run: mostly cached, or incomplete.

    Examples:
        >>> result_warnings(10, 9, 10)[0][:30]
        '9 of 10 outputs (90%) came fro'
    """
    warnings: list[str] = []
    if outputs and cached / outputs > MOSTLY_CACHED:
        warnings.append(
            f"{cached} of {outputs} outputs ({cached / outputs:.0%}) came from the response "
            "cache: they were produced by earlier runs (their latency and cost are those runs'); "
            "run with --no-cache to measure the system as it answers now"
        )
    if outputs < expected:
        warnings.append(
            f"incomplete run: {outputs} of {expected} outputs (selected cases × replays) stored"
        )
    return warnings

"""Whether two runs may be compared: their manifests may differ only in the declared variable
under test (``--allow-diff FIELD``).

The scorers are the instrument, not the system under test: a pair whose scorer sources differ
where both sides have them (a schema, rubric or custom scorer module edited between the runs), or
that differ only because one side was rescored (`evalkit.compare.analysis.load_run` puts a
rescoring's recorded sources in the manifest), is refused unless declared with
``--allow-diff scorers`` (the declared name of ``scorer_files``; ``scorer_files`` is accepted too).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from evalkit.corpus.manifest import COMPARABLE_FIELDS, manifest_diff
from evalkit.errors import ComparabilityError, ConfigError
from evalkit.run_manifest import RunManifest, as_manifest

#: Declared names accepted by ``--allow-diff`` for a manifest field.
ALIASES = {"scorers": "scorer_files"}
_DISPLAY = {field: alias for alias, field in ALIASES.items()}


def _field(name: str) -> str:
    return ALIASES.get(name, name)


def _short(value: Any, width: int = 24) -> str:
    text = json.dumps(value, sort_keys=True, default=str) if not isinstance(value, str) else value
    return text if len(text) <= width else text[: width - 1] + "…"


def _leaf_diffs(a: Any, b: Any, path: str) -> Iterable[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            yield from _leaf_diffs(a.get(key), b.get(key), f"{path}.{key}")
    elif a != b:
        yield f"{path} {_short(a)} → {_short(b)}"


def check_comparable(
    base_manifest: RunManifest | Mapping[str, Any],
    cand_manifest: RunManifest | Mapping[str, Any],
    allow_diff: Sequence[str] = (),
) -> list[str]:
    """The comparable manifest fields that differ; refuse what the declaration does not cover.

    Without ``allow_diff`` one differing field is the variable under test and more are refused.
    With ``allow_diff`` (``--allow-diff FIELD``, the declared variables under test) every
    differing field must be declared: ``--allow-diff prompt`` refuses a pair that differs in
    ``model``. A declared field that does not differ is a warning (:func:`comparability_warnings`).

    Raises:
        ComparabilityError: naming each differing field and its values.
        ConfigError: ``allow_diff`` names a field that is not a comparable manifest field.

    Examples:
        >>> a = {"model": {"id": "a"}, "prompt": {"version": "p"}}
        >>> check_comparable(a, {**a, "model": {"id": "b"}})
        ['model']
    """
    base_manifest, cand_manifest = as_manifest(base_manifest), as_manifest(cand_manifest)
    unknown = sorted(set(allow_diff) - set(COMPARABLE_FIELDS) - set(ALIASES))
    if unknown:
        known = [_DISPLAY.get(f, f) for f in COMPARABLE_FIELDS]
        raise ConfigError(
            f"--allow-diff: unknown manifest field(s) {', '.join(unknown)}; "
            f"comparable fields are {', '.join(known)}"
        )
    declared_fields = {_field(f) for f in allow_diff}
    differing = manifest_diff(base_manifest, cand_manifest)
    undeclared = [f for f in differing if f not in declared_fields]
    if "scorer_files" in undeclared and _scorers_must_be_declared(base_manifest, cand_manifest):
        raise ComparabilityError(_scorer_refusal(base_manifest, cand_manifest, undeclared))
    if undeclared and (allow_diff or len(differing) > 1):
        details = "; ".join(
            next(iter(_leaf_diffs(base_manifest.recorded(f), cand_manifest.recorded(f), f)), f)
            for f in differing
        )
        flags = " ".join(f"--allow-diff {_DISPLAY.get(f, f)}" for f in undeclared)
        declared = f" (declared: {', '.join(allow_diff)})" if allow_diff else ""
        if "suite" in undeclared:
            raise ComparabilityError(_suite_refusal(base_manifest, cand_manifest, differing))
        raise ComparabilityError(
            f"refusing to compare: the runs' manifests differ in {len(differing)} field(s) "
            f"({', '.join(differing)}){declared}: {details}; compare runs that differ only in "
            f"the variable under test, or declare the other differences with {flags}"
        )
    return differing


def _suite_refusal(base: RunManifest, cand: RunManifest, differing: Sequence[str]) -> str:
    """Two runs of different suites: say that first. Declaring every differing field would only
    lead to a gate with no paired case (cases pair by id within one suite), so the fix is to pick
    two runs of one suite; ``--allow-diff suite`` is for a suite that was only renamed.

    Examples:
        >>> a, b = RunManifest(suite="a"), RunManifest(suite="b")
        >>> message = _suite_refusal(a, b, ["suite", "model"])
        >>> message.split(": compare")[0]
        'refusing to compare: the runs are of different suites (a → b; they also differ in model)'
    """
    others = [f for f in differing if f != "suite"]
    also = f"; they also differ in {', '.join(others)}" if others else ""
    return (
        f"refusing to compare: the runs are of different suites "
        f"({base.suite} → {cand.suite}{also}): compare two runs of one suite "
        "(`evalkit runs list` shows each run's suite); if the suite was only renamed, declare "
        "--allow-diff suite"
    )


def comparability_warnings(differing: Sequence[str], allow_diff: Sequence[str]) -> list[str]:
    """A warning per declared variable under test that did not change between the runs.

    Examples:
        >>> comparability_warnings(["prompt"], ["prompt", "model"])
        ['--allow-diff model: the runs do not differ in model (is this the pair you meant?)']
    """
    return [
        f"--allow-diff {f}: the runs do not differ in {f} (is this the pair you meant?)"
        for f in allow_diff
        if _field(f) not in differing
    ]


def _run_sources(manifest: RunManifest) -> Any:
    """The scorer sources the run itself recorded (before any rescoring)."""
    own = manifest.run_scorer_files
    return own if own is not None else manifest.scorer_files


def _scorers_must_be_declared(base: RunManifest, cand: RunManifest) -> bool:
    """Differing scorer sources that no single-variable comparison may take implicitly: a source
    both sides have changed, or a difference that comes only from a rescoring. (A source only one
    side has belongs to cases only that side has: the corpus delta, accounted for elsewhere.)"""
    b, c = base.scorer_files, cand.scorer_files
    shared_changed = any(b[k] != c[k] for k in set(b) & set(c))
    return shared_changed or _run_sources(base) == _run_sources(cand)


def _scorer_refusal(base: RunManifest, cand: RunManifest, undeclared: Sequence[str]) -> str:
    """One line: which scorer sources differ, whether a rescoring caused it, what to do."""
    leaves = list(_leaf_diffs(base.scorer_files, cand.scorer_files, "scorer_files"))
    details = "; ".join(leaves[:3]) + (f"; {len(leaves) - 3} more" if len(leaves) > 3 else "")
    rescored = [
        (role, m.rescoring["scoring_id"])
        for role, m in (("baseline", base), ("candidate", cand))
        if m.rescoring and m.rescoring.get("scoring_id")
    ]
    if rescored and _run_sources(base) == _run_sources(cand):
        roles = " and the ".join(role for role, _ in rescored)
        verb = "was" if len(rescored) == 1 else "were"
        scorings = ", ".join(scoring for _, scoring in rescored)
        noun = "scoring" if len(rescored) == 1 else "scorings"
        head = f"the {roles} {verb} rescored with other scorer sources ({noun} {scorings})"
        fix = "rescore both runs with the same scorers"
    else:
        head = "the runs were scored with other scorer sources"
        fix = "score both runs with the same scorers"
    others = [f for f in undeclared if f != "scorer_files"]
    also = (
        f"; the manifests also differ in {', '.join(others)} "
        f"({' '.join(f'--allow-diff {_DISPLAY.get(f, f)}' for f in others)})"
        if others
        else ""
    )
    return f"refusing to compare: {head}: {details}; {fix}, or declare --allow-diff scorers{also}"


def rebaseline_blocker(base_manifest: RunManifest, cand_manifest: RunManifest) -> str | None:
    """Why the baseline's configuration cannot be run again on new cases, or None.

    Examples:
        >>> from evalkit.run_manifest import ProviderInfo
        >>> openai = ProviderInfo(name="openai")
        >>> rebaseline_blocker(RunManifest(rerun={}, provider=openai), RunManifest())
        >>> rebaseline_blocker(RunManifest(provider=openai), RunManifest())[:40]
        'the baseline run predates recorded re-ru'
    """
    if base_manifest.rerun is None:
        return (
            "the baseline run predates recorded re-run settings (prompt text, tool schemas): "
            "run and promote a new baseline"
        )
    provider = base_manifest.provider.name if base_manifest.provider else None
    if provider == "python" and base_manifest.system != cand_manifest.system:
        return (
            "the baseline is a Python system whose code (or version) differs from the "
            "candidate's: its configuration cannot be rebuilt from this checkout"
        )
    return None

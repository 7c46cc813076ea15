"""Whether two runs may be compared: their manifests may differ only in the declared variable
under test (``--allow-diff FIELD``)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from evalkit.corpus.manifest import COMPARABLE_FIELDS, manifest_diff
from evalkit.errors import ComparabilityError, ConfigError


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
    base_manifest: dict[str, Any], cand_manifest: dict[str, Any], allow_diff: Sequence[str] = ()
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
        >>> check_comparable({"model": "a", "prompt": "p"}, {"model": "b", "prompt": "p"})
        ['model']
    """
    unknown = sorted(set(allow_diff) - set(COMPARABLE_FIELDS))
    if unknown:
        raise ConfigError(
            f"--allow-diff: unknown manifest field(s) {', '.join(unknown)}; "
            f"comparable fields are {', '.join(COMPARABLE_FIELDS)}"
        )
    differing = manifest_diff(base_manifest, cand_manifest)
    undeclared = [f for f in differing if f not in allow_diff]
    if undeclared and (allow_diff or len(differing) > 1):
        details = "; ".join(
            next(iter(_leaf_diffs(base_manifest.get(f), cand_manifest.get(f), f)), f)
            for f in differing
        )
        flags = " ".join(f"--allow-diff {f}" for f in undeclared)
        declared = f" (declared: {', '.join(allow_diff)})" if allow_diff else ""
        raise ComparabilityError(
            f"refusing to compare: the runs' manifests differ in {len(differing)} field(s) "
            f"({', '.join(differing)}){declared}: {details}; compare runs that differ only in "
            f"the variable under test, or declare the other differences with {flags}"
        )
    return differing


def comparability_warnings(differing: Sequence[str], allow_diff: Sequence[str]) -> list[str]:
    """A warning per declared variable under test that did not change between the runs.

    Examples:
        >>> comparability_warnings(["prompt"], ["prompt", "model"])
        ['--allow-diff model: the runs do not differ in model (is this the pair you meant?)']
    """
    return [
        f"--allow-diff {f}: the runs do not differ in {f} (is this the pair you meant?)"
        for f in allow_diff
        if f not in differing
    ]

"""The notebook's and script's front door: `Project` (run, compare, gate, runs, history,
labels) over the functions the CLI calls, and the values it returns.

The names load on first use: ``evalkit run`` imports `evalkit.project.planning` and must not
pay for Polars and the result types it never shows.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from evalkit.project.project import Project
    from evalkit.project.results import ComparisonResult, RunResult

__all__ = ["ComparisonResult", "Project", "RunResult"]

_HOMES = {
    "Project": "evalkit.project.project",
    "ComparisonResult": "evalkit.project.results",
    "RunResult": "evalkit.project.results",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'evalkit.project' has no attribute {name!r}")
    return getattr(import_module(_HOMES[name]), name)

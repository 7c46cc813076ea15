"""Scorers, cheapest first: deterministic, executable, similarity, then model judges."""

from evalkit.scorers import (
    deterministic,  # noqa: F401  (registers the built-in scorers)
    executable,  # noqa: F401
    judge,  # noqa: F401
    similarity,  # noqa: F401
    structured,  # noqa: F401
    trajectory,  # noqa: F401
)
from evalkit.scorers.registry import SCORERS, Scorer, build_scorer, check, scorer, scorer_error

__all__ = ["SCORERS", "Scorer", "build_scorer", "check", "scorer", "scorer_error"]

"""Scorers, cheapest first: deterministic, executable, similarity, then model judges."""

from evalkit.scorers import deterministic  # noqa: F401  (registers the built-in scorers)
from evalkit.scorers.registry import SCORERS, Scorer, build_scorer, check, scorer, scorer_error

__all__ = ["SCORERS", "Scorer", "build_scorer", "check", "scorer", "scorer_error"]

"""Scorers, cheapest first: deterministic, executable, similarity, then model judges.

Importing this package imports the registry alone: each built-in scorer's module is imported
when a case first names it (:data:`~evalkit.scorers.registry.BUILTIN_MODULES`), or all of them
when the registry is listed.
"""

from evalkit.scorers.registry import SCORERS, Scorer, build_scorer, check, scorer, scorer_error

__all__ = ["SCORERS", "Scorer", "build_scorer", "check", "scorer", "scorer_error"]

"""What a run's pass rate counts, in words: pure text, apart from `evalkit.run.summary` (which
reads the store), so a report read back from a file labels its rates without loading DuckDB."""

from __future__ import annotations


def rate_basis(replays: int | None) -> str:
    """What a run's pass rate counts, as every table and line that shows one labels it.

    Examples:
        >>> rate_basis(1), rate_basis(3)
        ('per case', 'per case, majority of 3 replays')
    """
    n = replays or 1
    return "per case" if n <= 1 else f"per case, majority of {n} replays"

"""What a run's pass rate counts, in words: pure text, apart from `evalkit.run.summary` (which
reads the store), so a report read back from a file labels its rates without loading DuckDB."""

from __future__ import annotations

from evalkit.replay_rules import PassRules


def rate_basis(replays: int | None, rules: PassRules | None = None) -> str:
    """What a run's pass rate counts, as every table and line that shows one labels it: each
    case's verdict under the run's replay pass ``rules`` (majority when None).

    Examples:
        >>> rate_basis(1), rate_basis(3)
        ('per case', 'per case, majority of 3 replays')
        >>> rate_basis(3, PassRules.from_config({"pass_rule": "k_of_n: 2/3"}))
        'per case, 2 of 3 replays'
    """
    n = replays or 1
    return "per case" if n <= 1 else f"per case, {(rules or PassRules()).basis(n)}"

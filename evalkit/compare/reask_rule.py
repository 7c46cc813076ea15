"""The rule by which targeted re-asks excuse a flaky must_pass failure, apart from the re-asks
themselves (`evalkit.compare.reask`): pure Python, so ``evalkit gate --help`` states the
default without loading the frames and models the re-asks need.

Examples:
    >>> excused(reasks=5, fails=1, flake_rate=0.4)
    True
    >>> excused(reasks=5, fails=3, flake_rate=0.4), excused(reasks=0, fails=0, flake_rate=0.4)
    (False, False)
"""

from __future__ import annotations

#: Re-asks of each excused case the gate needs (and ``--reask-flakes`` makes by default).
REASKS = 5
#: Label prefix of the re-ask runs: ``reask:<candidate run id>``.
LABEL_PREFIX = "reask:"


def excused(reasks: int, fails: int, flake_rate: float, needed: int = REASKS) -> bool:
    """Whether ``fails`` of ``reasks`` re-asks stay within the listed ``flake_rate``."""
    return reasks >= needed and fails <= flake_rate * reasks + 1e-9

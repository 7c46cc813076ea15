"""Shared pieces of `evalkit.stats`: type aliases, seeding, input checks, chunked resampling."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

Alternative = Literal["greater", "less", "two-sided"]
Sides = Literal["one-sided", "two-sided"]
Seed = int | np.random.Generator
Array = npt.ArrayLike
#: Resampled values held at once: bounds a bootstrap's memory whatever the number of resamples
#: and cases, in chunks large enough that numpy's per-call cost is spread thin.
CHUNK_ELEMS = 1 << 22
#: Case indices drawn at once by the index bootstrap: small enough that the allocator reuses
#: the same block chunk after chunk (a block as large as CHUNK_ELEMS was mapped and unmapped
#: each time, and the page faults dominated) and that it stays in cache while gathered.
INDEX_CHUNK_ELEMS = 1 << 20


@dataclass(frozen=True, slots=True)
class Interval:
    """A confidence interval; unpacks as ``lo, hi = interval``."""

    lo: float
    hi: float
    level: float

    def __iter__(self) -> Iterator[float]:
        return iter((self.lo, self.hi))


def rng_from(seed: Seed) -> tuple[np.random.Generator, int]:
    """A fresh generator and the int seed that replays it (one int drawn from a Generator)."""
    if isinstance(seed, np.random.Generator):
        seed = int(seed.integers(2**63))
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"seed must be a non-negative int or a np.random.Generator, got {seed!r}")
    return np.random.default_rng(int(seed)), int(seed)


def vector(x: Array, name: str) -> np.ndarray:
    """``x`` as a finite 1-d float array, or ValueError naming ``name``."""
    arr = np.asarray(x, dtype=float)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} contains NaN or inf; drop or score those cases first")
    return arr


def check(level: float, iters: int = 1, k: int = 0, n: int = 1) -> None:
    """Refuse a level outside (0, 1), iters < 1, or counts with not 0 <= k <= n, n >= 1."""
    if not 0 < level < 1 or iters < 1:
        raise ValueError(f"need 0 < level < 1 and iters >= 1, got {level}, {iters}")
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"need n >= 1 and 0 <= k <= n, got k={k}, n={n}")


def resample(draw: Callable[[int], np.ndarray], iters: int, chunk: int) -> np.ndarray:
    """``iters`` statistics from ``draw(m)``, called ``chunk`` resamples at a time."""
    return np.concatenate([draw(min(chunk, iters - s)) for s in range(0, iters, chunk)])

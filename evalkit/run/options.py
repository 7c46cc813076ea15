"""What a run is asked to do (:class:`RunOptions`) and what its caller learns once it is
recorded, before any model call (:class:`RunStart`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RunStart:
    """Handed to ``RunOptions.on_start`` once the run is recorded, before any model call."""

    run_id: str
    label: str
    resumed: bool
    expected_outputs: int  # selected cases × replays
    stored: int  # outputs already stored (a resume)
    to_do: int
    use_cache: bool
    warnings: tuple[str, ...]


@dataclass(frozen=True)
class RunOptions:
    label: str = "run"
    replays: int | None = None  # None: the suite's ``replays``
    concurrency: int | None = None  # None: the suite's ``concurrency``
    use_cache: bool | None = None  # None: the suite's ``cache`` (a resume: the run's own)
    progress: bool = True
    resume: str | None = None  # run id to continue
    retry_errors: bool = False  # with ``resume``: ask stored errors again
    selection: dict[str, Any] = field(default_factory=dict)
    # A batch is written flush_interval_s after its first answer, or sooner at flush_rows
    # answers, and no more than flush_rows are ever pending (workers wait): a crash loses at
    # most that many, none older than the interval (see evalkit.run.writer). Each batch
    # reopens the file (readers may hold it between batches), so small batches at a high
    # output rate would cost a share of the run's wall; flush_rows is large enough that at
    # such rates a batch is written by the interval, not by its size.
    flush_rows: int = 2048
    flush_interval_s: float = 0.5
    seed: int = 0  # jitter RNG only
    on_start: Callable[[RunStart], None] | None = None  # e.g. print the run id
    warnings: tuple[str, ...] = ()  # the caller's own (gate policy), kept with the run's
    # Recorded in a new run's manifest beside its own fields, never replacing one (and never
    # hashed: config_hash reads only the comparable fields), e.g. ``{"rebaseline": {...}}``.
    extra_manifest: dict[str, Any] = field(default_factory=dict)

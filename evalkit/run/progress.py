"""The run's progress bar: rate, ETA and errors on an interactive terminal (rich), in a Jupyter
kernel as tqdm's notebook widget (text when ipywidgets is missing); silent otherwise."""

from __future__ import annotations

import sys
import time
from typing import Any


def in_jupyter() -> bool:
    """True in a Jupyter kernel (IPython's ZMQ shell), where stderr is no terminal but a
    person watches the cell."""
    shell = sys.modules.get("IPython")
    get = getattr(shell, "get_ipython", None)
    return get is not None and type(get()).__name__ == "ZMQInteractiveShell"


def _notebook_bar(total: int) -> Any:
    """tqdm's widget in a notebook; its text bar there when ipywidgets is not installed."""
    try:
        import ipywidgets  # noqa: F401  (tqdm.notebook needs it to draw)
    except ImportError:
        from tqdm import tqdm

        return tqdm(total=total, desc="evalkit run", unit="output", file=sys.stderr)
    from tqdm.notebook import tqdm as notebook_tqdm

    return notebook_tqdm(total=total, desc="evalkit run", unit="output", file=sys.stderr)


class Progress:
    """A rich progress bar (rate and ETA) on a terminal, tqdm's in a Jupyter cell; silent
    otherwise.

    Completions are counted in plain ints and handed to rich at most every ``UPDATE_S`` seconds
    (it redraws 4 times a second anyway): a rich update per completion was a visible share of
    a CPU-bound run.
    """

    UPDATE_S = 0.2

    def __init__(self, total: int, enabled: bool) -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self._progress = None
        self._task = None
        self._tqdm = _notebook_bar(total) if enabled and not self.enabled and in_jupyter() else None
        self.total = total
        if self.enabled:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TaskProgressColumn,
                TextColumn,
                TimeRemainingColumn,
            )

            self._progress = Progress(
                TextColumn("[bold]evalkit run"),
                BarColumn(),
                MofNCompleteColumn(),
                TaskProgressColumn(),
                TextColumn("{task.fields[rate]}"),
                TimeRemainingColumn(),
                TextColumn("errors {task.fields[errors]}"),
                refresh_per_second=4,
                transient=False,
            )
            self._task = self._progress.add_task("run", total=total, rate="", errors=0)
        self._done = 0
        self._errors = 0
        self._started = time.perf_counter()
        self._next_update = self._started

    def __enter__(self) -> Progress:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._tqdm is not None:
            self._push(time.perf_counter())
            self._tqdm.close()
        if self._progress is not None:
            self._push(time.perf_counter())
            self._progress.stop()

    def advance(self, errored: bool) -> None:
        self._done += 1
        self._errors += errored
        if self._progress is not None or self._tqdm is not None:
            now = time.perf_counter()
            if now >= self._next_update or self._done == self.total:
                self._next_update = now + self.UPDATE_S
                self._push(now)

    def _push(self, now: float) -> None:
        if self._tqdm is not None:
            self._tqdm.set_postfix_str(f"errors {self._errors}", refresh=False)
            self._tqdm.update(self._done - self._tqdm.n)
        if self._progress is not None and self._task is not None:
            rate = self._done / max(now - self._started, 1e-9)
            self._progress.update(
                self._task, completed=self._done, rate=f"{rate:.1f}/s", errors=self._errors
            )

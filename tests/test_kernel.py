"""evalkit.kernel: ipykernel, then the heap frozen before the exit-time collections."""

from __future__ import annotations

import gc
import sys
from pathlib import Path

import pytest
from ipykernel import kernelapp

from evalkit import kernel


def test_the_kernel_runs_ipykernel_then_freezes_what_is_alive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[tuple[int, str]] = []
    monkeypatch.setattr(
        kernelapp, "launch_new_instance", lambda: seen.append((gc.get_freeze_count(), sys.path[0]))
    )
    monkeypatch.setattr(sys, "path", [str(Path.cwd()), "/the/next/entry", *sys.path])
    gc.unfreeze()  # the session froze its own heap (tests/conftest.py); the next file refreezes
    kernel.main()
    # ipykernel ran unfrozen, without the working directory first on sys.path (as
    # ipykernel_launcher); once it returned, everything alive was frozen
    assert seen == [(0, "/the/next/entry")]
    assert gc.get_freeze_count() > 0

"""The ``evalkit`` command sets Polars' allocator to hand freed pages back at once (issue 48
item 4: pages it kept added to a gate's peak), before Polars loads, and keeps a user's own."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

_SHOW = (
    "import os, sys, evalkit.cli; assert 'polars' not in sys.modules; "
    "print(os.environ['_RJEM_MALLOC_CONF'])"
)


@pytest.mark.parametrize(
    ("given", "seen"),
    [
        (None, "dirty_decay_ms:0,muzzy_decay_ms:0"),
        ("narenas:1", "narenas:1"),
        # inherited from a parent that imported Polars: Polars' own, not the user's
        ("dirty_decay_ms:500,muzzy_decay_ms:1000", "dirty_decay_ms:0,muzzy_decay_ms:0"),
    ],
)
def test_the_cli_sets_polars_allocator_before_polars_loads(given: str | None, seen: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "_RJEM_MALLOC_CONF"}
    if given is not None:
        env["_RJEM_MALLOC_CONF"] = given
    done = subprocess.run(
        [sys.executable, "-c", _SHOW], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == seen


def test_polars_own_value_is_what_importing_polars_writes() -> None:
    """The value the CLI treats as inherited from Polars is the one this Polars writes."""
    env = {k: v for k, v in os.environ.items() if k != "_RJEM_MALLOC_CONF"}
    show = "import os, polars; print(os.environ['_RJEM_MALLOC_CONF'])"
    done = subprocess.run(
        [sys.executable, "-c", show], env=env, capture_output=True, text=True, check=True
    )
    from evalkit.cli import _POLARS_OWN

    assert done.stdout.strip() in _POLARS_OWN

"""The suite's own scheduling list names files that exist (a renamed file would silently fall
back to collection order and could start last)."""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


def test_every_file_listed_as_slowest_exists_once(request: pytest.FixtureRequest) -> None:
    # tests/conftest.py as pytest registered it (several folders have a module named conftest)
    (conftest,) = (
        plugin
        for plugin in request.config.pluginmanager.get_plugins()
        if getattr(plugin, "__file__", None) == str(TESTS / "conftest.py")
    )
    listed = conftest.SLOWEST_FILES
    missing = [path for path in listed if not (TESTS.parent / path).is_file()]
    assert not missing, missing
    assert len(set(listed)) == len(listed) and len(listed) > 10

"""``evalkit run`` imports its modules with the cycle collector off (the command line's own
process only), then freezes what they made and turns the collector back on; a caller of
``main(argv)`` keeps its collector as it was. Counted with ``gc.callbacks``, not timed."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

import evalkit.cli as cli


@pytest.fixture()
def collections() -> Iterator[list[int]]:
    """The generation of every collection that starts while the fixture is active."""
    seen: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    gc.callbacks.append(count)
    yield seen
    gc.callbacks.remove(count)


def _allocate() -> None:
    """What an import does to the collector: many container objects that stay alive."""
    kept = [[i] for i in range(50_000)]
    _allocate.kept = kept  # type: ignore[attr-defined]


def test_the_command_line_imports_with_the_collector_off_then_freezes(
    monkeypatch: pytest.MonkeyPatch, collections: list[int]
) -> None:
    monkeypatch.setattr(cli, "_own_process", True)
    frozen = gc.get_freeze_count()
    try:
        with cli.start_up_imports():
            assert not gc.isenabled()
            _allocate()
        assert collections == []  # 50,000 objects allocated, no collection started
        assert gc.isenabled()
        assert gc.get_freeze_count() >= frozen + 50_000  # out of every later collection's reach
    finally:
        gc.unfreeze()  # this test process lives on: give the collector its objects back
        gc.enable()


def test_a_caller_of_main_keeps_its_collector(
    collections: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["cases"]) == 2  # a command run in this process (it prints its help)
    frozen = gc.get_freeze_count()
    with cli.start_up_imports():
        assert gc.isenabled()
        _allocate()
    assert collections  # the same allocations: the collector ran as usual
    assert gc.get_freeze_count() == frozen

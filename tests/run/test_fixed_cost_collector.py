"""``evalkit run`` imports its modules with the cycle collector off (the command line's own
process only), then freezes what they made and turns the collector back on; a caller of
``main(argv)`` keeps its collector as it was. Counted with ``gc.callbacks``, not timed. The
models those imports build skip pydantic's plugin lookup; a model made after them does not."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import evalkit.cli as cli

REPO = Path(__file__).resolve().parents[2]


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


#: A pydantic plugin, installed as a distribution (``fakeplug-1.0.dist-info`` with a
#: ``pydantic`` entry point) on a folder the child process puts on ``sys.path``: it records
#: the name of every model whose validator pydantic builds with it.
_PLUGIN = """
seen = []

class Plugin:
    def new_schema_validator(self, schema, schema_type, *rest, **kwargs):
        seen.append(schema_type.__name__)
        return None, None, None

plugin = Plugin()
"""

_MODELS = """
import json, sys
sys.path.insert(0, sys.argv[1])
import pydantic
import evalkit.cli as cli
import fakeplug

cli._own_process = sys.argv[2] == "own"
with cli.start_up_imports():  # as evalkit run imports its modules, models built at import
    class Ours(pydantic.BaseModel):
        x: int

class Theirs(pydantic.BaseModel):  # a user's model, made after (a python system's)
    x: int

Ours(x=1), Theirs(x=1)
print(json.dumps(fakeplug.seen))
"""


def _models_seen_by_a_plugin(tmp_path: Path, process: str) -> list[str]:
    (tmp_path / "fakeplug.py").write_text(_PLUGIN, encoding="utf-8")
    dist = tmp_path / "fakeplug-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fakeplug\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[pydantic]\nfake = fakeplug:plugin\n")
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    done = subprocess.run(
        [sys.executable, "-c", _MODELS, str(tmp_path), process],
        capture_output=True, text=True, cwd=REPO, env=env, check=False, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_command_line_builds_its_own_models_without_pydantic_plugins(tmp_path: Path) -> None:
    """pydantic's plugin lookup reads every installed distribution's metadata: the models
    evalkit builds at import skip it; a model made afterwards still meets the plugin."""
    assert _models_seen_by_a_plugin(tmp_path, "own") == ["Theirs"]


def test_a_caller_of_main_keeps_pydantic_plugins_for_every_model(tmp_path: Path) -> None:
    assert _models_seen_by_a_plugin(tmp_path, "caller") == ["Ours", "Theirs"]

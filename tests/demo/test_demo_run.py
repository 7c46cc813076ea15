"""``evalkit demo run`` works from any directory: the demo suite ships beside the package."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalkit.cli import main
from evalkit.demo.run import DEMO_CONFIG, demo_config


def test_the_demo_runs_outside_the_repository(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    assert demo_config() == DEMO_CONFIG and DEMO_CONFIG.is_file()
    monkeypatch.chdir(tmp_path)  # in this process: the simulator is a thread of it
    assert main(["demo", "run", "--no-gate", "--no-progress", "--db", "demo.duckdb"]) == 0
    out = capsys.readouterr().out
    assert "baseline run" in out and "candidate run" in out
    assert (tmp_path / "demo.duckdb").is_file()
    assert not (tmp_path / "corpus").exists()  # nothing of the suite was needed in the cwd

"""``evalkit demo run`` works from any directory: the demo suite ships beside the package."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from evalkit.demo.run import DEMO_CONFIG, demo_config


def test_the_demo_runs_outside_the_repository(tmp_path: Path) -> None:
    assert demo_config() == DEMO_CONFIG and DEMO_CONFIG.is_file()
    command = [sys.executable, "-m", "evalkit.cli", "demo", "run", "--no-gate", "--no-progress",
               "--db", "demo.duckdb"]  # fmt: skip
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "baseline run" in done.stdout and "candidate run" in done.stdout
    assert (tmp_path / "demo.duckdb").is_file()
    assert not (tmp_path / "corpus").exists()  # nothing of the suite was needed in the cwd

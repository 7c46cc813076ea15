"""The nightly CI example (examples/github-actions/evalkit-nightly.yml): its shape, and its
script run for two nights against the demo simulator with a person's promotion between them."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
NIGHTLY = REPO / "examples" / "github-actions" / "evalkit-nightly.yml"


def _steps() -> list[dict]:
    return yaml.safe_load(NIGHTLY.read_text())["jobs"]["nightly"]["steps"]


def _script(word: str) -> str:
    return next(s["run"] for s in _steps() if word in s.get("run", ""))


def test_the_nightly_is_scheduled_and_never_promotes_by_itself() -> None:
    flow = yaml.safe_load(NIGHTLY.read_text())
    on = flow[True]  # YAML 1.1 reads the key `on` as true
    assert on["schedule"][0]["cron"] and "promote" in on["workflow_dispatch"]["inputs"]
    nightly = _script("evalkit run")
    assert "--sealed" in nightly and "--no-cache" in nightly and "--set replays=" in nightly
    assert "evalkit flakes" in nightly and "evalkit gate" in nightly
    assert "baseline promote" not in nightly  # only the dispatched step, by a person
    promote = next(s for s in _steps() if "baseline promote" in s.get("run", ""))
    assert "workflow_dispatch" in promote["if"] and "github.actor" in promote["env"]["WHO"]
    assert "concurrency" in flow  # one writer of the store at a time
    cached = [s for s in _steps() if s.get("uses", "").startswith("actions/cache")]
    assert [s["with"]["path"] for s in cached] == ["data/evalkit.duckdb"] * 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _bash(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    prologue = "set -euo pipefail\ntrap 'kill ${EVALKIT_DEMO_PID:-} 2>/dev/null || true' EXIT\n"
    return subprocess.run(
        ["bash", "-c", prologue + script], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=420,
    )  # fmt: skip


@pytest.mark.timeout(480)
def test_two_nights_with_a_promotion_between(tmp_path: Path) -> None:
    work = tmp_path / "checkout"
    shutil.copytree(REPO / "corpus", work / "corpus")
    shutil.copytree(REPO / "notebooks", work / "notebooks")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVALKIT_", "PYTEST_"))}
    env |= {"PATH": os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
            "HOME": str(tmp_path), "RUNNER_TEMP": str(tmp_path), "REPLAYS": "2",
            "FLAKE_RUNS": "2"}  # fmt: skip
    # the workflow's fixed port may be taken on this machine: another free one, both nights
    night = _script("evalkit run").replace("--port 18080", f"--port {_free_port()}")
    first = _bash(night, work, env | {"GITHUB_STEP_SUMMARY": str(tmp_path / "s1.md")})
    assert first.returncode == 0, (first.stdout + first.stderr)[-3000:]
    summary = (tmp_path / "s1.md").read_text()
    assert "not passed (exit 2)" in summary  # no promoted baseline yet: nothing to gate against
    assert "Promotion candidate" in summary and "label nightly:" in summary
    promoted = _bash(_script("baseline promote"), work,
                     env | {"RUN": "nightly@latest", "WHO": "ana", "WHY": "night one"})  # fmt: skip
    assert promoted.returncode == 0, promoted.stderr
    second = _bash(night, work, env | {"GITHUB_STEP_SUMMARY": str(tmp_path / "s2.md")})
    assert second.returncode == 0, (second.stdout + second.stderr)[-3000:]
    summary = (tmp_path / "s2.md").read_text()
    assert (
        "evalkit gate: PASSED" in summary
        and "gate against the promoted baseline: passed" in summary
    )
    history = json.loads((work / "reports" / "history" / "history.json").read_text())
    assert [p["label"] for p in history["points"]] == ["nightly", "nightly"]
    assert all(p["flaky"] is not None for p in history["points"])  # flakes of that config
    assert (work / "reports" / "history" / "pass_rates.svg").is_file()

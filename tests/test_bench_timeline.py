"""``bench/bench_process.py timeline`` run small: every phase of ``evalkit run`` is marked,
the phases add up to the process's wall, and every request of all three sides was served;
``--against`` runs another checkout's ``evalkit run`` in the same rounds."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "bench_process.py"


@pytest.fixture()
def bench_process() -> Iterator[ModuleType]:
    """The script as a module; its spawner process is stopped when the test ends."""
    spec = importlib.util.spec_from_file_location("evalkit_bench_process_timeline", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    try:
        yield module
    finally:
        module.stop_spawner()
        sys.modules.pop(spec.name, None)


def test_timeline_marks_every_phase_beside_the_floor_and_the_bare_loop(
    bench_process: ModuleType, tmp_path: Path
) -> None:
    out = tmp_path / "timeline.json"
    args = ["timeline", "--sizes", "3", "--rounds", "1", "--latency-ms", "5"]
    assert bench_process.main([*args, "--concurrency", "2", "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    (row,) = figures["by_size"]["3"]["rounds"]
    ours = row["evalkit"]
    assert list(ours["phases"]) == [phase for phase, _ in bench_process.PHASES]
    assert all(seconds >= 0 for seconds in ours["phases"].values())  # marks in order
    assert sum(ours["phases"].values()) == pytest.approx(ours["marks"][-1][1])
    assert ours["served"] == ours["outputs"] == ours["ok_outputs"] == 3
    assert ours["scores"] == ours["passed_scores"] == 6
    for side in ("floor", "bare"):
        assert row[side]["served"] == row[side]["outputs"] == 3
        assert list(row[side]["phases"]) == ["imports", "answers", "exit"]
    assert row["gap_s"] == pytest.approx(ours["wall_s"] - row["floor"]["wall_s"])


def test_without_the_variable_a_run_prints_no_marks(bench_process: ModuleType) -> None:
    quiet = bench_process.measure(
        [sys.executable, "-c", "from evalkit.run.timeline import mark; mark('x')"],
        env={"EVALKIT_TIMELINE": ""},
    )
    marked = bench_process.measure(
        [sys.executable, "-c", "from evalkit.run.timeline import mark; mark('x')"],
        env={"EVALKIT_TIMELINE": "1"},
    )
    assert [phase for phase, _ in quiet.marks] == ["exit"]
    assert [phase for phase, _ in marked.marks] == ["x", "exit"]


def test_against_runs_the_other_checkouts_evalkit_in_the_same_rounds(
    bench_process: ModuleType, tmp_path: Path
) -> None:
    """``--against``: before and after a change in one invocation. The other checkout here is
    this one's package with one more mark, so its runs are told apart by their marks."""
    other = tmp_path / "other"
    shutil.copytree(BENCH.parents[1] / "evalkit", other / "evalkit")
    cli = other / "evalkit" / "cli" / "__init__.py"
    cli.write_text(cli.read_text().replace('mark("cli")', 'mark("cli"); mark("other")', 1))
    out = tmp_path / "timeline.json"
    args = ["timeline", "--sizes", "3", "--rounds", "1", "--latency-ms", "5", "--concurrency", "2"]
    assert bench_process.main([*args, "--against", str(other), "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert figures["against"] == str(other.resolve())
    entry = figures["by_size"]["3"]
    (row,) = entry["rounds"]
    assert "other" in [phase for phase, _ in row["against"]["marks"]]
    assert "other" not in [phase for phase, _ in row["evalkit"]["marks"]]
    assert row["against"]["served"] == row["against"]["ok_outputs"] == 3
    assert list(row["against"]["phases"]) == [phase for phase, _ in bench_process.PHASES]
    assert entry["median_against_gap_s"] == pytest.approx(
        row["against"]["wall_s"] - row["floor"]["wall_s"]
    )
    # the before-and-after figures are paired by round: this checkout's minus the other's
    assert entry["median_vs_against_cpu_s"] == pytest.approx(
        row["evalkit"]["cpu_s"] - row["against"]["cpu_s"]
    )
    assert entry["median_vs_against_wall_s"] == pytest.approx(
        row["evalkit"]["wall_s"] - row["against"]["wall_s"]
    )

"""bench/bench_million.py, run small so it cannot rot: every stage of the pipeline ran, served
its requests and stored its output; never its speed."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "bench_million.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("evalkit_bench_million", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_every_stage_of_the_pipeline_runs_and_stores_its_output(tmp_path: Path) -> None:
    n = 300
    out, kept = tmp_path / "figures.json", tmp_path / "kept"
    assert _script().main(["--sizes", str(n), "--json", str(out), "--keep", str(kept)]) == 0
    (result,) = json.loads(out.read_text())
    stages = result["stages"]
    assert list(stages) == ["index", "shards", "merge", "push", "pull", "cand shards",
                            "cand merge", "gate"]  # fmt: skip
    for name, fig in stages.items():
        assert "error" not in fig, (name, fig)
        assert fig["cpu_s"] > 0 and fig["peak_mib"] > 0 and fig["wall_s"] > 0, name
    for run in ("shards", "cand shards"):
        each = stages[run]["each"]
        assert len(each) == 4 and all(shard["code"] == 0 for shard in each)
        # every case asked exactly once between the four shards, and each shard asked
        assert stages[run]["requests"] == n and all(shard["requests"] > 0 for shard in each)
        assert all(0 < shard["first_request_s"] < shard["wall_s"] for shard in each)
    assert stages["merge"]["outputs"] == n  # the base run's parts, merged whole
    assert stages["pull"]["outputs"] == n  # pushed and pulled whole into the CI store
    assert stages["cand merge"]["outputs"] == n
    gate = stages["gate"]
    # orders 10077, 10177 and 10277 are answered without JSON for the candidate's prompt
    assert gate["paired"] == n and gate["broken"] == 3
    assert gate["verdict"]
    # the kept stores: the gate again, alone, at their size (not --sizes')
    again = tmp_path / "again.json"
    assert _script().main(["--from", str(kept), "--sizes", "5", "--json", str(again)]) == 0
    (alone,) = json.loads(again.read_text())
    assert (alone["cases"], list(alone["stages"])) == (n, ["gate"])
    assert {k: alone["stages"]["gate"][k] for k in ("paired", "broken", "verdict")} == {
        k: gate[k] for k in ("paired", "broken", "verdict")
    }


def test_keep_takes_one_size_into_an_empty_folder(tmp_path: Path) -> None:
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    for args in (["--sizes", "10", "20", "--keep", str(tmp_path / "new")],
                 ["--sizes", "10", "--keep", str(tmp_path / "full")]):  # fmt: skip
        with pytest.raises(SystemExit) as exited:
            _script().main(args)
        assert exited.value.code == 2
    assert not (tmp_path / "new").exists()


def _result(cases: int, cpu_s: float, replays: int = 1) -> dict:
    fig = {"wall_s": 1.0, "cpu_s": cpu_s, "peak_mib": 100.0}
    return {"cases": cases, "replays": replays, "stages": {"merge": fig, "index": dict(fig)}}


def test_the_table_gives_cpu_per_case_against_the_100k_size() -> None:
    table = _script().table
    # 100k at 10 s CPU (100 us a case); 1M at 150 s (150 us): 1.50x
    text = table([_result(100_000, 10.0), _result(1_000_000, 150.0)])
    row = next(line for line in text.splitlines() if "1,000,000" in line and "merge" in line)
    assert row.split()[-1] == "1.50" and "150.0" in row.split()
    # the reference may come from an earlier invocation; another replay count has none
    again = table([_result(1_000_000, 120.0)], reference=[_result(100_000, 10.0)])
    assert any(line.split()[-1] == "1.20" for line in again.splitlines() if "merge" in line)
    other = table([_result(1_000_000, 120.0, replays=5)], reference=[_result(100_000, 10.0)])
    merge = next(line for line in other.splitlines() if line.startswith("merge"))
    assert merge.split()[-1] == "24.0"  # CPU us per output, no ratio column filled


def test_the_first_shard_stage_stops_a_warm_shard_at_its_first_request(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    assert _script().main(["--sizes", "300", "--stages", "first shard", "--json", str(out)]) == 0
    (result,) = json.loads(out.read_text())
    assert list(result["stages"]) == ["index", "first shard"]  # what it needs, then itself
    first = result["stages"]["first shard"]
    assert "error" not in first, first
    assert first["cpu_s"] > 0 and first["peak_mib"] > 0 and first["first_request_s"] > 0

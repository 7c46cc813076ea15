"""bench/bench_history.py, run small so it cannot rot: the counts it reports, never its speed."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "bench_history.py"


def test_bench_history_counts(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("evalkit_bench_history", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    out = tmp_path / "figures.json"
    args = ["--runs", "20", "--cases", "400", "--replays", "2", "--rounds", "1"]
    assert module.main([*args, "--json", str(out)]) == 0
    fig = json.loads(out.read_text())
    assert fig["outputs"] == 20 * 400 * 2
    # one case in 50 fails every replay; from run 10 on, cases 3 and 203 tie 1-1 (unstable)
    label = fig["label"]
    assert label["points"] == 20 and label["newest_cases"] == 400
    assert label["newest_unstable"] == 2 and label["newest_passed"] == 400 - 8 - 2
    assert fig["baseline"]["points"] == 2  # runs 0 and 10 promoted
    assert fig["label_last_30"]["points"] == 20
    # the served model changes at run 15 (three quarters of the way)
    assert "history:served_model_change:nightly:run-00015" in label["findings"]


def test_bench_history_beside_counted_gives_the_same_history_both_ways(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("evalkit_bench_history_beside", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    out = tmp_path / "figures.json"
    args = ["--runs", "12", "--cases", "200", "--rounds", "1", "--beside-counted"]
    assert module.main([*args, "--json", str(out)]) == 0
    fig = json.loads(out.read_text())
    counted, recorded = fig["counted"]["label"], fig["label"]
    for key in ("points", "newest_cases", "newest_passed", "newest_unstable", "findings"):
        assert counted[key] == recorded[key]  # recorded counts answer what counting answers
    assert fig["label_vs_counted"] == round(recorded["wall_s"] / counted["wall_s"], 4)

"""bench/bench_gate_oc.py run small: the real gate's per-tag false-block rate at n = 8 and n = 100
is at most alpha within Monte-Carlo error (a statistical assertion with a fixed seed)."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "bench_gate_oc.py"


def test_gate_false_block_rate_per_tag_is_at_most_alpha(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("evalkit_bench_gate_oc", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    out = tmp_path / "oc.json"
    argv = ["--n", "8", "100", "--flake", "0.05", "--reps", "150", "--drops", "0.2",
            "--power-reps", "20", "--seed", "1", "--json", str(out)]  # fmt: skip
    assert module.main(argv) == 0
    f = json.loads(out.read_text())
    assert {r["n"] for r in f["null"]} == {8, 100}
    for r in f["null"]:
        se = math.sqrt(f["alpha"] * (1 - f["alpha"]) / (150 * 4))
        assert r["se_at_alpha"] == se
        assert r["mc_se"] == math.sqrt(r["per_tag"] * (1 - r["per_tag"]) / (150 * 4))
        assert r["per_tag"] <= f["alpha"] + 3 * se, r  # ≤ alpha within Monte-Carlo error
        assert r["fwer"]["1"] <= r["fwer"]["4"] <= 1 - (1 - f["alpha"] - 3 * se) ** 4
    power = {r["n"]: r["power"] for r in f["power"]}
    assert power[100] > 0.9 and power[8] < power[100]  # 20 of 100 cases break: detected

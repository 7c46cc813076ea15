"""bench/bench_gate_phases.py, small: one compare and one gate on the synthetic pair, every
phase measured, the gate's decision taken once (in the CLI, none in the kernel)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from synthetic_runs import seed000_runs, write_store

BENCH = Path(__file__).resolve().parents[1] / "bench" / "bench_gate_phases.py"
CONFIG = """\
suite: demo
system: {provider: demo, model: demo-model}
critical_tags: [billing]
"""


def test_the_gate_phases_benchmark_runs_both_commands_and_times_every_phase(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("evalkit_bench_gate_phases", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    write_store(tmp_path / "evalkit.duckdb", list(seed000_runs(cand_label="cand")))
    (tmp_path / "evalkit.yaml").write_text(CONFIG)
    argv = ["--rounds", "1", "--db", str(tmp_path / "evalkit.duckdb"),
            "--config", str(tmp_path / "evalkit.yaml"), "--baseline", "base",
            "--candidate", "cand", "--json", str(tmp_path / "phases.json")]  # fmt: skip
    assert bench.main(argv) == 0

    result = json.loads((tmp_path / "phases.json").read_text())
    assert result["compare"]["codes"] == [0] and result["gate"]["codes"] == [1]  # BLOCKED
    phases = result["gate"]["phases"]
    assert phases["decision"] > 0 and phases["decision again"] == 0  # decided once, in the CLI
    for name in ("CLI start", "kernel start", "notebook", "charts", "files", "HTML"):
        assert phases[name] > 0, name
    gate = result["samples"]["gate"][0]
    assert abs(sum(phases.values()) - gate["cli_cpu"] - gate["kernel_cpu"]) < 1e-6
    assert gate["cpu"] >= gate["cli_cpu"] + gate["kernel_cpu"] - 0.05  # the tree holds both
    assert result["cpu_ratio"] == result["gate"]["cpu"] / result["compare"]["cpu"]
    printed = capsys.readouterr().out
    assert "gate / compare CPU:" in printed and "decision again" in printed

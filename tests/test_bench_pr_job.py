"""bench/bench_pr_job.py, small: the CI example's candidate job on the demo's smoke tier with
two cases edited; both steps ask the simulator, the gate rebaselines exactly the edited cases
and decides (no timing asserted)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "bench_pr_job.py"


def test_the_pr_job_benchmark_runs_the_candidate_rebaselines_the_edits_and_gates(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("evalkit_bench_pr_job", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    argv = ["--rounds", "1", "--tier", "smoke", "--edited", "2", "--latency-ms", "0",
            "--json", str(tmp_path / "job.json")]  # fmt: skip
    assert bench.main(argv) == 0

    (job,) = json.loads((tmp_path / "job.json").read_text())["jobs"]
    assert len(job["edited"]) == 2
    candidate, gate = job["candidate run"], job["gate --rebaseline"]
    assert candidate["code"] == 0 and candidate["requests"] >= 16  # every smoke case asked
    assert gate["code"] in (0, 1) and gate["decision"].startswith("gate ")
    (line,) = gate["rebaselined"]
    assert "rebaselined 2 added/edited case(s)" in line  # the edits, and nothing else
    assert gate["requests"] > 0 and gate["rebaseline"]["cpu"] > 0
    printed = capsys.readouterr().out
    assert "of which the rebaseline" in printed and ", ".join(job["edited"]) in printed


def test_editing_touches_only_the_chosen_cases_first_messages(tmp_path):
    spec = importlib.util.spec_from_file_location("evalkit_bench_pr_job_edit", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    cases = tmp_path / "cases"
    cases.mkdir()
    text = (
        "# a comment\n- id: a-1\n  tags: [x, smoke]\n  input:\n    messages:\n      - role: user\n"
        "        content: >-\n          hello\n- id: a-2\n  tags: [x]\n  input:\n    messages:\n"
        "      - role: user\n        content: >-\n          bye\n"
    )
    (cases / "a.yaml").write_text(text)
    assert bench.edit_cases(tmp_path, 5, "smoke") == ["a-1"]
    after = (cases / "a.yaml").read_text()
    assert "hello Please answer briefly." in after and "bye\n" in after and "# a comment" in after

"""``make demo``: start the simulator, run baseline (prompt v1) and candidate (v2), gate, report.

Everything goes through the same path as production: the official ``openai`` client talks HTTP
to the demo simulator on 127.0.0.1, results land in DuckDB, and the gate notebook runs under
papermill. The simulator is not a language model (see :mod:`evalkit.demo.model`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from evalkit.corpus.cases import load_corpus
from evalkit.corpus.suite import load_suite
from evalkit.demo.server import start_demo_server
from evalkit.run.runner import RunOptions, RunSummary, run_suite
from evalkit.store import open_store


@dataclass(frozen=True)
class DemoResult:
    baseline: RunSummary
    candidate: RunSummary
    db_path: Path
    gate_exit_code: int | None
    report_path: Path | None


def run_demo(
    config: str | Path = "corpus/evalkit.yaml",
    db_path: str | Path = "data/demo.duckdb",
    out_dir: str | Path = "reports",
    *,
    candidate_prompt: str = "prompts/v2.md",
    progress: bool = True,
    gate: bool = True,
) -> DemoResult:
    """Run the whole demo; returns both run summaries and where the gate report is."""
    db = Path(db_path)
    for stale in (db, db.with_name(db.name + ".wal")):
        stale.unlink(missing_ok=True)  # a fresh store per demo keeps the story readable
    with start_demo_server(seed=0, noise=True) as server:
        override = [f"system.base_url={server.base_url}"]
        if load_suite(config).config.judge is not None:  # the simulator also plays the judge
            override.append(f"judge.base_url={server.base_url}")
        baseline_suite = load_suite(config, overrides=override)
        candidate_suite = load_suite(
            config, overrides=override, prompt=baseline_suite.root / candidate_prompt
        )
        template = baseline_suite.config.system.user_template
        corpus = load_corpus(baseline_suite.root, user_template=template)
        with open_store(db) as store:
            baseline = run_suite(
                baseline_suite, corpus, store, RunOptions(label="baseline", progress=progress)
            )
            candidate = run_suite(
                candidate_suite, corpus, store, RunOptions(label="candidate", progress=progress)
            )
    gate_exit_code = report_path = None
    if gate:
        from evalkit.notebooks import execute_gate

        gate_run = execute_gate(
            db,
            baseline.run_id,
            candidate.run_id,
            Path(config),
            Path(out_dir),
            allow_diff=("prompt",),
        )
        gate_exit_code, report_path = gate_run.exit_code, gate_run.html_path
    return DemoResult(baseline, candidate, db, gate_exit_code, report_path)

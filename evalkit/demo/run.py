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
from evalkit.errors import ConfigError
from evalkit.run.runner import RunOptions, RunSummary, run_suite
from evalkit.store import open_store

#: The demo suite: the repository's ``corpus/``, beside the installed (editable) package.
DEMO_CONFIG = Path(__file__).resolve().parents[2] / "corpus" / "evalkit.yaml"


@dataclass(frozen=True, kw_only=True)
class DemoResult:
    baseline: RunSummary
    candidate: RunSummary
    db_path: Path
    gate_exit_code: int | None
    report_path: Path | None
    gate_status: str | None = None  # PASSED, BLOCKED, UNVERIFIED or PASSED WITH OVERRIDE


def demo_config() -> Path:
    """The demo suite's ``evalkit.yaml``, wherever the command runs from.

    Raises:
        ConfigError: the package was installed without the demo corpus beside it.
    """
    if not DEMO_CONFIG.is_file():
        raise ConfigError(
            f"{DEMO_CONFIG}: the demo corpus is not beside this evalkit installation; install "
            "evalkit from its repository (`pip install -e .`) or pass --config"
        )
    return DEMO_CONFIG


def run_demo(
    config: str | Path | None = None,
    db_path: str | Path = "data/demo.duckdb",
    out_dir: str | Path = "reports",
    *,
    candidate_prompt: str = "prompts/v2.md",
    progress: bool = True,
    gate: bool = True,
) -> DemoResult:
    """Run the whole demo; returns both run summaries and where the gate report is."""
    config = Path(config) if config is not None else demo_config()
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
        with open_store(db, write=True) as store:
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
        status = (gate_run.decision or {}).get("status")
        return DemoResult(
            baseline=baseline,
            candidate=candidate,
            db_path=db,
            gate_exit_code=gate_exit_code,
            report_path=report_path,
            gate_status=status,
        )
    return DemoResult(
        baseline=baseline,
        candidate=candidate,
        db_path=db,
        gate_exit_code=gate_exit_code,
        report_path=report_path,
    )

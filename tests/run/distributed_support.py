"""Helpers shared by the sharded and Ray tests: the demo suite against a simulator, what two
runs must agree on (outputs, scores, the gate's decision), and exactly-once checks."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from evalkit.cli import main
from evalkit.compare.analysis import load_comparison
from evalkit.compare.gate import decide
from evalkit.compare.policy import GatePolicy
from evalkit.demo.server import DemoServer
from evalkit.store import open_store

REPO = Path(__file__).resolve().parents[2]
CONFIG = str(REPO / "corpus" / "evalkit.yaml")
CANDIDATE_PROMPT = str(REPO / "corpus" / "prompts" / "v2.md")
OUTPUT_COLUMNS = ["case_id", "replay", "text", "tool_calls", "steps", "error", "fail_reason"]
SCORE_COLUMNS = ["case_id", "replay", "scorer_index", "scorer", "score", "passed", "reason"]


def demo_args(server: DemoServer, *extra: str) -> list[str]:
    """``--config`` and ``--set`` for the demo suite against ``server``."""
    return [
        "--config", CONFIG,
        "--set", f"system.base_url={server.base_url}",
        "--set", f"judge.base_url={server.base_url}",
        *extra,
    ]  # fmt: skip


def run_local(server: DemoServer, db: Path, label: str, *extra: str) -> str:
    """A local ``evalkit run`` on a server whose counters were reset (so its seeded noise is
    drawn as for every other run here); returns the run id."""
    server.reset_stats()
    assert main(["run", *demo_args(server, *extra), "--db", str(db), "--label", label,
                 "--no-cache", "--no-progress"]) == 0  # fmt: skip
    return latest_run(db, label)


def latest_run(db: Path, label: str) -> str:
    with open_store(db, read_only=True) as store:
        return store.resolve_run(f"{label}@latest")


def stored(db: Path, run_id: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The run's outputs and scores, without run ids and times: what must be identical."""
    with open_store(db, read_only=True) as store:
        outputs = store.outputs(run_id).select(OUTPUT_COLUMNS)
        scores = store.scores(run_id).select(SCORE_COLUMNS)
    return outputs, scores


def gate_signature(db: Path, base: str, cand: str) -> tuple[bool, bool, list[tuple]]:
    """The gate's decision for ``base`` → ``cand``: blocked, unverified and every finding."""
    with open_store(db, read_only=True) as store:
        comparison = load_comparison(store, base, cand, allow_diff=["prompt"])
    decision = decide(comparison.paired, GatePolicy.from_suite(["billing", "injection", "policy"]))
    findings = sorted((f.tier, f.slice, tuple(f.case_ids)) for f in decision.findings)
    return decision.blocked, decision.unverified, findings


def exactly_once(db: Path, run_id: str) -> tuple[int, int, int, int]:
    """(outputs, distinct (case, replay), score rows, distinct score keys) of a run."""
    with open_store(db, read_only=True) as store:
        row = store.query(
            "SELECT (SELECT count(*) FROM outputs WHERE run_id = ?), "
            "(SELECT count(DISTINCT (case_id, replay)) FROM outputs WHERE run_id = ?), "
            "(SELECT count(*) FROM scores WHERE run_id = ?), "
            "(SELECT count(DISTINCT (case_id, replay, scorer_index)) FROM scores "
            "WHERE run_id = ?)",
            [run_id] * 4,
        ).row(0)
    return tuple(int(v) for v in row)  # type: ignore[return-value]

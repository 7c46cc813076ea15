"""The store's tables: the DuckDB DDL and the Polars schemas of the frames that are written."""

from __future__ import annotations

import polars as pl

DDL = """
CREATE TABLE IF NOT EXISTS runs (
    run_id VARCHAR, label VARCHAR, created_at TIMESTAMPTZ, finished_at TIMESTAMPTZ,
    config_hash VARCHAR, status VARCHAR, manifest VARCHAR, summary VARCHAR
);
CREATE TABLE IF NOT EXISTS cases (
    run_id VARCHAR, case_id VARCHAR, case_hash VARCHAR, tags VARCHAR[], criticality VARCHAR,
    sealed BOOLEAN, input VARCHAR, provenance VARCHAR, source VARCHAR
);
-- The case's group (incident, document, conversation); NULL when it has none.
ALTER TABLE cases ADD COLUMN IF NOT EXISTS case_group VARCHAR;
CREATE TABLE IF NOT EXISTS outputs (
    run_id VARCHAR, case_id VARCHAR, replay INTEGER, text VARCHAR, tool_calls VARCHAR,
    steps INTEGER, error VARCHAR, fail_reason VARCHAR, latency_ms DOUBLE, prompt_tokens BIGINT,
    completion_tokens BIGINT, cost_usd DOUBLE, cached BOOLEAN, request_hash VARCHAR,
    model VARCHAR, created_at TIMESTAMPTZ
);
CREATE TABLE IF NOT EXISTS scorings (
    scoring_id VARCHAR, run_id VARCHAR, created_at TIMESTAMPTZ, note VARCHAR
);
CREATE TABLE IF NOT EXISTS scores (
    run_id VARCHAR, scoring_id VARCHAR, case_id VARCHAR, replay INTEGER, scorer VARCHAR,
    scorer_index INTEGER, tier INTEGER, score DOUBLE, passed BOOLEAN, error BOOLEAN, reason VARCHAR,
    details VARCHAR
);
CREATE TABLE IF NOT EXISTS scoring_cases (
    scoring_id VARCHAR, case_id VARCHAR, case_hash VARCHAR
);
CREATE TABLE IF NOT EXISTS overrides (
    base_run_id VARCHAR, cand_run_id VARCHAR, who VARCHAR, reason VARCHAR, created_at TIMESTAMPTZ
);
-- The blocking findings (their keys, JSON list) an override accepts; it covers nothing else.
ALTER TABLE overrides ADD COLUMN IF NOT EXISTS findings VARCHAR;
CREATE TABLE IF NOT EXISTS baselines (
    suite VARCHAR, run_id VARCHAR, who VARCHAR, reason VARCHAR, promoted_at TIMESTAMPTZ
);
-- A tier (a named selection such as smoke) has its own baseline; NULL is the full suite.
ALTER TABLE baselines ADD COLUMN IF NOT EXISTS tier VARCHAR;
CREATE TABLE IF NOT EXISTS flakes (
    config_hash VARCHAR, measured_at TIMESTAMPTZ, case_id VARCHAR, tags VARCHAR[], runs INTEGER,
    flips INTEGER, flake_rate DOUBLE
);
CREATE TABLE IF NOT EXISTS response_cache (
    cache_key VARCHAR, response VARCHAR, created_at TIMESTAMPTZ
);
CREATE TABLE IF NOT EXISTS human_labels (
    case_id VARCHAR, output_hash VARCHAR, rater VARCHAR, label INTEGER, scorer VARCHAR,
    source VARCHAR, imported_at TIMESTAMPTZ
);
CREATE TABLE IF NOT EXISTS calibrations (
    judge_model VARCHAR, judge_snapshot VARCHAR, rubric VARCHAR, rubric_hash VARCHAR,
    scorer VARCHAR, n INTEGER, kappa DOUBLE, kappa_lo DOUBLE, kappa_hi DOUBLE,
    weighted_kappa DOUBLE, accuracy DOUBLE, macro_f1 DOUBLE, alpha DOUBLE,
    position_consistency DOUBLE, created_at TIMESTAMPTZ, run_id VARCHAR, figures VARCHAR
);
-- The judge prompt version the calibration measured (a changed prompt needs a new one).
ALTER TABLE calibrations ADD COLUMN IF NOT EXISTS judge_prompt VARCHAR;
CREATE TABLE IF NOT EXISTS pairwise_judgments (
    base_run_id VARCHAR, cand_run_id VARCHAR, case_id VARCHAR, rubric VARCHAR,
    rubric_hash VARCHAR, judge_model VARCHAR, order_ab INTEGER, order_ba INTEGER,
    combined INTEGER, consistent BOOLEAN, reasons VARCHAR, error VARCHAR, raw VARCHAR,
    created_at TIMESTAMPTZ
);
"""

OUTPUT_SCHEMA: dict[str, pl.DataType] = {
    "run_id": pl.String,
    "case_id": pl.String,
    "replay": pl.Int32,
    "text": pl.String,
    "tool_calls": pl.String,
    "steps": pl.Int32,
    "error": pl.String,
    "fail_reason": pl.String,
    "latency_ms": pl.Float64,
    "prompt_tokens": pl.Int64,
    "completion_tokens": pl.Int64,
    "cost_usd": pl.Float64,
    "cached": pl.Boolean,
    "request_hash": pl.String,
    "model": pl.String,
    "created_at": pl.Datetime("us", "UTC"),
}
SCORE_SCHEMA: dict[str, pl.DataType] = {
    "run_id": pl.String,
    "scoring_id": pl.String,
    "case_id": pl.String,
    "replay": pl.Int32,
    "scorer": pl.String,
    "scorer_index": pl.Int32,
    "tier": pl.Int32,
    "score": pl.Float64,
    "passed": pl.Boolean,
    "error": pl.Boolean,
    "reason": pl.String,
    "details": pl.String,  # JSON: judge reason/raw text, rubric hash, pairwise orders, ...
}
#: Human labels (evalkit.judges.labels): one per (case_id or output_hash, rater, scorer).
HUMAN_LABEL_SCHEMA: dict[str, pl.DataType] = {
    "case_id": pl.String,
    "output_hash": pl.String,
    "rater": pl.String,
    "label": pl.Int32,
    "scorer": pl.String,
    "source": pl.String,
    "imported_at": pl.Datetime("us", "UTC"),
}
#: Judge calibration records (evalkit.judges.calibration): what lets a judge gate.
CALIBRATION_SCHEMA: dict[str, pl.DataType] = {
    "judge_model": pl.String,
    "judge_snapshot": pl.String,
    "rubric": pl.String,
    "rubric_hash": pl.String,
    "scorer": pl.String,
    "n": pl.Int32,
    "kappa": pl.Float64,
    "kappa_lo": pl.Float64,
    "kappa_hi": pl.Float64,
    "weighted_kappa": pl.Float64,
    "accuracy": pl.Float64,
    "macro_f1": pl.Float64,
    "alpha": pl.Float64,
    "position_consistency": pl.Float64,
    "created_at": pl.Datetime("us", "UTC"),
    "run_id": pl.String,
    "figures": pl.String,  # JSON: intervals, per-class report, confusion matrix, length bias
    "judge_prompt": pl.String,
}
#: Pairwise judge verdicts (evalkit.judges.pairwise): 1 = base better, 2 = candidate better, 0 =
#: tie.
PAIRWISE_SCHEMA: dict[str, pl.DataType] = {
    "base_run_id": pl.String,
    "cand_run_id": pl.String,
    "case_id": pl.String,
    "rubric": pl.String,
    "rubric_hash": pl.String,
    "judge_model": pl.String,
    "order_ab": pl.Int32,
    "order_ba": pl.Int32,
    "combined": pl.Int32,
    "consistent": pl.Boolean,
    "reasons": pl.String,  # JSON {"ab": ..., "ba": ...}
    "error": pl.String,  # why there is no verdict (malformed judge output, provider failure)
    "raw": pl.String,  # the malformed judge answer, kept verbatim
    "created_at": pl.Datetime("us", "UTC"),
}

"""evalkit: regression testing for LLM applications, paired and per slice.

The public names below load on first use, so ``import evalkit`` (and every CLI call) stays fast.
A notebook or script starts at `Project` (run, compare, gate, runs, history, labels); the
names beside it are what the shipped notebooks call, and the only ones they import.

Examples:
    >>> import evalkit
    >>> project = evalkit.Project(".")                       # doctest: +SKIP
    >>> store = evalkit.open_store("data/evalkit.duckdb")   # doctest: +SKIP
    >>> store.runs()                                         # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from evalkit.version import __version__

_EXPORTS = {
    "Case": "evalkit.corpus.cases",
    "Corpus": "evalkit.corpus.cases",
    "load_corpus": "evalkit.corpus.cases",
    "Suite": "evalkit.corpus.suite",
    "load_suite": "evalkit.corpus.suite",
    "ComparabilityError": "evalkit.errors",
    "ConfigError": "evalkit.errors",
    "CorpusError": "evalkit.errors",
    "EvalkitError": "evalkit.errors",
    "StoreError": "evalkit.errors",
    "Output": "evalkit.records",
    "Score": "evalkit.records",
    "ToolCall": "evalkit.records",
    "RunOptions": "evalkit.run.runner",
    "RunSummary": "evalkit.run.runner",
    "run_suite": "evalkit.run.runner",
    "Store": "evalkit.store",
    # read-only unless write=True, holding the file only during each call
    "open_store": "evalkit.store.db",
    "GateDecision": "evalkit.compare.decision",
    "GatePolicy": "evalkit.compare.policy",
    "decide": "evalkit.compare.gate",
    "paired_frame": "evalkit.compare.paired",
    "verdicts": "evalkit.compare.verdicts",
    "run_verdicts": "evalkit.compare.verdicts",
    "load_comparison": "evalkit.compare.analysis",
    "history": "evalkit.trends.analysis",
    "History": "evalkit.trends.values",
    "Project": "evalkit.project.project",
    "RunResult": "evalkit.project.results",
    "ComparisonResult": "evalkit.project.results",
    "gate_pair": "evalkit.compare.pin",
    "load_decided_pair": "evalkit.compare.handoff",
    "load_decided_report": "evalkit.report.decided",
    "save_slice_charts": "evalkit.report.svg",
    "GateBlocked": "evalkit.compare.decision",
    "Comparison": "evalkit.compare.analysis",
    "Report": "evalkit.report.build",
    "build_report": "evalkit.report.build",
    "report_json": "evalkit.report.build:to_json",
    "report_markdown": "evalkit.report.markdown:to_markdown",
    "report_junit": "evalkit.report.junit:to_junit",
    "report_html": "evalkit.report.html:to_html",
    "report_fragment": "evalkit.report.html:fragment",
    "flips": "evalkit.compare.paired",
    "load_policy": "evalkit.compare.policy",
    "table": "evalkit.display",
    "slice_table": "evalkit.report.tables",
    "save_chart": "evalkit.report.charts",
    "slice_forest": "evalkit.report.charts",
    "slice_overview": "evalkit.report.charts",
    "flip_counts": "evalkit.report.charts",
    "pass_rate_by_slice": "evalkit.report.charts",
    "flake_rate_by_slice": "evalkit.report.gate_charts",
    "min_detectable_drop": "evalkit.report.charts",
    "gate_operating_characteristics": "evalkit.report.gate_charts",
    "pass_rate_history": "evalkit.report.history_charts",
    "unstable_history": "evalkit.report.history_charts",
    "confusion_heatmap": "evalkit.report.judge_charts",
    "agreement_by_slice": "evalkit.report.judge_charts",
    "order_consistency": "evalkit.report.judge_charts",
    "flake_slices": "evalkit.compare.flakes",
    "power_table": "evalkit.compare.power",
    "replay_table": "evalkit.compare.power",
    "operating_characteristics": "evalkit.compare.power",
    "agreement_summary": "evalkit.judges.agreement",
    "slice_agreement": "evalkit.judges.agreement",
    "order_by_slice": "evalkit.judges.agreement",
    "position_consistency": "evalkit.judges.agreement",
    "length_bias": "evalkit.judges.agreement",
    "rater_agreement": "evalkit.judges.agreement",
    "CalibrationRecord": "evalkit.judges.agreement",
    "calibrate": "evalkit.judges.calibration",
    "human_agreement": "evalkit.judges.labelling",
    "calibration_table": "evalkit.judges.display",
    "format_kappa": "evalkit.judges.display:fmt_kappa",
    "cohen_kappa": "evalkit.stats",
    # a public namespace, its own __all__ public too: the pure statistics (arrays and counts
    # in, frozen results out)
    "stats": "evalkit:stats",
    "check": "evalkit.scorers.registry",
    "build_scorer": "evalkit.scorers.registry",
    "scorer": "evalkit.scorers.registry",
    "load_pandalm": "evalkit.judges.published",
    "pandalm_table": "evalkit.judges.published",
    "pandalm_mismatches": "evalkit.judges.published",
    "load_llmbar": "evalkit.judges.llmbar",
    "llmbar_table": "evalkit.judges.llmbar",
    "llmbar_mismatches": "evalkit.judges.llmbar",
}

__all__ = [
    "CalibrationRecord",
    "Case",
    "ComparabilityError",
    "Comparison",
    "ComparisonResult",
    "ConfigError",
    "Corpus",
    "CorpusError",
    "EvalkitError",
    "GateBlocked",
    "GateDecision",
    "GatePolicy",
    "History",
    "Output",
    "Project",
    "Report",
    "RunOptions",
    "RunResult",
    "RunSummary",
    "Score",
    "Store",
    "StoreError",
    "Suite",
    "ToolCall",
    "__version__",
    "agreement_by_slice",
    "agreement_summary",
    "build_report",
    "build_scorer",
    "calibrate",
    "calibration_table",
    "check",
    "cohen_kappa",
    "confusion_heatmap",
    "decide",
    "flake_rate_by_slice",
    "flake_slices",
    "flip_counts",
    "flips",
    "format_kappa",
    "gate_operating_characteristics",
    "gate_pair",
    "history",
    "human_agreement",
    "length_bias",
    "llmbar_mismatches",
    "llmbar_table",
    "load_comparison",
    "load_corpus",
    "load_decided_pair",
    "load_decided_report",
    "load_llmbar",
    "load_pandalm",
    "load_policy",
    "load_suite",
    "min_detectable_drop",
    "open_store",
    "operating_characteristics",
    "order_by_slice",
    "order_consistency",
    "paired_frame",
    "pandalm_mismatches",
    "pandalm_table",
    "pass_rate_by_slice",
    "pass_rate_history",
    "position_consistency",
    "power_table",
    "rater_agreement",
    "replay_table",
    "report_fragment",
    "report_html",
    "report_json",
    "report_junit",
    "report_markdown",
    "run_suite",
    "run_verdicts",
    "save_chart",
    "save_slice_charts",
    "scorer",
    "slice_agreement",
    "slice_forest",
    "slice_overview",
    "slice_table",
    "stats",
    "table",
    "unstable_history",
    "verdicts",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'evalkit' has no attribute {name!r}")
    module, _, attribute = module.partition(":")
    if module == "evalkit":  # a public namespace: the subpackage itself (``evalkit.stats``)
        value = importlib.import_module(f"evalkit.{attribute}")
    else:
        value = getattr(importlib.import_module(module), attribute or name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:
    from evalkit import stats
    from evalkit.compare.analysis import Comparison, load_comparison
    from evalkit.compare.decision import GateBlocked, GateDecision
    from evalkit.compare.flakes import flake_slices
    from evalkit.compare.gate import decide
    from evalkit.compare.handoff import load_decided_pair
    from evalkit.compare.paired import flips, paired_frame
    from evalkit.compare.pin import gate_pair
    from evalkit.compare.policy import GatePolicy, load_policy
    from evalkit.compare.power import operating_characteristics, power_table, replay_table
    from evalkit.compare.verdicts import run_verdicts, verdicts
    from evalkit.corpus.cases import Case, Corpus, load_corpus
    from evalkit.corpus.suite import Suite, load_suite
    from evalkit.display import table
    from evalkit.errors import (
        ComparabilityError,
        ConfigError,
        CorpusError,
        EvalkitError,
        StoreError,
    )
    from evalkit.judges.agreement import (
        CalibrationRecord,
        agreement_summary,
        length_bias,
        order_by_slice,
        position_consistency,
        rater_agreement,
        slice_agreement,
    )
    from evalkit.judges.calibration import calibrate
    from evalkit.judges.display import calibration_table
    from evalkit.judges.display import fmt_kappa as format_kappa
    from evalkit.judges.labelling import human_agreement
    from evalkit.judges.llmbar import llmbar_mismatches, llmbar_table, load_llmbar
    from evalkit.judges.published import load_pandalm, pandalm_mismatches, pandalm_table
    from evalkit.project.project import Project
    from evalkit.project.results import ComparisonResult, RunResult
    from evalkit.records import Output, Score, ToolCall
    from evalkit.report.build import Report, build_report
    from evalkit.report.build import to_json as report_json
    from evalkit.report.charts import (
        flip_counts,
        min_detectable_drop,
        pass_rate_by_slice,
        save_chart,
        slice_forest,
        slice_overview,
    )
    from evalkit.report.decided import load_decided_report
    from evalkit.report.gate_charts import flake_rate_by_slice, gate_operating_characteristics
    from evalkit.report.history_charts import pass_rate_history, unstable_history
    from evalkit.report.html import fragment as report_fragment
    from evalkit.report.html import to_html as report_html
    from evalkit.report.judge_charts import (
        agreement_by_slice,
        confusion_heatmap,
        order_consistency,
    )
    from evalkit.report.junit import to_junit as report_junit
    from evalkit.report.markdown import to_markdown as report_markdown
    from evalkit.report.svg import save_slice_charts
    from evalkit.report.tables import slice_table
    from evalkit.run.runner import RunOptions, RunSummary, run_suite
    from evalkit.scorers.registry import build_scorer, check, scorer
    from evalkit.stats import cohen_kappa
    from evalkit.store import Store
    from evalkit.store.db import open_store
    from evalkit.trends.analysis import history
    from evalkit.trends.values import History

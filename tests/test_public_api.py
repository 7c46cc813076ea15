"""The flat public API is pinned: adding or removing a name is a deliberate change."""

import importlib
from pathlib import Path

import pytest

import evalkit

EXPECTED = {
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
    "scorer",
    "slice_agreement",
    "slice_forest",
    "slice_overview",
    "slice_table",
    "stats",
    "table",
    "unstable_history",
    "verdicts",
}


def test_all_is_pinned_and_every_name_resolves() -> None:
    assert set(evalkit.__all__) == EXPECTED
    for name in evalkit.__all__:
        assert getattr(evalkit, name) is not None


#: Import paths of the flat layout, removed when the package moved to stage folders
#: (no compatibility shims: notebooks, README and tests moved with them). The flat
#: ``evalkit.report`` module is not among them: ``evalkit.report`` is now the presentation
#: package.
REMOVED_PATHS = [
    "evalkit.cases",
    "evalkit.config",
    "evalkit.runner",
    "evalkit.analysis",
    "evalkit.gate",
    "evalkit.judge",
    "evalkit.calibration",
    "evalkit.providers",
    "evalkit.tools",
    "evalkit.demo_run",
]


@pytest.mark.parametrize("path", REMOVED_PATHS)
def test_old_flat_paths_are_gone(path: str) -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(path)


def test_stage_paths_resolve() -> None:
    from evalkit.compare.gate import decide
    from evalkit.stats import mcnemar_exact

    assert decide is evalkit.decide
    assert mcnemar_exact(3, 0) == 0.125


def test_no_public_name_is_also_a_subpackage() -> None:
    # Importing ``evalkit.x.y`` sets the attribute ``evalkit.x`` to the subpackage, so a
    # public function named ``x`` would silently become a module once anything imports it.
    package = Path(evalkit.__file__).parent
    subpackages = {p.parent.name for p in package.glob("*/__init__.py")}
    clashes = [
        name
        for name in sorted(subpackages & set(evalkit.__all__))
        if getattr(evalkit, name) is not importlib.import_module(f"evalkit.{name}")
    ]
    assert clashes == []

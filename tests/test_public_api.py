"""The flat public API is pinned: adding or removing a name is a deliberate change."""

import importlib

import pytest

import evalkit

EXPECTED = {
    "Case",
    "ComparabilityError",
    "ConfigError",
    "Corpus",
    "CorpusError",
    "EvalkitError",
    "GateDecision",
    "GatePolicy",
    "History",
    "Output",
    "RunOptions",
    "RunSummary",
    "Score",
    "Store",
    "StoreError",
    "Suite",
    "ToolCall",
    "__version__",
    "decide",
    "history",
    "load_comparison",
    "load_corpus",
    "load_suite",
    "open_store",
    "paired_frame",
    "run_suite",
    "run_verdicts",
    "verdicts",
}


def test_all_is_pinned_and_every_name_resolves() -> None:
    assert set(evalkit.__all__) == EXPECTED
    for name in evalkit.__all__:
        assert getattr(evalkit, name) is not None


#: Import paths of the flat layout, removed when the package moved to stage folders
#: (no compatibility shims: notebooks, README and tests moved with them).
REMOVED_PATHS = [
    "evalkit.cases",
    "evalkit.config",
    "evalkit.runner",
    "evalkit.analysis",
    "evalkit.gate",
    "evalkit.report",
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

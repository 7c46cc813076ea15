"""The flat public API is pinned: adding or removing a name is a deliberate change."""

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
    "load_comparison",
    "load_corpus",
    "load_suite",
    "open_store",
    "paired_frame",
    "run_suite",
    "verdicts",
}


def test_all_is_pinned_and_every_name_resolves() -> None:
    assert set(evalkit.__all__) == EXPECTED
    for name in evalkit.__all__:
        assert getattr(evalkit, name) is not None

"""evalkit: regression testing for LLM applications, paired and per slice.

The public names below load on first use, so ``import evalkit`` (and every CLI call) stays fast.

Examples:
    >>> import evalkit
    >>> store = evalkit.open_store("data/evalkit.duckdb")   # doctest: +SKIP
    >>> store.runs()                                         # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "Case": "evalkit.cases",
    "Corpus": "evalkit.cases",
    "load_corpus": "evalkit.cases",
    "Suite": "evalkit.config",
    "load_suite": "evalkit.config",
    "ComparabilityError": "evalkit.errors",
    "ConfigError": "evalkit.errors",
    "CorpusError": "evalkit.errors",
    "EvalkitError": "evalkit.errors",
    "StoreError": "evalkit.errors",
    "Output": "evalkit.records",
    "Score": "evalkit.records",
    "ToolCall": "evalkit.records",
    "RunOptions": "evalkit.runner",
    "RunSummary": "evalkit.runner",
    "run_suite": "evalkit.runner",
    "Store": "evalkit.store",
    "open_store": "evalkit.store",
    "GateDecision": "evalkit.gate",
    "GatePolicy": "evalkit.gate",
    "decide": "evalkit.gate",
    "paired_frame": "evalkit.analysis",
    "verdicts": "evalkit.analysis",
    "load_comparison": "evalkit.analysis",
}

__all__ = [
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
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'evalkit' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:
    from evalkit.analysis import load_comparison, paired_frame, verdicts
    from evalkit.cases import Case, Corpus, load_corpus
    from evalkit.config import Suite, load_suite
    from evalkit.errors import (
        ComparabilityError,
        ConfigError,
        CorpusError,
        EvalkitError,
        StoreError,
    )
    from evalkit.gate import GateDecision, GatePolicy, decide
    from evalkit.records import Output, Score, ToolCall
    from evalkit.runner import RunOptions, RunSummary, run_suite
    from evalkit.store import Store, open_store

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
    # for analysis: read-only unless write=True, holding the file only during each call
    "open_store": "evalkit.store.db:open_for_analysis",
    "GateDecision": "evalkit.compare.decision",
    "GatePolicy": "evalkit.compare.policy",
    "decide": "evalkit.compare.gate",
    "paired_frame": "evalkit.compare.paired",
    "verdicts": "evalkit.compare.verdicts",
    "run_verdicts": "evalkit.compare.verdicts",
    "load_comparison": "evalkit.compare.analysis",
    "history": "evalkit.compare.history",
    "History": "evalkit.compare.history_values",
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
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'evalkit' has no attribute {name!r}")
    module, _, attribute = module.partition(":")
    value = getattr(importlib.import_module(module), attribute or name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:
    from evalkit.compare.analysis import load_comparison
    from evalkit.compare.decision import GateDecision
    from evalkit.compare.gate import decide
    from evalkit.compare.history import history
    from evalkit.compare.history_values import History
    from evalkit.compare.paired import paired_frame
    from evalkit.compare.policy import GatePolicy
    from evalkit.compare.verdicts import run_verdicts, verdicts
    from evalkit.corpus.cases import Case, Corpus, load_corpus
    from evalkit.corpus.suite import Suite, load_suite
    from evalkit.errors import (
        ComparabilityError,
        ConfigError,
        CorpusError,
        EvalkitError,
        StoreError,
    )
    from evalkit.records import Output, Score, ToolCall
    from evalkit.run.runner import RunOptions, RunSummary, run_suite
    from evalkit.store import Store
    from evalkit.store.db import open_for_analysis as open_store

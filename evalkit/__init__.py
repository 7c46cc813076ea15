"""evalkit: regression testing for LLM applications, paired and per slice.

Examples:
    >>> import evalkit
    >>> store = evalkit.open_store("data/evalkit.duckdb")   # doctest: +SKIP
    >>> store.runs()                                         # doctest: +SKIP
"""

__version__ = "0.1.0"

from evalkit.cases import Case, Corpus, load_corpus
from evalkit.config import Suite, load_suite
from evalkit.errors import (
    ComparabilityError,
    ConfigError,
    CorpusError,
    EvalkitError,
    StoreError,
)
from evalkit.records import Output, Score, ToolCall
from evalkit.runner import RunOptions, RunSummary, run_suite
from evalkit.store import Store, open_store

__all__ = [
    "Case",
    "ComparabilityError",
    "ConfigError",
    "Corpus",
    "CorpusError",
    "EvalkitError",
    "Output",
    "RunOptions",
    "RunSummary",
    "Score",
    "Store",
    "StoreError",
    "Suite",
    "ToolCall",
    "__version__",
    "load_corpus",
    "load_suite",
    "open_store",
    "run_suite",
]

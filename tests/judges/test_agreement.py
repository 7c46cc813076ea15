"""evalkit.judges.agreement against scikit-learn / scipy / statsmodels / krippendorff, the agreement
charts, and notebooks/judge_agreement.ipynb executed with papermill (PandaLM and LLMBar)."""

from __future__ import annotations

import doctest
import json
import math
import os
import sys
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import krippendorff
import nbformat
import numpy as np
import papermill
import polars as pl
import pytest
from ipykernel.kernelspec import write_kernel_spec
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
from scipy import stats as sps
from sklearn.metrics import (
    accuracy_score,
    cohen_kappa_score,
    precision_recall_fscore_support,
)
from sklearn.metrics import confusion_matrix as sk_confusion
from statsmodels.stats.proportion import proportion_confint

from evalkit import stats
from evalkit.judges import agreement
from evalkit.judges.agreement import (
    CalibrationRecord,
    agreement_summary,
    classification_report,
    combine_orders,
    confusion_array,
    confusion_matrix,
    length_bias,
    order_by_slice,
    order_summary,
    position_consistency,
    rater_agreement,
    score_length_correlation,
    slice_agreement,
)
from evalkit.report import judge_charts

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "judge_agreement.ipynb"


def _sklearn(h: np.ndarray, j: np.ndarray, labels: list) -> tuple:
    p, r, f, s = precision_recall_fscore_support(h, j, labels=labels, average=None, zero_division=0)
    mp, mr, mf, _ = precision_recall_fscore_support(
        h, j, labels=labels, average="macro", zero_division=0
    )
    return p, r, f, s, (mp, mr, mf), accuracy_score(h, j)


def _check_report(h: Sequence | np.ndarray, j: Sequence | np.ndarray, labels: Sequence) -> None:
    rep = classification_report(h, j, labels=labels)
    p, r, f, s, macro, acc = _sklearn(np.asarray(h), np.asarray(j), list(labels))
    np.testing.assert_allclose(rep.precision, p, atol=1e-12)
    np.testing.assert_allclose(rep.recall, r, atol=1e-12)
    np.testing.assert_allclose(rep.f1, f, atol=1e-12)
    assert list(rep.support) == s.tolist()
    np.testing.assert_allclose(
        (rep.macro_precision, rep.macro_recall, rep.macro_f1), macro, atol=1e-12
    )
    assert rep.accuracy == pytest.approx(acc, abs=1e-12)
    np.testing.assert_array_equal(
        confusion_array(h, j, labels), sk_confusion(h, j, labels=list(labels))
    )


# --- confusion matrix and per-class report ----------------------------------------------------


@pytest.mark.parametrize("seed", range(40))
def test_report_matches_sklearn_on_random_labels(seed: int) -> None:
    rng = np.random.default_rng(seed)
    k = int(rng.integers(2, 6))
    n = int(rng.integers(1, 300))
    h = rng.integers(0, k, n)
    # a judge that is right about 60% of the time, otherwise random: some classes go unpredicted
    j = np.where(rng.random(n) < 0.6, h, rng.integers(0, k, n))
    _check_report(h, j, list(range(k)))
    _check_report(h.tolist(), j.tolist(), list(range(k))[::-1])  # label order is free


@pytest.mark.parametrize(
    ("human", "judge", "labels"),
    [
        ([1, 1, 1, 1], [1, 1, 1, 1], [0, 1, 2]),  # constant, identical
        ([1, 1, 1, 1], [2, 2, 2, 2], [1, 2]),  # constant, always wrong
        ([0, 1, 2, 2, 1], [1, 1, 2, 2, 1], [0, 1, 2]),  # class 0 never predicted
        ([1, 1, 2, 2], [0, 1, 0, 2], [0, 1, 2]),  # class 0 never in the human labels
        ([2], [2], [0, 1, 2]),  # a single item, right
        ([2], [1], [1, 2]),  # a single item, wrong
        (["neg", "pos", "neu", "pos"], ["neg", "neu", "neu", "pos"], ["neg", "neu", "pos"]),
    ],
)
def test_report_matches_sklearn_on_edge_cases(human: list, judge: list, labels: list) -> None:
    _check_report(human, judge, labels)


def test_confusion_matrix_long_form() -> None:
    h, j = [1, 0, 2, 2, 1, 1], [1, 2, 2, 0, 1, 0]
    long = confusion_matrix(h, j, labels=(1, 0, 2))
    assert long.columns == ["human", "judge", "n"]
    assert long.height == 9 and long["n"].sum() == 6
    wide = confusion_array(h, j, labels=(1, 0, 2))
    for hh, jj, n in long.rows():
        assert wide[(1, 0, 2).index(hh), (1, 0, 2).index(jj)] == n
    assert long.filter((pl.col("human") == 1) & (pl.col("judge") == 0))["n"].item() == 1


def test_inputs_are_validated() -> None:
    with pytest.raises(ValueError, match="not in labels"):
        confusion_array([1, 2, 3], [1, 2, 2], labels=[1, 2])
    with pytest.raises(ValueError, match="differ in length"):
        classification_report([1, 2], [1])
    with pytest.raises(ValueError, match="no items"):
        classification_report([], [], labels=[1, 2])
    with pytest.raises(ValueError, match="nulls"):
        classification_report(pl.Series([1, None]), pl.Series([1, 2]))
    with pytest.raises(ValueError, match="NaN"):
        classification_report([1.0, float("nan")], [1.0, 2.0])
    with pytest.raises(ValueError, match="distinct"):
        confusion_array([1], [1], labels=[1, 1])
    assert confusion_array([], [], labels=[1, 2]).sum() == 0


# --- summary ----------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(8))
def test_summary_matches_reference_implementations(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(20, 400))
    h = rng.choice([1, 0, 2], n, p=[0.4, 0.2, 0.4])
    j = np.where(rng.random(n) < 0.7, h, rng.choice([1, 0, 2], n))
    s = agreement_summary(h, j, labels=(1, 0, 2), ordinal=True, seed=seed, iters=500)
    assert s.n == n and s.agree == int((h == j).sum())
    assert s.accuracy == pytest.approx(accuracy_score(h, j))
    lo, hi = proportion_confint(s.agree, n, alpha=0.05, method="wilson")
    assert (s.accuracy_lo, s.accuracy_hi) == pytest.approx((lo, hi), abs=1e-9)
    assert s.kappa == pytest.approx(cohen_kappa_score(h, j), abs=1e-12)
    assert s.kappa_lo <= s.kappa <= s.kappa_hi
    wk = cohen_kappa_score(h, j, weights="quadratic", labels=[1, 0, 2])
    assert s.weighted_kappa == pytest.approx(wk, abs=1e-12)
    assert s.weighted_kappa_lo <= s.weighted_kappa <= s.weighted_kappa_hi
    assert s.confusion["n"].sum() == n
    assert s.report == classification_report(h, j, labels=(1, 0, 2))
    again = agreement_summary(h, j, labels=(1, 0, 2), ordinal=True, seed=seed, iters=500)
    assert (again.kappa_lo, again.kappa_hi) == (s.kappa_lo, s.kappa_hi)  # seeded


def test_summary_edge_cases_and_rendering() -> None:
    s = agreement_summary([1, 1, 1], [1, 1, 1], labels=(1, 2), iters=200)
    assert s.accuracy == 1.0 and math.isnan(s.kappa) and math.isnan(s.kappa_lo)
    assert s.weighted_kappa is None
    single = agreement_summary([2], [1], labels=(1, 2), iters=200)
    assert single.accuracy == 0.0 and single.kappa == 0.0
    with pytest.raises(ValueError, match="no items"):
        agreement_summary([], [], labels=(1, 2))
    html = agreement_summary([1, 2, 2, 1, 1], [1, 2, 1, 1, 1], ordinal=True, iters=200)
    text = html._repr_html_()
    assert "cohen_kappa" in text and "weighted_kappa" in text and "<table" in text
    frame = html.to_frame()
    assert frame["metric"].to_list()[:3] == [
        "accuracy",
        "cohen_kappa",
        "weighted_kappa (quadratic)",
    ]


def test_slice_agreement_wilson() -> None:
    df = pl.DataFrame(
        {
            "h": [1, 1, 2, 2, 1, 2, 2],
            "j": [1, 2, 2, 2, 1, 1, 2],
            "s": ["a", "a", "a", "b", "b", "c", "c"],
        }
    )
    out = slice_agreement(df, "h", "j", "s")
    assert out["slice"].to_list() == ["c", "a", "b"]  # weakest first
    for sl, n, k, a, lo, hi in out.select("slice", "n", "agree", "agreement", "lo", "hi").rows():
        want = proportion_confint(k, n, alpha=0.05, method="wilson")
        assert a == k / n and (lo, hi) == pytest.approx(want, abs=1e-9), sl
    with pytest.raises(ValueError, match="nulls"):
        slice_agreement(df.with_columns(pl.lit(None).alias("j")), "h", "j", "s")


# --- order effects ----------------------------------------------------------------------------


def test_position_consistency_and_combined_verdict() -> None:
    ab, ba = [1, 2, 2, 1, 0], [1, 2, 1, 2, 0]
    assert position_consistency(ab, ba) == 0.6
    assert combine_orders(ab, ba).tolist() == [1, 2, 0, 0, 0]
    assert combine_orders(["x", "y"], ["x", "x"], tie="tie").tolist() == ["x", "tie"]
    with pytest.raises(ValueError, match="no items"):
        position_consistency([], [])
    with pytest.raises(ValueError, match="differ in length"):
        position_consistency([1], [1, 2])


@pytest.mark.parametrize("seed", range(10))
def test_order_summary_counts(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 200))
    gold = rng.integers(1, 3, n)
    ab = np.where(rng.random(n) < 0.8, gold, 3 - gold)
    ba = np.where(rng.random(n) < 0.7, ab, rng.integers(0, 3, n))
    s = order_summary(gold, ab, ba)
    assert s.accuracy_ab == pytest.approx(np.mean(ab == gold))
    assert s.accuracy_ba == pytest.approx(np.mean(ba == gold))
    assert s.accuracy == pytest.approx((np.mean(ab == gold) + np.mean(ba == gold)) / 2)
    assert s.consistency == pytest.approx(position_consistency(ab, ba))
    assert s.correct_both / n == pytest.approx(np.mean(combine_orders(ab, ba) == gold))
    decisive = np.isin(ab, (1, 2)).sum() + np.isin(ba, (1, 2)).sum()
    first = (ab == 1).sum() + (ba == 2).sum()
    assert s.first_position_rate == pytest.approx(first / decisive)


def test_order_by_slice() -> None:
    df = pl.DataFrame(
        {"g": [1, 2, 2, 1, 1], "ab": [1, 2, 2, 1, 2], "ba": [1, 1, 2, 2, 2], "s": list("xxyyy")}
    )
    out = order_by_slice(df, "g", "ab", "ba", "s")
    assert out["slice"].to_list() == ["x", "y"]
    y = out.row(1, named=True)
    assert y["n"] == 3 and y["consistency"] == pytest.approx(2 / 3)
    assert y["accuracy_ab"] == pytest.approx(2 / 3) and y["both_correct"] == pytest.approx(1 / 3)


# --- length bias ------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(10))
def test_length_bias_matches_scipy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 300
    l1, l2 = rng.integers(10, 400, n), rng.integers(10, 400, n)
    l2[:10] = l1[:10]  # some equal lengths
    p2 = 1 / (1 + np.exp(-(l2 - l1) / 100))  # a judge that likes length
    v = np.where(rng.random(n) < p2, 2, 1)
    v[rng.random(n) < 0.1] = 0  # ties are left out
    b = length_bias(v, l1, l2)
    keep = v != 0
    picked2, diff = (v[keep] == 2).astype(float), (l2 - l1)[keep]
    assert b.n == n and b.n_decisive == int(keep.sum()) and b.n_unequal == int((diff != 0).sum())
    longer = ((picked2 == 1) & (diff > 0)) | ((picked2 == 0) & (diff < 0))
    assert b.picked_longer == int(longer.sum())
    assert b.point_biserial == pytest.approx(sps.pointbiserialr(picked2, diff).statistic)
    assert b.spearman == pytest.approx(sps.spearmanr(picked2, diff).statistic)
    lo, hi = proportion_confint(b.picked_longer, b.n_unequal, method="wilson")
    assert (b.lo, b.hi) == pytest.approx((lo, hi), abs=1e-9)
    assert b.share_longer > 0.5


def test_length_bias_edge_cases() -> None:
    b = length_bias([0, 0], [1, 2], [3, 4])
    assert b.n_decisive == 0 and math.isnan(b.share_longer) and math.isnan(b.point_biserial)
    same = length_bias([1, 2, 1], [5, 5, 5], [5, 5, 5])
    assert same.n_unequal == 0 and math.isnan(same.spearman)
    with pytest.raises(ValueError, match="no items"):
        length_bias([], [], [])


def test_score_length_correlation_matches_scipy() -> None:
    rng = np.random.default_rng(3)
    scores, lengths = rng.integers(1, 6, 200), rng.integers(1, 1000, 200)
    want = sps.spearmanr(scores, lengths).statistic
    assert score_length_correlation(scores, lengths) == pytest.approx(want)
    assert math.isnan(score_length_correlation([3, 3, 3], [1, 2, 3]))


# --- agreement among raters -------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_rater_agreement_matches_sklearn_and_krippendorff(seed: int) -> None:
    rng = np.random.default_rng(seed)
    items, raters = 60, ["r1", "r2", "r3"]
    truth = rng.integers(0, 3, items)
    rows = []
    matrix = np.full((3, items), np.nan)
    for ri, r in enumerate(raters):
        for i in range(items):
            if rng.random() < 0.15:  # missing rating
                continue
            lab = int(truth[i] if rng.random() < 0.75 else rng.integers(0, 3))
            rows.append({"item": i, "rater": r, "label": lab})
            matrix[ri, i] = lab
    df = pl.DataFrame(rows)
    out = rater_agreement(df)
    assert out.n_raters == 3 and out.n_items == df["item"].n_unique()
    want_alpha = krippendorff.alpha(reliability_data=matrix, level_of_measurement="nominal")
    assert out.alpha == pytest.approx(want_alpha, abs=1e-9)
    for a, b, n, kappa in out.pairwise.select("rater_a", "rater_b", "n", "kappa").rows():
        ia, ib = raters.index(a), raters.index(b)
        both = ~np.isnan(matrix[ia]) & ~np.isnan(matrix[ib])
        assert n == int(both.sum())
        assert kappa == pytest.approx(cohen_kappa_score(matrix[ia][both], matrix[ib][both]))
    ordinal = rater_agreement(df, level="ordinal")
    want = krippendorff.alpha(reliability_data=matrix, level_of_measurement="ordinal")
    assert ordinal.alpha == pytest.approx(want, abs=1e-9)


def test_rater_agreement_string_labels_and_errors() -> None:
    df = pl.DataFrame(
        {
            "item": [1, 1, 2, 2, 3, 3],
            "rater": ["a", "b"] * 3,
            "label": ["x", "x", "y", "y", "y", "x"],
        }
    )
    out = rater_agreement(df)
    assert out.pairwise["kappa"].item() == pytest.approx(
        cohen_kappa_score(list("xyy"), list("xyx"))
    )
    assert "alpha" in out._repr_html_()
    with pytest.raises(ValueError, match="two raters"):
        rater_agreement(df.filter(pl.col("rater") == "a"))
    with pytest.raises(ValueError, match="more than one"):
        rater_agreement(pl.concat([df, df.head(1)]))


# --- calibration record -----------------------------------------------------------------------


def test_calibration_record_round_trips_to_json() -> None:
    s = agreement_summary([1, 2, 2, 1, 0, 2], [1, 2, 1, 1, 0, 2], labels=(1, 0, 2), ordinal=True)
    rec = CalibrationRecord.from_summary(
        s, judge_model="gpt-x", dataset="demo", rubric_hash="abc", position_consistency=0.9
    )
    d = json.loads(json.dumps(rec.to_dict()))
    assert d["n"] == 6 and d["kappa"] == pytest.approx(s.kappa) and d["rubric_hash"] == "abc"
    assert d["macro_f1"] == pytest.approx(s.report.macro_f1)
    assert d["weighted_kappa"] == pytest.approx(s.weighted_kappa)
    assert d["created_at"].endswith("+00:00")
    with pytest.raises(AttributeError):
        rec.kappa = 1.0  # type: ignore[misc]
    constant = agreement_summary([1, 1], [1, 1], iters=100)
    assert CalibrationRecord.from_summary(constant, "m", "d").to_dict()["kappa"] is None


# --- charts and docstrings --------------------------------------------------------------------


def test_agreement_charts_build() -> None:
    conf = confusion_matrix([1, 0, 2, 2], [1, 2, 2, 0], labels=(1, 0, 2))
    heat = judge_charts.confusion_heatmap(conf).to_dict()
    assert heat["layer"][0]["encoding"]["x"]["sort"] == ["1", "0", "2"]
    df = pl.DataFrame({"h": [1, 2, 2, 1], "j": [1, 2, 1, 1], "s": ["a", "a", "b", "b"]})
    assert "layer" in judge_charts.agreement_by_slice(slice_agreement(df, "h", "j", "s")).to_dict()
    orders = order_by_slice(df.with_columns(pl.col("j").alias("k")), "h", "j", "k", "s")
    assert "layer" in judge_charts.order_consistency(orders).to_dict()
    finder, runner = doctest.DocTestFinder(), doctest.DocTestRunner()
    for fn in (
        judge_charts.confusion_heatmap,
        judge_charts.agreement_by_slice,
        judge_charts.order_consistency,
    ):
        for test in finder.find(fn, globs={"pl": pl, **vars(judge_charts)}):
            runner.run(test)
    assert runner.summarize(verbose=False).failed == 0


def test_docstring_examples_run() -> None:
    result = doctest.testmod(agreement, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 10


# --- the notebook -----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def python3_kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelSpec]:
    """Pin the kernel named ``python3`` to this interpreter (the venv), whatever else is on the
    machine: a kernelspec in a temp dir, first on ``JUPYTER_PATH`` (which outranks user, env and
    system kernelspecs), with ``argv[0] = sys.executable``."""
    root = tmp_path_factory.mktemp("jupyter")
    write_kernel_spec(root / "kernels" / "python3")
    mp = pytest.MonkeyPatch()
    mp.setenv(
        "JUPYTER_PATH", os.pathsep.join(filter(None, [str(root), os.environ.get("JUPYTER_PATH")]))
    )
    spec = KernelSpecManager().get_kernel_spec("python3")
    assert spec.argv[0] == sys.executable, spec.argv
    yield spec
    mp.undo()


def test_notebook_is_committed_clean() -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is None and not c.outputs for c in code)
    assert code[0].metadata.get("tags") == ["parameters"]
    params = [line.split("=")[0].strip() for line in code[0].source.splitlines() if "=" in line]
    assert params == [
        "DATASET",
        "JUDGE",
        "LLMBAR_DIR",
        "OUTPUT_DIR",
        "SEED",
        "DB_PATH",
        "RUN",
        "SCORER",
        "RUBRIC",
    ]


NOTEBOOK_RUNS = {
    "pandalm": ("gpt35", ["confusion", "agreement_by_slice"]),
    "llmbar": ("Vanilla_NoRules", ["confusion", "agreement_by_slice", "order_consistency"]),
}


@pytest.fixture(scope="module")
def executed(
    python3_kernel: KernelSpec, llmbar_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path | BaseException]:
    """Execute the notebook once per data set, both at the same time (each papermill call
    drives its own kernel process; most of a run is the kernel importing altair and scipy).
    LLMBAR_DIR stays at its default, so the notebook reads the shipped copy (``llmbar_root``)."""
    root = tmp_path_factory.mktemp("judge_agreement")

    def run(dataset: str) -> Path:
        judge = NOTEBOOK_RUNS[dataset][0]
        params = {"DATASET": dataset, "JUDGE": judge, "OUTPUT_DIR": str(root), "SEED": 0}
        out = root / f"{dataset}.ipynb"
        papermill.execute_notebook(
            str(NOTEBOOK),
            str(out),
            parameters=params,
            kernel_name="python3",
            cwd=str(REPO),
            progress_bar=False,
        )  # raises PapermillExecutionError if a cell (e.g. the final reproduction check) fails
        return out

    with ThreadPoolExecutor(len(NOTEBOOK_RUNS)) as pool:
        futures = {d: pool.submit(run, d) for d in NOTEBOOK_RUNS}
    return {d: f.exception() or f.result() for d, f in futures.items()}


def test_notebook_parameters_parse() -> None:
    params = papermill.inspect_notebook(str(NOTEBOOK))
    assert list(params) == [
        "DATASET",
        "JUDGE",
        "LLMBAR_DIR",
        "OUTPUT_DIR",
        "SEED",
        "DB_PATH",
        "RUN",
        "SCORER",
        "RUBRIC",
    ]


@pytest.mark.parametrize("dataset", list(NOTEBOOK_RUNS))
def test_notebook_runs_and_reproduces(
    executed: dict[str, Path | BaseException], dataset: str
) -> None:
    result = executed[dataset]
    if isinstance(result, BaseException):
        raise result
    judge, pngs = NOTEBOOK_RUNS[dataset]
    nb = nbformat.read(result, as_version=4)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    print(text)
    assert f"kernel python: {sys.executable}" in text
    assert f"{dataset}/{judge}: the published figures are reproduced exactly" in text
    folder = result.parent / f"{dataset}_{judge}"
    for name in pngs:
        png = folder / f"{name}.png"
        assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
        assert (folder / f"{name}.svg").is_file()
    record = json.loads((folder / "calibration.json").read_text())
    assert record["dataset"] == dataset and record["n"] == (999 if dataset == "pandalm" else 419)


def test_summary_kappas_use_the_declared_scale_like_sklearn() -> None:
    # issue 13, item 3: labels= was ignored, so the weighted kappa ran on the labels seen
    from sklearn.metrics import cohen_kappa_score

    scale = (1, 2, 3, 4, 5)
    h, j = [5, 5, 2, 1, 1, 2], [5, 2, 5, 1, 1, 2]  # the raters used only 1, 2 and 5
    s = agreement_summary(h, j, labels=scale, ordinal=True, iters=300)
    assert s.weighted_kappa == pytest.approx(0.4808, abs=1e-4)
    assert cohen_kappa_score(h, j, weights="quadratic") == pytest.approx(0.75)  # the old answer
    rng = np.random.default_rng(11)
    for _ in range(40):
        n = int(rng.integers(6, 50))
        used = rng.choice(scale, size=3, replace=False)
        a, b = rng.choice(used, n), rng.choice(used, n)
        s = agreement_summary(a, b, labels=scale, ordinal=True, iters=200, seed=2)
        want = cohen_kappa_score(a, b, weights="quadratic", labels=list(scale))
        if np.isnan(want):
            continue
        assert s.weighted_kappa == pytest.approx(want, abs=1e-12)
        ci = stats.cohen_kappa_ci(a, b, weights="quadratic", labels=scale, iters=200, seed=2)
        assert (s.weighted_kappa_lo, s.weighted_kappa_hi) == pytest.approx((ci.lo, ci.hi))
        assert s.kappa == pytest.approx(cohen_kappa_score(a, b, labels=list(scale)), abs=1e-12)


def test_a_one_item_summary_has_no_kappa_interval() -> None:
    s = agreement_summary([1], [2], labels=(1, 2), ordinal=True, iters=100)
    assert np.isnan(s.kappa_lo) and np.isnan(s.kappa_hi)
    assert np.isnan(s.weighted_kappa_lo) and np.isnan(s.weighted_kappa_hi)


def test_bias_functions_moved_but_agreement_still_names_them() -> None:
    from evalkit.judges import bias

    for name in ("position_consistency", "order_summary", "length_bias", "combine_orders"):
        assert getattr(agreement, name) is getattr(bias, name)

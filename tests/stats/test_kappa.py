"""evalkit.stats.agreement: kappa, Krippendorff's alpha and Fleiss' kappa against scikit-learn,
statsmodels and krippendorff."""

from __future__ import annotations

import doctest
import math
import warnings

import numpy as np
import pytest

from evalkit.stats import agreement as module
from evalkit.stats import (
    cohen_kappa,
    cohen_kappa_ci,
    fleiss_kappa,
    krippendorff_alpha,
)


def test_docstring_examples_run() -> None:
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 5 and result.failed == 0


# --- agreement -------------------------------------------------------------------------------


def _label_pairs(count: int, seed: int):
    rng = np.random.default_rng(seed)
    for i in range(count):
        k = int(rng.integers(2, 6))
        n = 1 + (i % 40) if i < 40 else int(rng.integers(1, 201))
        a = rng.integers(0, k, n)
        b = np.where(rng.random(n) < rng.random(), a, rng.integers(0, k, n))
        yield a, b


@pytest.mark.parametrize("weights", [None, "linear", "quadratic"])
def test_cohen_kappa_matches_sklearn(weights: str | None) -> None:
    from sklearn.metrics import cohen_kappa_score

    checked = 0
    for i, (a, b) in enumerate(_label_pairs(120, {None: 0, "linear": 1, "quadratic": 2}[weights])):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = cohen_kappa_score(a, b, weights=weights)
        got = cohen_kappa(a, b, weights=weights)
        if math.isnan(ref):
            assert math.isnan(got)
        else:
            assert got == pytest.approx(ref, abs=1e-12)
            checked += 1
        if i % 4:
            continue
        labels = np.arange(6)  # an extra class nobody uses changes weighted kappa distances
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = cohen_kappa_score(a, b, weights=weights, labels=labels)
        got = cohen_kappa(a, b, weights=weights, labels=labels)
        assert got == pytest.approx(ref, abs=1e-12, nan_ok=True)
    assert checked >= 100


def test_cohen_kappa_edge_cases() -> None:
    assert math.isnan(cohen_kappa([2, 2, 2], [2, 2, 2]))  # constant and identical: 0/0
    assert math.isnan(cohen_kappa(["x"], ["x"]))  # single item, agreeing
    assert cohen_kappa(["x"], ["y"]) == 0.0  # single item, disagreeing
    assert cohen_kappa([0, 0, 0, 0], [0, 1, 0, 1]) == 0.0  # one rater constant
    assert cohen_kappa([0, 1, 2, 2], [0, 1, 1, 1]) == pytest.approx(1 / 3)  # b never says 2
    assert cohen_kappa(["a", "b", "a"], ["a", "b", "a"]) == 1.0
    assert cohen_kappa([0, 1, 2], [1, 2, 0], weights="quadratic") < 0
    for a, b, kw in [([], [], {}), ([1, 2], [1], {}), ([1, 2], [1, 3], {"labels": [1, 2]})]:
        with pytest.raises(ValueError):
            cohen_kappa(a, b, **kw)
    with pytest.raises(ValueError):
        cohen_kappa([1, 2], [1, 2], weights="cubic")  # type: ignore[arg-type]


@pytest.mark.parametrize("weights", [None, "linear", "quadratic"])
def test_cohen_kappa_asymptotic_ci_matches_statsmodels(weights: str | None) -> None:
    from statsmodels.stats.inter_rater import cohens_kappa

    checked = 0
    for a, b in _label_pairs(90, seed=5):
        if a.size < 5 or math.isnan(cohen_kappa(a, b)):
            continue
        labels = np.unique(np.r_[a, b])
        table = (a[:, None, None] == labels[:, None]) & (b[:, None, None] == labels[None, :])
        table = table.sum(0)  # rows: rater a, columns: rater b
        ref = cohens_kappa(table) if weights is None else cohens_kappa(table, wt=weights)
        got = cohen_kappa_ci(a, b, weights=weights, method="asymptotic")
        assert got.kappa == pytest.approx(ref.kappa, abs=1e-12)
        assert got.se == pytest.approx(ref.std_kappa, rel=1e-9, abs=1e-12)
        assert (got.lo, got.hi) == pytest.approx((ref.kappa_low, ref.kappa_upp), abs=1e-9)
        assert got.iters is None and got.seed is None and got.n == a.size
        checked += 1
    assert checked >= 50


def test_cohen_kappa_bootstrap_ci() -> None:
    rng = np.random.default_rng(3)
    a = rng.integers(0, 3, 400)
    b = np.where(rng.random(400) < 0.7, a, rng.integers(0, 3, 400))
    boot = cohen_kappa_ci(a, b, iters=4000, seed=1)
    asym = cohen_kappa_ci(a, b, method="asymptotic")
    assert boot.kappa == asym.kappa == cohen_kappa(a, b)
    assert boot.lo < boot.kappa < boot.hi
    assert boot.se == pytest.approx(asym.se, rel=0.1)
    assert (boot.lo, boot.hi) == pytest.approx((asym.lo, asym.hi), abs=0.02)
    # against resampling items with a loop
    idx = np.random.default_rng(9).integers(0, 400, size=(1000, 400))
    ref = np.quantile([cohen_kappa(a[i], b[i]) for i in idx], [0.025, 0.975])
    assert (boot.lo, boot.hi) == pytest.approx(tuple(ref), abs=0.015)
    assert cohen_kappa_ci(a, b, iters=4000, seed=1) == boot
    assert (boot.iters, boot.seed, boot.method, boot.level) == (4000, 1, "bootstrap", 0.95)
    const = cohen_kappa_ci([1, 1, 1], [1, 1, 1])
    assert all(math.isnan(v) for v in (const.kappa, const.lo, const.hi, const.se))
    with pytest.raises(ValueError):
        cohen_kappa_ci(a, b, method="jackknife")  # type: ignore[arg-type]


def _reliability(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    raters, items = int(rng.integers(2, 7)), int(rng.integers(2, 40))
    truth = rng.integers(1, 6, items)
    data = np.where(rng.random((raters, items)) < 0.7, truth, rng.integers(1, 6, (raters, items)))
    data = data.astype(float) * (1.5 if seed % 3 == 0 else 1.0)  # non-integer values too
    data[rng.random(data.shape) < rng.uniform(0, 0.4)] = np.nan
    return data


@pytest.mark.parametrize("level", ["nominal", "ordinal", "interval"])
def test_krippendorff_alpha_matches_package(level: str) -> None:
    import krippendorff

    checked = 0
    for seed in range(80):
        data = _reliability(seed)
        pairable = (~np.isnan(data)).sum(0) >= 2
        values = np.unique(data[:, pairable][~np.isnan(data[:, pairable])])
        if not pairable.any():
            with pytest.raises(ValueError):
                krippendorff_alpha(data, level)
            continue
        if values.size < 2:
            assert math.isnan(krippendorff_alpha(data, level))
            continue
        ref = krippendorff.alpha(reliability_data=data, level_of_measurement=level)
        assert krippendorff_alpha(data, level) == pytest.approx(ref, abs=1e-10), seed
        checked += 1
    assert checked >= 60


def test_krippendorff_alpha_edge_cases() -> None:
    import krippendorff

    assert math.isnan(krippendorff_alpha([[3, 3, 3], [3, 3, np.nan]]))  # no variation
    with pytest.raises(ValueError):
        krippendorff_alpha([[1, np.nan], [np.nan, 2]])  # no item has two ratings
    with pytest.raises(ValueError):
        krippendorff_alpha([1, 2, 3])
    with pytest.raises(ValueError):
        krippendorff_alpha([[1, np.inf], [1, 2]])
    with pytest.raises(ValueError):
        krippendorff_alpha([[1, 2], [1, 2]], level="ratio")  # type: ignore[arg-type]
    data = np.array([[1, 2, 3, 3, 2, 1, 4, 1, 2], [1, 2, 3, 3, 2, 2, 4, 1, 3.0]])
    lone = np.c_[data, [[5.0], [np.nan]]]  # an item rated once is not pairable
    for level in ("nominal", "ordinal", "interval"):
        assert krippendorff_alpha(lone, level) == pytest.approx(krippendorff_alpha(data, level))
        ref = krippendorff.alpha(reliability_data=lone, level_of_measurement=level)
        assert krippendorff_alpha(lone, level) == pytest.approx(ref)
    assert krippendorff_alpha([[1, 2, 3], [1, 2, 3]]) == 1.0


def test_fleiss_kappa_matches_statsmodels() -> None:
    from statsmodels.stats.inter_rater import fleiss_kappa as sm_fleiss

    rng = np.random.default_rng(4)
    for _ in range(60):
        items, cats, raters = (
            int(rng.integers(2, 30)),
            int(rng.integers(2, 5)),
            int(rng.integers(2, 7)),
        )
        table = np.array(
            [rng.multinomial(raters, rng.dirichlet(np.ones(cats))) for _ in range(items)]
        )
        if (table.sum(0) == table.sum()).any():
            assert math.isnan(fleiss_kappa(table))
            continue
        assert fleiss_kappa(table) == pytest.approx(sm_fleiss(table), abs=1e-12)
    assert math.isnan(fleiss_kappa([[3, 0], [3, 0]]))
    for bad in ([[3, 0], [2, 0]], [[1, 0], [0, 1]], [1, 2]):
        with pytest.raises(ValueError):
            fleiss_kappa(bad)


# --- the declared scale (issue 13, item 3) -----------------------------------------------------


def test_weighted_kappa_ci_uses_the_declared_scale_like_sklearn() -> None:
    from sklearn.metrics import cohen_kappa_score

    h, j = [5, 5, 2, 1, 1, 2], [5, 2, 5, 1, 1, 2]  # a 1-5 scale; the raters used only 1, 2, 5
    scale = [1, 2, 3, 4, 5]
    assert cohen_kappa_score(h, j, weights="quadratic") == pytest.approx(0.75)
    ref = cohen_kappa_score(h, j, weights="quadratic", labels=scale)
    assert ref == pytest.approx(0.4808, abs=1e-4)
    for method in ("bootstrap", "asymptotic"):
        r = cohen_kappa_ci(h, j, weights="quadratic", labels=scale, method=method, iters=500)
        assert r.kappa == pytest.approx(ref)
    rng = np.random.default_rng(0)
    for _ in range(60):
        used = rng.choice(scale, size=int(rng.integers(2, 5)), replace=False)
        n = int(rng.integers(5, 60))
        a, b = rng.choice(used, n), rng.choice(used, n)
        for w in (None, "linear", "quadratic"):
            want = cohen_kappa_score(a, b, weights=w, labels=scale)
            got = cohen_kappa_ci(a, b, weights=w, labels=scale, iters=200)
            if math.isnan(want):
                assert math.isnan(got.kappa)
            else:
                assert got.kappa == pytest.approx(want, abs=1e-12)
                assert got.lo <= got.kappa + 1e-12 and got.hi >= got.kappa - 1e-12


def test_asymptotic_kappa_ci_on_the_declared_scale_matches_statsmodels() -> None:
    from statsmodels.stats.inter_rater import cohens_kappa

    rng = np.random.default_rng(4)
    for _ in range(30):
        n = int(rng.integers(10, 80))
        a, b = rng.choice([1, 2, 5], n), rng.choice([1, 2, 5], n)
        table = np.zeros((5, 5))
        np.add.at(table, (a - 1, b - 1), 1)
        ref = cohens_kappa(table, wt="quadratic")
        got = cohen_kappa_ci(a, b, weights="quadratic", labels=[1, 2, 3, 4, 5], method="asymptotic")
        assert got.kappa == pytest.approx(ref.kappa, abs=1e-10)
        assert (got.lo, got.hi) == pytest.approx((ref.kappa_low, ref.kappa_upp), abs=1e-8)


def test_one_item_kappa_has_no_interval() -> None:
    for method in ("bootstrap", "asymptotic"):
        r = cohen_kappa_ci([1], [2], method=method, iters=100)
        assert r.n == 1 and math.isnan(r.lo) and math.isnan(r.hi) and math.isnan(r.se)

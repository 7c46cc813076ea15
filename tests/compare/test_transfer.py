"""Do the gains transfer? (issue 24 item 4): the candidate's paired gain on live cases against
its gain on the sealed ones — "gains do not transfer" for a candidate tuned to the live corpus,
"gains transfer" for a genuine improvement — as a warn-tier gate finding and from
``evalkit compare --transfer``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from synthetic_runs import C, make_run, write_store

from evalkit.cli import main
from evalkit.compare.analysis import compare
from evalkit.compare.pin import gate_pair
from evalkit.compare.transfer import transfer, transfer_finding
from evalkit.store import open_store


def _runs(sealed_fixed: int, sealed_broken: int, n_sealed: int = 40) -> tuple[object, object]:
    """100 live cases (the candidate fixes 12 of the baseline's 20 failures) and ``n_sealed``
    sealed ones (the baseline passes 3 in 4; the candidate fixes and breaks as told)."""
    base, cand = [], []
    for i in range(100):
        b = "p" if i < 80 else "f"
        base.append(C(f"live-{i:03d}", b, ["billing"]))
        cand.append(C(f"live-{i:03d}", "p" if i < 92 else b, ["billing"]))
    passing = n_sealed * 3 // 4
    for i in range(n_sealed):
        b = "p" if i < passing else "f"
        c = "f" if i < sealed_broken else "p" if passing <= i < passing + sealed_fixed else b
        base.append(C(f"sealed-{i:03d}", b, ["billing"], sealed=True))
        cand.append(C(f"sealed-{i:03d}", c, ["billing"], sealed=True))
    return make_run("base", base, label="base"), make_run("cand", cand, label="cand")


def test_an_overfit_candidate_gains_on_live_cases_only_and_is_told_so() -> None:
    result = transfer(compare(*_runs(sealed_fixed=0, sealed_broken=2)).paired)
    assert (result.live_n, result.sealed_n) == (100, 40)
    assert result.live_gain == pytest.approx(0.12) and result.sealed_gain == pytest.approx(-0.05)
    assert result.transfers is False and result.lo > 0
    assert result.message().startswith(
        "gains do not transfer (live +12.0 pts, sealed -5.0 pts, unpaired gap +17.0 pts, 95% CI ["
    )
    finding = transfer_finding(result)
    assert finding.severity == "warn" and finding.tier == 3 and finding.kind == "transfer"


def test_a_genuine_improvement_gains_on_both_and_transfers() -> None:
    result = transfer(compare(*_runs(sealed_fixed=20, sealed_broken=0, n_sealed=200)).paired)
    assert result.sealed_gain == pytest.approx(0.10) and result.transfers is True
    assert result.hi < result.live_gain  # the sealed cases keep part of the gain, beyond noise
    assert result.message().startswith("gains transfer (live +12.0 pts, sealed +10.0 pts")
    assert transfer_finding(result).severity == "info"


def test_the_same_improvement_on_a_small_sealed_slice_is_inconclusive_not_a_pass() -> None:
    result = transfer(compare(*_runs(sealed_fixed=4, sealed_broken=0, n_sealed=40)).paired)
    assert result.sealed_gain == pytest.approx(0.10)
    assert result.verdict == "inconclusive" and result.transfers is None
    assert result.message().startswith("gains not shown to transfer: too few sealed cases")
    assert transfer_finding(result).severity == "info"


def test_the_gap_interval_is_mover_over_tango_and_the_exact_p_is_hypergeometric() -> None:
    from scipy import stats as sps

    from evalkit import stats
    from evalkit.compare.transfer import exchangeable_p

    paired = compare(*_runs(sealed_fixed=0, sealed_broken=2)).paired
    a = transfer(paired, level=0.95)
    live_i = stats.paired_diff_interval(0, 12, 100, 0.95, method="tango")
    held_i = stats.paired_diff_interval(2, 0, 40, 0.95, method="tango")
    g_l, g_s = 0.12, -0.05
    assert a.lo == pytest.approx(g_l - g_s - np.hypot(g_l - live_i.lo, held_i.hi - g_s))
    assert a.hi == pytest.approx(g_l - g_s + np.hypot(live_i.hi - g_l, g_s - held_i.lo))
    # no broken case anywhere: the sealed sum is hypergeometric (its fixed count)
    live, held = np.r_[np.ones(12), np.zeros(88)], np.r_[np.ones(1), np.zeros(19)]
    assert exchangeable_p(live, held) == pytest.approx(sps.hypergeom.cdf(1, 120, 13, 20))
    # with broken cases: against a direct enumeration with scipy's multivariate hypergeometric
    live, held = np.r_[np.ones(9), -np.ones(3), np.zeros(18)], np.r_[-np.ones(2), np.zeros(6)]
    pooled = (9, 5, 24)  # fixed, broken, unchanged over 38 cases
    mh = sps.multivariate_hypergeom(pooled, 8)
    direct = sum(mh.pmf([f, b, 8 - f - b]) for f in range(9) for b in range(9)
                 if f + b <= 8 and f - b <= -2)  # fmt: skip
    assert exchangeable_p(live, held) == pytest.approx(direct)
    assert "unpaired gap" in a.message() and "paired difference" not in a.message()


def test_under_a_shared_truth_does_not_transfer_fires_at_most_2_5_percent() -> None:
    """Seeded simulation at (200 live, 20 sealed), the size where the bootstrap fired 14.5 %:
    every case is fixed with probability 0.10 and broken with 0.02, live or sealed."""
    from evalkit.compare.transfer import gap_test

    rng = np.random.default_rng(45)
    reps, fired = 800, 0
    for _ in range(reps):
        live = rng.choice([1, -1, 0], 200, p=[0.10, 0.02, 0.88])
        held = rng.choice([1, -1, 0], 20, p=[0.10, 0.02, 0.88])
        lo, _, p = gap_test(live, held)
        fired += live.mean() > 0 and lo > 0 and p <= 0.025
    assert fired / reps <= 0.025 + 2 * np.sqrt(0.025 * 0.975 / reps)


def test_without_sealed_evidence_there_is_no_verdict_and_no_finding() -> None:
    base, cand = _runs(0, 2)
    live_only = [r.cases.filter(~pl.col("sealed"))["case_id"] for r in (base, cand)]
    paired = compare(base, cand).paired.filter(pl.col("case_id").is_in(live_only[0].implode()))
    result = transfer(paired)
    assert result.verdict == "untested" and transfer_finding(result) is None
    assert "run both with `evalkit run --sealed`" in result.message()


def test_the_gate_warns_and_compare_transfer_prints_the_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no suite config here: the default policy
    db = tmp_path / "s.duckdb"
    write_store(db, list(_runs(sealed_fixed=0, sealed_broken=2)))
    with open_store(db, write=True) as store:
        _, decision = gate_pair(store, "base", "cand", None, with_siblings=False)
    (found,) = [f for f in decision.findings if f.kind == "transfer"]
    assert found.severity == "warn" and decision.status == "PASSED"  # warn tier: never blocks
    assert main(["compare", "--db", str(db), "base", "cand", "--transfer"]) == 0
    assert "gains do not transfer (live +12.0 pts, sealed -5.0 pts" in capsys.readouterr().out
    db2 = tmp_path / "live.duckdb"
    base, cand = (make_run(r, [C(f"x{i}", "p", ["billing"]) for i in range(10)], label=r)
                  for r in ("base", "cand"))  # fmt: skip
    write_store(db2, [base, cand])
    assert main(["compare", "--db", str(db2), "base", "cand", "--transfer"]) == 2
    assert "transfer not tested: 0 sealed" in capsys.readouterr().err

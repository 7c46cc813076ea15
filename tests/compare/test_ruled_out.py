"""What a passing critical tag rules out (first screen), interval headers at their real level,
the Holm wording, and ``evalkit plan`` before any run (no model call)."""

from __future__ import annotations

import dataclasses
import socket
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from projects import make_project
from scipy import stats as sps
from synthetic_runs import C, make_run

from evalkit.cli import main
from evalkit.compare.analysis import compare
from evalkit.compare.gate import decide
from evalkit.compare.policy import GatePolicy
from evalkit.compare.power import min_detectable_collapse
from evalkit.report.build import build_report, to_text
from evalkit.report.html import to_html
from evalkit.report.markdown import to_markdown

REPO = Path(__file__).resolve().parents[2]


def _frame(n: int, broken: int = 0, tag: str = "negation") -> pl.DataFrame:
    return pl.DataFrame({
        "case_id": [f"c{i}" for i in range(n)], "tags": [[tag]] * n,
        "criticality": ["normal"] * n, "base": [True] * n,
        "cand": [i >= broken for i in range(n)],
        "base_error": [False] * n, "cand_error": [False] * n,
    })  # fmt: skip


def test_an_eight_case_tag_with_no_flips_says_it_cannot_rule_out_a_32_point_drop() -> None:
    decision = decide(_frame(8), GatePolicy(critical_tags=("negation",)))
    (found,) = [f for f in decision.findings if f.kind == "rules-out"]
    assert "rule out a drop of more than 32 points" in found.message
    assert "one-sided 97.5% bound" in found.message and found.severity == "info"
    # Tango's bound at 0 flips of 8: narrower than the exact one-sided Clopper-Pearson bound
    # on the broken share (37 points), never wider
    cp = 1 - 0.025 ** (1 / 8)
    assert found.statistic["ruled_out_drop"] == pytest.approx(0.3244, abs=1e-3)
    assert found.statistic["ruled_out_drop"] < cp
    assert found.statistic["min_detectable_drop"] == min_detectable_collapse(8)
    # more cases rule out less: 300 clean cases exclude a drop of about 1 point
    big = decide(_frame(300), GatePolicy(critical_tags=("negation",)))
    (wide,) = [f for f in big.findings if f.kind == "rules-out"]
    assert wide.statistic["ruled_out_drop"] < 0.02
    # a regressed tag says what broke, not what it rules out
    bad = decide(_frame(20, broken=8), GatePolicy(critical_tags=("negation",)))
    assert not [f for f in bad.findings if f.kind == "rules-out"]


def test_the_minimum_detectable_collapse_is_the_exact_power_threshold() -> None:
    # every flip a break: power = P(Bin(n, d) >= 5) at alpha 0.05; check against scipy
    for n in (8, 13, 30, 100):
        d = min_detectable_collapse(n)
        assert sps.binom.sf(4, n, d) >= 0.8
        assert sps.binom.sf(4, n, d - 0.01) < 0.8


def _pair():
    cases = [C(f"billing-{i:02d}", "p", ["billing"]) for i in range(40)]
    broken = [C(f"billing-{i:02d}", "f" if i < 3 else "p", ["billing"]) for i in range(40)]
    return make_run("b", cases, label="base"), make_run("c", broken, label="cand")


@pytest.mark.parametrize(("alpha", "label"), [(0.05, "95% CI"), (0.01, "98% CI")])
def test_interval_headers_follow_alpha(alpha: float, label: str) -> None:
    cmp = compare(*_pair())
    policy = GatePolicy(critical_tags=("billing",), alpha=alpha)
    report = build_report(cmp, decide(cmp.paired, policy))
    assert report.level == pytest.approx(1 - 2 * alpha if alpha < 0.025 else 0.95)
    for text in (to_text(report, max_cases=3), to_markdown(report), to_html(report)):
        assert f"difference [{label}]" in text
        other = "95% CI" if label != "95% CI" else "98% CI"
        assert f"difference [{other}]" not in text
    # the slice intervals are computed at that level too: the critical tag's bounds agree
    (state,) = report.decision.critical
    row = report.slices.filter(pl.col("slice") == "billing").row(0, named=True)
    assert (row["diff_lo"], row["diff_hi"]) == pytest.approx((state.lo, state.hi))


def test_a_slice_raised_on_the_interval_rule_quotes_no_holm_p() -> None:
    # 20 slices; one whose interval lies below -tolerance but whose Holm-adjusted p is > alpha
    rows = []
    for s in range(20):
        n, broken = (40, 6) if s == 0 else (40, 0)
        rows += [(f"s{s}-{i}", [f"s{s}"], i >= broken) for i in range(n)]
    frame = pl.DataFrame(rows, schema=["case_id", "tags", "cand"], orient="row").with_columns(
        criticality=pl.lit("normal"), base=pl.lit(True), base_error=pl.lit(False),
        cand_error=pl.lit(False),
    )  # fmt: skip
    decision = decide(frame, GatePolicy())
    (found,) = [f for f in decision.findings if f.slice == "s0" and f.kind == "regressed"]
    assert found.statistic["p_holm"] > 0.05  # the adjusted test did not raise it
    assert "Holm-adjusted" not in found.message and "not adjusted across slices" in found.message


def test_evalkit_plan_prints_each_critical_tags_mde_without_a_model_call(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"evalkit plan opened a connection: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    config = REPO / "corpus" / "evalkit.yaml"
    code = main(["plan", "--config", str(config), "--db", str(tmp_path / "none.duckdb")])
    out = capsys.readouterr().out
    assert code == 0
    lines = {line.split(":")[0]: line for line in out.splitlines() if ": " in line}
    for tag, n in (("billing", 13), ("injection", 13), ("policy", 12)):
        mde = min_detectable_collapse(n)
        assert f"{tag}: {n} cases, can block; MDE {100 * mde:.0f} pts" in lines[tag]
    assert "no model call" in out


def test_plan_states_a_judges_calibration_state(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:

    corpus = tmp_path / "corpus"
    make_project(corpus, demo=True)
    cfg = corpus / "evalkit.yaml"
    old, new = "critical_tags: [billing, injection, policy]", "critical_tags: [billing, orders]"
    cfg.write_text(cfg.read_text().replace(old, new))
    assert main(["plan", "--config", str(cfg), "--db", str(tmp_path / "none.duckdb")]) == 0
    out = capsys.readouterr().out
    assert "judge judge (rubrics/reply_tone.md, demo-judge-1): no store at" in out
    assert "billing: 13 cases" in out and "judges: none" in out


def test_rules_out_survives_a_report(tmp_path: Path) -> None:
    cmp = compare(*_pair())
    decision = decide(cmp.paired, dataclasses.replace(GatePolicy(), critical_tags=("billing",)))
    assert decision.status in ("PASSED", "BLOCKED")
    text = to_text(build_report(cmp, decision), max_cases=3)
    assert "rule out a drop of more than" in text
    assert np.isfinite([f.statistic.get("ruled_out_drop", 0) for f in decision.findings]).all()


def _tags(k: int, n: int, broken: int) -> pl.DataFrame:
    return pl.concat([_frame(n, broken, f"t{t}").with_columns(
        pl.format("t{}-{}", pl.lit(t), "case_id").alias("case_id")) for t in range(k)])  # fmt: skip


def test_holm_across_critical_tags_is_an_option_that_holds_the_family_at_alpha() -> None:
    # four tags, each 5 broken of 20: exact p = 0.03125 each; Holm-adjusted 0.125
    frame = _tags(4, 20, 5)
    tags = tuple(f"t{t}" for t in range(4))
    plain = decide(frame, GatePolicy(critical_tags=tags))
    assert [s.state for s in plain.critical] == ["regressed"] * 4
    holm = decide(frame, GatePolicy(critical_tags=tags, critical_adjust="holm"))
    assert [s.state for s in holm.critical] != ["regressed"] * 4
    assert not holm.blocking()
    assert all(s.p_value == pytest.approx(0.125) for s in holm.critical)
    # one strong regression still blocks under Holm and says so
    strong = pl.concat([_frame(20, 9, "t0"), _tags(4, 20, 0).filter(pl.col("tags").list.first()
                        != "t0")])  # fmt: skip
    (found,) = decide(strong, GatePolicy(critical_tags=tags, critical_adjust="holm")).blocking()
    assert "Holm-adjusted across the critical tags" in found.message


def test_mid_p_is_an_option_that_blocks_four_of_eight() -> None:
    frame = _frame(8, 4)
    assert not decide(frame, GatePolicy(critical_tags=("negation",))).blocking()
    (found,) = decide(frame, GatePolicy(critical_tags=("negation",), mid_p=True)).blocking()
    assert "mid-p p = 0.03125" in found.message


def test_holm_keeps_the_family_wise_rate_at_alpha_where_flake_is_high() -> None:
    """Seeded simulation through the real gate at 4 tags of 100 cases, 20 % run-to-run
    disagreement and no true change: the family-wise false-block rate is at most alpha with
    Holm (within Monte-Carlo error)."""
    from evalkit.compare.power import simulate_gate

    reps = 150
    holm = GatePolicy(critical_adjust="holm")
    blocks = simulate_gate(dict.fromkeys(("a", "b", "c", "d"), 100), 0.2, 0.0, reps,
                           rng=np.random.default_rng(45), policy=holm)  # fmt: skip
    fwer = blocks.any(1).mean()
    assert fwer <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / reps)

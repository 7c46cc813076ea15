"""What each slice can detect: the exact power of the gate's one-sided McNemar test and the
paired sizing it uses, per slice; the gate's operating characteristics measured by simulation
through the real `gate.decide` (`operating_characteristics`, used by ``bench/bench_gate_oc.py``);
and replay sizing (`replay_table`). ``notebooks/power.ipynb`` charts them."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import polars as pl

from evalkit import stats
from evalkit.compare.policy import GatePolicy

min_detectable_collapse = stats.min_detectable_collapse  # where it lives: stats.gate_power


def power_table(
    counts: Mapping[str, int], drop: float = 0.05, psi: float = 0.10,
    policy: GatePolicy | None = None,
) -> pl.DataFrame:  # fmt: skip
    """What each slice can detect, with the paired (McNemar) sizing the gate uses.

    Per slice: ``can_gate`` (n ≥ `GatePolicy.min_cases`); ``min_detectable_drop``, the drift a
    slice detects at flip fraction ``psi`` (Connor, one-sided; null when even a drop of psi,
    every flip a break, needs more cases); ``min_detectable_collapse`` (exact, every flip a
    break); ``required_n`` for a net ``drop`` at flip fraction max(psi, drop); and ``power``,
    the exact power for that drop at the slice's n. At the policy's alpha and power.

    Examples:
        >>> t = power_table({"billing": 100, "negation": 6}, drop=0.05, psi=0.10)
        >>> t.select("slice", "required_n", "can_gate", "min_detectable_collapse").rows()
        [('billing', 246, True, 0.07), ('negation', 246, False, 0.87)]
    """
    pol, psi_d = policy or GatePolicy(), max(psi, drop)
    need = stats.required_n_paired(psi_d, drop, pol.alpha, pol.power, "one-sided")
    rows = []
    for tag, n in sorted(counts.items()):
        mdd = (
            stats.min_detectable_drop_paired(n, psi, pol.alpha, pol.power, "one-sided")
            if n
            else None
        )
        rows.append({
            "slice": tag, "n": n, "can_gate": n >= pol.min_cases(),
            "min_detectable_drop": None if mdd is None or np.isnan(mdd) else mdd,
            "min_detectable_collapse": min_detectable_collapse(n, pol.alpha, pol.power),
            "required_n": need, "power": stats.exact_power_paired(n, psi_d, drop, pol.alpha),
        })  # fmt: skip
    schema = {"slice": pl.String, "n": pl.Int64, "can_gate": pl.Boolean,
              "min_detectable_drop": pl.Float64, "min_detectable_collapse": pl.Float64,
              "required_n": pl.Int64, "power": pl.Float64}  # fmt: skip
    return pl.DataFrame(rows, schema=schema)


# --- the gate's operating characteristics, by simulation through the real `gate.decide` -------


def flip_prob(flake: float) -> float:
    """Per-run flip probability e with 2 e (1 - e) = ``flake``: two runs of an unchanged system
    then disagree on a case with probability ``flake``.

    Examples:
        >>> round(flip_prob(0.05), 4), flip_prob(0.0)
        (0.0257, 0.0)
    """
    if not 0 <= flake <= 0.5:
        raise ValueError(f"flake rate must be in [0, 0.5], got {flake}")
    return (1 - math.sqrt(1 - 2 * flake)) / 2


def _oc_frame(sizes: Mapping[str, int]) -> pl.DataFrame:
    tags = [t for t, n in sizes.items() for _ in range(n)]
    k = len(tags)
    return pl.DataFrame({
        "case_id": [f"c{i}" for i in range(k)], "tags": [[t] for t in tags],
        "criticality": ["normal"] * k, "base_error": [False] * k, "cand_error": [False] * k,
    })  # fmt: skip


def simulate_gate(
    sizes: Mapping[str, int],
    flake: float,
    drop: float,
    reps: int,
    pass_rate: float = 0.85,
    rng: np.random.Generator | None = None,
    policy: GatePolicy | None = None,
) -> np.ndarray:
    """(reps, tags) booleans: whether the real `gate.decide` blocked each critical tag.

    Each simulated corpus has one critical tag per ``sizes`` entry (tag -> cases; normal
    criticality, so only the critical tier can block). A case's true verdict passes with
    probability ``pass_rate``; each run sees it through the flake rate (`flip_prob`). With
    ``drop`` > 0, exactly round(drop * n) true passes of each tag break in the candidate. The
    policy's critical tags are ``sizes``' keys (its alpha and tolerance are used).

    Examples:
        >>> blocks = simulate_gate({"a": 20}, 0.0, 0.5, 5, rng=np.random.default_rng(0))
        >>> blocks.shape, bool(blocks.all())
        ((5, 1), True)
    """
    from evalkit.compare.gate import decide  # the gate imports this module's neighbours

    rng = rng if rng is not None else np.random.default_rng(0)
    tags = list(sizes)
    policy = replace(policy or GatePolicy(), critical_tags=tuple(tags))
    frame, e = _oc_frame(sizes), flip_prob(flake)
    bounds = np.cumsum([0, *sizes.values()])
    k = int(bounds[-1])
    out = np.zeros((reps, len(tags)), dtype=bool)
    for r in range(reps):
        truth = rng.random(k) < pass_rate
        cand_truth = truth.copy()
        if drop:
            for t in range(len(tags)):
                passes = np.flatnonzero(truth[bounds[t] : bounds[t + 1]]) + bounds[t]
                m = min(passes.size, round(drop * (bounds[t + 1] - bounds[t])))
                cand_truth[rng.choice(passes, m, replace=False)] = False
        base = truth ^ (rng.random(k) < e)
        cand = cand_truth ^ (rng.random(k) < e)
        paired = frame.with_columns(base=pl.Series(base), cand=pl.Series(cand))
        out[r] = [s.state == "regressed" for s in decide(paired, policy).critical]
    return out


def operating_characteristics(
    sizes: Sequence[Mapping[str, int]],
    flakes: Sequence[float] = (0.0, 0.02, 0.05),
    drops: Sequence[float] = (0.05, 0.10, 0.20),
    reps: int = 1000,
    power_reps: int = 250,
    power_flake: float = 0.02,
    pass_rate: float = 0.85,
    seed: int = 0,
    policy: GatePolicy | None = None,
) -> dict[str, Any]:
    """The gate's false-block rate and power, measured by `simulate_gate` (seeded).

    For each corpus layout in ``sizes`` (critical tag -> cases) and flake rate: ``null`` rows
    with the per-tag false-block rate under no true change (``per_tag``; ``mc_se``, the
    Monte-Carlo s.e. of that estimate, sqrt(r (1 - r) / draws), 0 when no draw blocked;
    ``se_at_alpha``, the s.e. a rate of exactly alpha would have, the yardstick for "at most
    alpha within Monte-Carlo error"; each tag's own rate in ``by_tag``) and the family-wise
    rate with the first 1..k tags (``fwer``); ``power`` rows with the per-tag power against
    each true drop at ``power_flake``. ``n`` is a layout's smallest tag. Returns ``{"alpha",
    "tolerance", "null", "power"}``, JSON-ready.

    Examples:
        >>> oc = operating_characteristics([{"a": 30}], flakes=[0.0], drops=[0.2], reps=20,
        ...                                power_reps=10)
        >>> oc["null"][0]["per_tag"], oc["power"][0]["power"] > 0.5
        (0.0, True)
    """
    pol = policy or GatePolicy()
    rng = np.random.default_rng(seed)
    null: list[dict[str, Any]] = []
    for flake in flakes:
        for layout in sizes:
            blocks = simulate_gate(layout, flake, 0.0, reps, pass_rate, rng, pol)
            se = math.sqrt(pol.alpha * (1 - pol.alpha) / blocks.size)
            rate = float(blocks.mean())
            fwer = {str(t): float(blocks[:, :t].any(1).mean()) for t in range(1, len(layout) + 1)}
            by_tag = {tag: float(blocks[:, i].mean()) for i, tag in enumerate(layout)}
            null.append({"n": min(layout.values()), "sizes": dict(layout), "flake": flake,
                         "per_tag": rate, "mc_se": math.sqrt(rate * (1 - rate) / blocks.size),
                         "se_at_alpha": se, "fwer": fwer,
                         "by_tag": by_tag})  # fmt: skip
    power: list[dict[str, Any]] = []
    for drop in drops:
        for layout in sizes:
            blocks = simulate_gate(layout, power_flake, drop, power_reps, pass_rate, rng, pol)
            by_tag = {tag: float(blocks[:, i].mean()) for i, tag in enumerate(layout)}
            power.append({"n": min(layout.values()), "sizes": dict(layout), "drop": drop,
                          "flake": power_flake, "power": float(blocks.mean()),
                          "by_tag": by_tag})  # fmt: skip
    return {"alpha": pol.alpha, "tolerance": pol.tolerance, "null": null, "power": power}


def replay_table(
    drops: Sequence[float] = (0.05, 0.10, 0.20),
    replays: Sequence[int] = (1, 2, 3, 5, 10),
    psi: float = 0.10,
    flake: float = 0.02,
    policy: GatePolicy | None = None,
    pass_rate: float = 0.85,
) -> pl.DataFrame:
    """How many cases, and how many replays: `stats.required_n_replays` (Miller 2024, eq. 9)
    for each drop and K, one-sided at the policy's alpha and power, as the gate tests.

    Per case, the difference in expected pass rates varies across cases with variance
    omega^2 = psi' - drop^2 (psi' = max(psi, drop), the flip fraction, as the paired sizing
    assumes); one run's verdict varies within a case with variance e (1 - e), e = `flip_prob`
    (flake), for each system. Replays shrink only that within-case term. ``required_n`` reads the
    mean over replays; the gate reads a majority, which is *not* always as stable: for a case
    whose per-replay pass rate is near 0.5 the majority is a coin toss whatever K. The sizing
    on the gate's own test (exact one-sided McNemar on majority verdicts) is
    ``required_n_exact`` (`evalkit.stats.gate_power`, baseline pass rate ``pass_rate``), and
    ``exact_power`` is that test's power at ``required_n``: below the target, Miller's n is
    optimistic for the gate.

    Examples:
        >>> t = replay_table(drops=[0.05], replays=[1, 5], psi=0.10, flake=0.05)
        >>> t.select("replays", "required_n", "exact_power", "required_n_exact").rows()
        [(1, 365, 0.751, 413), (5, 266, 0.797, 269)]
    """
    pol, e = policy or GatePolicy(), flip_prob(flake)
    rows = []
    for drop in drops:
        psi_d = max(psi, drop)
        omega2 = psi_d - drop * drop
        for k in replays:
            need = stats.required_n_replays(
                drop, omega2, e * (1 - e), k, pol.alpha, pol.power, "one-sided"
            )
            kw: dict[str, Any] = {"replays": k, "flake": flake, "pass_rate": pass_rate}
            exact_n = stats.required_n_exact(psi_d, drop, pol.alpha, pol.power, **kw)
            power = stats.exact_power_gate(need, psi_d, drop, pol.alpha, **kw)
            rows.append({"drop": drop, "replays": k, "omega2": omega2, "sigma2": e * (1 - e),
                         "required_n": need, "runs_per_system": need * k,
                         "exact_power": round(power, 3), "required_n_exact": exact_n})  # fmt: skip
    schema: dict[str, Any] = dict.fromkeys(["drop", "omega2", "sigma2"], pl.Float64)
    schema |= dict.fromkeys(["replays", "required_n", "runs_per_system"], pl.Int64)
    schema |= {"exact_power": pl.Float64, "required_n_exact": pl.Int64}
    return pl.DataFrame(rows, schema=schema)

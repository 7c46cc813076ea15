"""Replay pass rules: how a case's replays become its one verdict, and pass@k / pass^k.

Every rule is a threshold on the share of *decided* replays (errored replays count neither way)
that passed: ``majority`` more than half (ties fail), ``all`` every one, ``any`` at least one,
``k_of_n: 4/5`` at least k/n of them (4 of 5 replays; 8 of 10; with one of 5 errored, all 4
decided ones). A case with no decided replay has no verdict under any rule.

The suite writes the rules under ``replays:`` in evalkit.yaml (``pass_rule``, ``tags``,
``cases``); the gate decides under the pinned ones. Where several apply, the case's own rule
wins, else the strictest rule of its tags, else the default.

Examples:
    >>> rule = parse_rule("k_of_n: 4/5")
    >>> rule.name, rule.passes(4, 1), rule.passes(3, 2)
    ('k_of_n 4/5', True, False)
    >>> [parse_rule(r).passes(1, 1) for r in ("majority", "all", "any")]
    [False, False, True]
    >>> round(pass_at_k(5, 2, 2), 3), round(pass_hat_k(5, 2, 2), 3)
    (0.7, 0.1)
"""

from __future__ import annotations

from math import comb
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl

# the rules themselves live on the ground floor (a run's own pass rate follows them in DuckDB)
from evalkit.replay_rules import ALL, ANY, MAJORITY, PassRule, PassRules, parse_rule

__all__ = [
    "ALL", "ANY", "MAJORITY", "PassRule", "PassRules", "parse_rule", "pass_at_k", "pass_hat_k",
    "replay_slices", "replay_table",
]  # fmt: skip


def pass_at_k(n: int, c: int, k: int) -> float:
    """Chance that at least one of k replays drawn from n (c of them passing) passes:
    1 - C(n-c, k) / C(n, k), the unbiased estimator of Chen et al. 2021 (Codex).

    Raises:
        ValueError: k < 1, k > n, or c outside 0..n.

    Examples:
        >>> pass_at_k(5, 0, 3), pass_at_k(5, 5, 3), pass_at_k(5, 1, 1)
        (0.0, 1.0, 0.2)
    """
    _check(n, c, k)
    total = comb(n, k)
    return (total - comb(n - c, k)) / total  # exact integers first: 0.2, not 0.19999…


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Chance that all k replays drawn from n (c passing) pass: C(c, k) / C(n, k), the unbiased
    pass^k estimator (Yao et al. 2024, tau-bench); reliability, where pass@k is coverage.

    Examples:
        >>> pass_hat_k(5, 4, 5), pass_hat_k(5, 4, 4), pass_hat_k(5, 4, 1)
        (0.0, 0.2, 0.8)
    """
    _check(n, c, k)
    return comb(c, k) / comb(n, k)


def _check(n: int, c: int, k: int) -> None:
    if not (1 <= k <= n and 0 <= c <= n):
        raise ValueError(f"need 1 <= k <= n and 0 <= c <= n; got n={n}, c={c}, k={k}")


def replay_slices(verdicts: pl.DataFrame, k: int) -> pl.DataFrame:
    """Per tag (and ``all``): cases with at least ``k`` decided replays, mean pass@k and pass^k
    over them. ``verdicts`` is a `evalkit.compare.verdicts.verdicts` frame (``tags, n_pass,
    n_fail``); sealed cases are left out. Cases with fewer than k decided replays are skipped
    (neither estimator is defined there): ``cases`` says how many counted.

    Examples:
        >>> import polars as pl
        >>> v = pl.DataFrame({"case_id": ["a", "b"], "tags": [["x"], ["x"]],
        ...     "n_pass": [5, 3], "n_fail": [0, 2]})
        >>> replay_slices(v, 5).select("slice", "cases", "pass_at_k", "pass_hat_k").rows()
        [('all', 2, 1.0, 0.5), ('x', 2, 1.0, 0.5)]
    """
    import polars as pl

    if "sealed" in verdicts.columns:
        verdicts = verdicts.filter(~pl.col("sealed").fill_null(False))
    cases = verdicts.select(
        pl.col("tags"),
        (pl.col("n_pass") + pl.col("n_fail")).alias("n"),
        pl.col("n_pass").alias("c"),
    ).filter(pl.col("n") >= k)
    # Few distinct (n, c) pairs exist (n is the run's replays): estimate each once, then join.
    pairs = cases.select("n", "c").unique()
    estimates = pairs.with_columns(
        pl.Series("pass_at_k", [pass_at_k(n, c, k) for n, c in pairs.iter_rows()], pl.Float64),
        pl.Series("pass_hat_k", [pass_hat_k(n, c, k) for n, c in pairs.iter_rows()], pl.Float64),
    )
    cases = cases.join(estimates, on=["n", "c"], how="left")
    per_tag = cases.with_columns(pl.col("tags").fill_null([])).explode("tags").drop_nulls("tags")
    frame = pl.concat([
        cases.select(pl.lit("all").alias("slice"), "pass_at_k", "pass_hat_k"),
        per_tag.select(pl.col("tags").alias("slice"), "pass_at_k", "pass_hat_k"),
    ])  # fmt: skip
    return (
        frame.group_by("slice")
        .agg(pl.len().cast(pl.Int64).alias("cases"), pl.col("pass_at_k", "pass_hat_k").mean())
        .with_columns(k=pl.lit(k, pl.Int64))
        .sort(pl.col("slice") != "all", "slice")
        .select("slice", "k", "cases", "pass_at_k", "pass_hat_k")
    )


def replay_table(base: pl.DataFrame, cand: pl.DataFrame, k: int) -> pl.DataFrame:
    """`replay_slices` of both runs' verdicts side by side: ``slice, k, cases, base_pass_at_k,
    base_pass_hat_k, cand_pass_at_k, cand_pass_hat_k`` (``cases``: the candidate's count).

    Examples:
        >>> import polars as pl
        >>> v = pl.DataFrame({"tags": [["x"]], "n_pass": [2], "n_fail": [1]})
        >>> replay_table(v, v.with_columns(n_pass=pl.lit(3), n_fail=pl.lit(0)), 3).row(0)
        ('all', 3, 1, 1.0, 0.0, 1.0, 1.0)
    """

    sides = []
    for side, frame in (("base", base), ("cand", cand)):
        table = replay_slices(frame, k).rename(
            {"pass_at_k": f"{side}_pass_at_k", "pass_hat_k": f"{side}_pass_hat_k"}
        )
        sides.append(table if side == "cand" else table.drop("cases", "k"))
    joined = sides[1].join(sides[0], on="slice", how="left", maintain_order="left")
    cols = ["base_pass_at_k", "base_pass_hat_k", "cand_pass_at_k", "cand_pass_hat_k"]
    return joined.select("slice", "k", "cases", *cols)

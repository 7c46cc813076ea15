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

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from math import comb
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the run path reads the policy (and so these rules) without polars
    import polars as pl

from evalkit.errors import ConfigError

_K_OF_N = re.compile(r"^\s*(?:k_of_n\s*:?\s*)?(\d+)\s*/\s*(\d+)\s*$")


@dataclass(frozen=True, order=True)
class PassRule:
    """Pass when ``passes * den > num * decided`` (``strict``) or ``>=`` (not strict).

    Ordered by strictness: a larger share (``num / den``) is stricter; at equal shares a strict
    comparison is. ``name`` is how the report and the config spell it.
    """

    share: float
    strict: bool
    num: int
    den: int
    name: str

    def passes(self, n_pass: int, n_fail: int) -> bool | None:
        """The verdict from counts of passing and failing replays (None: none decided).

        Examples:
            >>> parse_rule("all").passes(0, 0) is None, parse_rule("all").passes(3, 0)
            (True, True)
        """
        decided = n_pass + n_fail
        if decided == 0:
            return None
        lhs, rhs = n_pass * self.den, self.num * decided
        return lhs > rhs if self.strict else lhs >= rhs

    def expr(self, n_pass: pl.Expr, n_fail: pl.Expr) -> pl.Expr:
        """`passes` as a Polars expression (null where no replay decided)."""
        import polars as pl

        lhs, rhs = n_pass * self.den, (n_pass + n_fail) * self.num
        verdict = lhs > rhs if self.strict else lhs >= rhs
        return pl.when(n_pass + n_fail > 0).then(verdict)


MAJORITY = PassRule(0.5, True, 1, 2, "majority")
ALL = PassRule(1.0, False, 1, 1, "all")
ANY = PassRule(0.0, True, 0, 1, "any")
_NAMED = {r.name: r for r in (MAJORITY, ALL, ANY)}


def parse_rule(value: Any, where: str = "replays.pass_rule") -> PassRule:
    """A rule from its config spelling: ``majority``, ``all``, ``any``, ``k_of_n: 4/5`` (or the
    mapping ``{k_of_n: 4/5}`` YAML makes of it unquoted, or just ``4/5``).

    Raises:
        ConfigError: naming ``where`` and the spellings accepted.

    Examples:
        >>> parse_rule({"k_of_n": "3/5"}).name
        'k_of_n 3/5'
        >>> parse_rule("6/5")
        Traceback (most recent call last):
        evalkit.errors.ConfigError: replays.pass_rule: '6/5' is not a rule; ...
    """
    if isinstance(value, PassRule):
        return value
    if isinstance(value, Mapping) and list(value) == ["k_of_n"]:
        value = f"k_of_n: {value['k_of_n']}"
    text = str(value).strip()
    if text in _NAMED:
        return _NAMED[text]
    match = _K_OF_N.match(text)
    if match:
        k, n = int(match[1]), int(match[2])
        if 1 <= k <= n:
            return PassRule(k / n, False, k, n, f"k_of_n {k}/{n}")
    raise ConfigError(
        f"{where}: {str(value)!r} is not a rule; use majority, all, any or k_of_n: K/N with "
        "1 ≤ K ≤ N (e.g. k_of_n: 4/5)"
    )


@dataclass(frozen=True)
class PassRules:
    """The rules of one suite: a default, per-tag and per-case overrides (sorted pairs).

    Examples:
        >>> rules = PassRules.from_config({"pass_rule": "all", "tags": {"tone": "3/5"}})
        >>> rules.for_case("c1", ["tone"]).name, rules.for_case("c1", ["x"]).name
        ('k_of_n 3/5', 'all')
        >>> rules.describe()
        'all (tag tone: k_of_n 3/5)'
    """

    default: PassRule = MAJORITY
    tags: tuple[tuple[str, PassRule], ...] = ()
    cases: tuple[tuple[str, PassRule], ...] = field(default=())

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None, where: str = "replays") -> PassRules:
        """From the manifest form ``{pass_rule, tags: {tag: rule}, cases: {id: rule}}``."""
        config = config or {}
        default = parse_rule(config.get("pass_rule", "majority"), f"{where}.pass_rule")
        tags = tuple(
            sorted(
                (t, parse_rule(r, f"{where}.tags.{t}"))
                for t, r in (config.get("tags") or {}).items()
            )
        )
        cases = tuple(
            sorted(
                (c, parse_rule(r, f"{where}.cases.{c}"))
                for c, r in (config.get("cases") or {}).items()
            )
        )
        return cls(default, tags, cases)

    @property
    def is_default(self) -> bool:
        """Majority everywhere: the verdicts evalkit has always computed."""
        return self.default == MAJORITY and not self.tags and not self.cases

    def for_case(self, case_id: str, tags: Sequence[str] = ()) -> PassRule:
        """The rule deciding one case: its own, else its tags' strictest, else the default."""
        own = dict(self.cases).get(case_id)
        if own is not None:
            return own
        by_tag = dict(self.tags)
        chosen = [by_tag[t] for t in tags if t in by_tag]
        return max(chosen) if chosen else self.default

    def describe(self) -> str:
        """One line for the report: the default, then the overrides."""
        extra = [f"tag {t}: {r.name}" for t, r in self.tags]
        extra += [f"case {c}: {r.name}" for c, r in self.cases]
        return self.default.name + (f" ({'; '.join(extra)})" if extra else "")

    def to_config(self) -> dict[str, Any]:
        """The manifest form (what a promotion pins), `from_config`'s inverse."""
        return {
            "pass_rule": _spelling(self.default),
            "tags": {t: _spelling(r) for t, r in self.tags},
            "cases": {c: _spelling(r) for c, r in self.cases},
        }

    def verdict_expr(self, tags: pl.Expr | None, case_id: pl.Expr) -> pl.Expr:
        """The per-case verdict under these rules, from ``n_pass`` and ``n_fail`` columns.

        ``tags`` is None when the frame carries no tags (then tag rules cannot apply).
        """
        import polars as pl

        n_pass, n_fail = pl.col("n_pass"), pl.col("n_fail")
        if self.is_default:
            return MAJORITY.expr(n_pass, n_fail)
        # Candidates in strictness order, least strict first: the last that applies wins, so a
        # tagged case gets its tags' strictest rule, and a case rule overrides all of them.
        applies: list[tuple[pl.Expr, PassRule]] = []
        if tags is not None:
            applies = [(tags.list.contains(t), r) for t, r in sorted(self.tags, key=lambda x: x[1])]
        verdict = self.default.expr(n_pass, n_fail)
        chosen = verdict
        if applies:
            any_tag = pl.any_horizontal([cond for cond, _ in applies])
            tagged = pl.lit(None, pl.Boolean)
            for cond, rule in applies:
                tagged = pl.when(cond).then(rule.expr(n_pass, n_fail)).otherwise(tagged)
            chosen = pl.when(any_tag.fill_null(False)).then(tagged).otherwise(verdict)
        for case, rule in self.cases:
            chosen = pl.when(case_id == case).then(rule.expr(n_pass, n_fail)).otherwise(chosen)
        return chosen


def _spelling(rule: PassRule) -> str:
    return f"k_of_n: {rule.num}/{rule.den}" if rule.name.startswith("k_of_n") else rule.name


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

"""Replay pass rules, the ground floor's part: how a case's replays become its one verdict.

A rule is a threshold on the share of *decided* replays (errored replays count neither way)
that passed: ``majority`` more than half (ties fail), ``all`` every one, ``any`` at least one,
``k_of_n: 4/5`` at least k/n of them. `PassRules` are a suite's: a default, per tag and per
case. Here, below the store, because a run's own pass rate (``history_sql``, counted in DuckDB
when a run finishes) follows the rules its manifest pinned, as the gate's verdicts
(`evalkit.compare.verdicts`, Polars) do; `evalkit.compare.pass_rules` re-exports them.

Examples:
    >>> rules = PassRules.from_config({"pass_rule": "all"})
    >>> rules.describe(), rules.default.passes(2, 1)
    ('all', False)
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
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

    def sql(self, n_pass: str, n_fail: str) -> str:
        """`passes` as a SQL condition on two integer columns (false where none decided).

        Examples:
            >>> parse_rule("k_of_n: 2/3").sql("p", "f")
            '((p + f) > 0 AND p * 3 >= (p + f) * 2)'
        """
        op, decided = (">" if self.strict else ">="), f"({n_pass} + {n_fail})"
        return f"({decided} > 0 AND {n_pass} * {self.den} {op} {decided} * {self.num})"

    def basis(self, replays: int) -> str:
        """What a run's pass rate under this rule counts, in words.

        Examples:
            >>> [parse_rule(r).basis(3) for r in ("majority", "all", "2/3")]
            ['majority of 3 replays', 'all of 3 replays', '2 of 3 replays']
            >>> parse_rule("4/5").basis(3)
            'k_of_n 4/5 of 3 replays'
        """
        if self.name.startswith("k_of_n") and self.den == replays:
            return f"{self.num} of {replays} replays"
        return f"{self.name} of {replays} replays"


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

    def sql(self, tags: str, case_id: str) -> str:
        """`verdict_expr` as a SQL condition: true where the case passes under its rule.

        Examples:
            >>> PassRules().sql("tags", "case_id")
            '((n_pass + n_fail) > 0 AND n_pass * 2 > (n_pass + n_fail) * 1)'
            >>> PassRules.from_config({"pass_rule": "all", "tags": {"x": "2/3"}}).sql("t", "c")[:47]
            "CASE WHEN list_contains(t, 'x') THEN ((n_pass +"
        """
        n_pass, n_fail = "n_pass", "n_fail"
        if not self.tags and not self.cases:
            return self.default.sql(n_pass, n_fail)
        whens = [
            f"WHEN {case_id} = {_quoted(c)} THEN {r.sql(n_pass, n_fail)}" for c, r in self.cases
        ]
        whens += [  # the strictest of a case's tags decides: tried first
            f"WHEN list_contains({tags}, {_quoted(t)}) THEN {r.sql(n_pass, n_fail)}"
            for t, r in sorted(self.tags, key=lambda x: x[1], reverse=True)
        ]
        return f"CASE {' '.join(whens)} ELSE {self.default.sql(n_pass, n_fail)} END"

    def basis(self, replays: int) -> str:
        """What a run's pass rate under these rules counts: "majority of 3 replays", "2 of 3
        replays", "all (tag tone: k_of_n 3/5) of 5 replays"."""
        if not self.tags and not self.cases:
            return self.default.basis(replays)
        return f"{self.describe()} of {replays} replays"

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


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"

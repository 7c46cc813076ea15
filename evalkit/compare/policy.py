"""The gate's policy, fixed before anyone looks at results: critical tags, alpha, tolerance,
error and judge thresholds, budgets (``critical_tags``, ``gate:`` and ``budgets:`` in
evalkit.yaml), and the checks ``cases lint``, ``run`` and ``gate`` all apply to it.

Examples:
    >>> policy = GatePolicy.from_suite(["billing"], {"alpha": 0.05}, {})
    >>> policy.tolerance, policy.critical_tags
    (0.02, ('billing',))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evalkit import stats
from evalkit.corpus.cases import MIN_CRITICAL_CASES
from evalkit.errors import ConfigError

if TYPE_CHECKING:
    import polars as pl

MAX_CRITICAL_TAGS = 4


class _Gate(BaseModel):  # the ``gate:`` section of evalkit.yaml
    model_config = ConfigDict(extra="forbid", strict=True)
    alpha: float = Field(0.05, gt=0, lt=1)
    tolerance: float = Field(0.02, ge=0, lt=1)
    power: float = Field(0.8, gt=0, lt=1)
    bootstrap_iters: int = Field(10_000, ge=100)
    bootstrap_seed: int = Field(0, ge=0)
    level: float = Field(0.95, gt=0, lt=1)
    # A judge-scored check may block only when its judge model + rubric has a calibration
    # record with kappa at or above this (see evalkit.judges.gating).
    judge_kappa_min: float = Field(0.6, ge=-1, le=1)
    # ... and only after at least this many labelled items (the kappa CI's lower bound must
    # clear judge_kappa_min, which a handful of labels never does honestly).
    judge_min_labels: int = Field(100, ge=1)
    # Errored candidate outputs tolerated before the gate says UNVERIFIED (a fraction).
    max_error_rate: float = Field(0.0, ge=0, le=1)
    # A critical tag whose cases a calibrated (gating) judge scores also blocks when the judge
    # levels drop: the BCa upper bound of mean(cand - base level) below -this, and the exact
    # sign test on the level changes at alpha. null turns that rule off.
    judge_tolerance_levels: float | None = Field(0.5, ge=0)


class Budget(BaseModel):
    """A limit on a candidate mean (see `evalkit.compare.verdicts.BUDGET_METRICS`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    metric: Literal["mean_latency_ms", "mean_total_tokens", "mean_cost_usd"]
    limit: float = Field(ge=0)
    action: Literal["block", "warn"] = "block"


def _validated(model: type[BaseModel], data: dict[str, Any], where: str) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join([where, *map(str, err["loc"])])
        what = "unknown key" if err["type"] == "extra_forbidden" else f"invalid ({err['msg']})"
        raise ConfigError(f"{key}: {what}") from None


@dataclass(frozen=True)
class GatePolicy:
    """The gate's parameters, validated; build it with `from_suite` from ``evalkit.yaml``."""

    critical_tags: tuple[str, ...] = ()
    alpha: float = 0.05
    tolerance: float = 0.02
    power: float = 0.8
    bootstrap_iters: int = 10_000
    bootstrap_seed: int = 0
    level: float = 0.95
    budgets: tuple[Budget, ...] = ()
    judge_kappa_min: float = 0.6
    judge_min_labels: int = 100
    max_error_rate: float = 0.0
    judge_tolerance_levels: float | None = 0.5

    @classmethod
    def from_suite(
        cls,
        critical_tags: Sequence[str],
        gate: Mapping[str, Any] | None = None,
        budgets: Mapping[str, Any] | None = None,
        source: str = "evalkit.yaml",
    ) -> GatePolicy:
        """Validate the suite's ``critical_tags``, ``gate:`` and ``budgets:`` sections.

        Raises:
            ConfigError: one line naming ``source``, the key and what to do.

        Examples:
            >>> GatePolicy.from_suite(["a", "b", "c", "d", "e"])
            Traceback (most recent call last):
            evalkit.errors.ConfigError: evalkit.yaml: critical_tags lists 5 tags; at most 4 ...
        """
        tags = tuple(critical_tags)
        if len(tags) > MAX_CRITICAL_TAGS:
            raise ConfigError(
                f"{source}: critical_tags lists {len(tags)} tags; at most {MAX_CRITICAL_TAGS} are "
                "allowed (4 tags tested at 0.05 already give a family-wise error rate near 0.19)"
                f" — drop {len(tags) - MAX_CRITICAL_TAGS} or leave them to the report"
            )
        if len(set(tags)) < len(tags):
            raise ConfigError(f"{source}: critical_tags lists a tag twice: {list(tags)}")
        params = _validated(_Gate, dict(gate or {}), f"{source}: gate").model_dump()
        specs = [
            _validated(Budget, {"metric": m, **(v if isinstance(v, Mapping) else {"limit": v})},
                       f"{source}: budgets")
            for m, v in (budgets or {}).items()
        ]  # fmt: skip
        return cls(critical_tags=tags, budgets=tuple(specs), **params)

    def interval_level(self) -> float:
        """The level of the slice intervals the gate reads: at least ``level``, and high enough
        that each tail, (1 - level) / 2, is at most ``alpha``, so an interval never blocks where
        the exact one-sided test at ``alpha`` finds no evidence.

        Examples:
            >>> GatePolicy(alpha=0.01).interval_level(), GatePolicy().interval_level()
            (0.98, 0.95)
        """
        return max(self.level, round(1 - 2 * self.alpha, 12))

    def min_cases(self) -> int:
        """Cases a critical tag needs: 8, or more when alpha needs more one-way flips."""
        return max(MIN_CRITICAL_CASES, stats.exact_min_flips(self.alpha))

    def validate_against(
        self,
        cases: pl.DataFrame | Mapping[str, int],
        selection: Mapping[str, Any] | None = None,
    ) -> None:
        """Refuse a critical tag with too few cases (a frame with ``tags``, or tag counts).

        With a partial ``selection`` (a run manifest's ``selection`` naming a tier or tags) a
        critical tag with too few selected cases is no error: the gate reports it as not gated
        in this selection, and the full suite gates it.

        Examples:
            >>> GatePolicy(critical_tags=("negation",)).validate_against({"negation": 6})
            Traceback (most recent call last):
            evalkit.errors.ConfigError: critical tag 'negation' has 6 cases; a one-sided ...
        """
        counts = cases if isinstance(cases, Mapping) else tag_counts(cases)
        if is_partial(selection):
            return
        for tag in self.critical_tags:
            if (n := counts.get(tag, 0)) < self.min_cases():
                raise ConfigError(
                    f"critical tag {tag!r} has {n} cases; a one-sided exact McNemar test needs "
                    f"{stats.exact_min_flips(self.alpha)} one-way flips to reach p ≤ "
                    f"{self.alpha:g}, so a critical tag needs ≥ {self.min_cases()} cases — add "
                    "cases or drop it from critical_tags"
                )


def is_partial(selection: Mapping[str, Any] | None) -> bool:
    """Whether a run manifest's ``selection`` ran only part of the suite (a tier or tags).

    Examples:
        >>> is_partial({"tier": "smoke", "tags": ["smoke"]}), is_partial({"tags": []})
        (True, False)
    """
    return bool(selection) and any(selection.get(k) for k in ("tier", "tags", "exclude_tags"))


def tag_counts(frame: pl.DataFrame) -> dict[str, int]:
    """Cases per tag in a frame with a ``tags`` list column (sealed cases left out)."""
    import polars as pl  # here, not at the top: `evalkit run` checks its policy without Polars

    if "sealed" in frame.columns:
        frame = frame.filter(~pl.col("sealed").fill_null(False))
    counts = frame.select(pl.col("tags").explode()).drop_nulls().group_by("tags").len()
    return dict(counts.iter_rows())


def load_policy(config_path: str | None) -> GatePolicy:
    """The gate policy of a suite config file; no config -> the default policy."""
    if not config_path:
        return GatePolicy()
    from evalkit.corpus.suite import load_suite

    cfg = load_suite(config_path).config
    return GatePolicy.from_suite(cfg.critical_tags, cfg.gate, cfg.budgets, str(config_path))


def check_policy(
    suite_config: Any,
    corpus_counts: Mapping[str, int],
    selected_counts: Mapping[str, int] | None = None,
    source: str = "evalkit.yaml",
) -> list[str]:
    """The gate policy checks ``cases lint``, ``run`` and ``gate`` share, before any model call.

    ``corpus_counts`` are cases per tag in the whole corpus (sealed cases left out);
    ``selected_counts`` those of a partial selection (a tier or ``--tag``), where a critical tag
    with too few cases is a warning (it is not gated in that selection) rather than an error.

    Returns:
        Warnings for the person (one line each).

    Raises:
        ConfigError: more than 4 critical tags, a critical tag no case carries (with a
            did-you-mean), or one with fewer cases than the exact test needs.

    Examples:
        >>> from types import SimpleNamespace as NS
        >>> cfg = NS(critical_tags=["biling"], gate={}, budgets={})
        >>> check_policy(cfg, {"billing": 12})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        evalkit.errors.ConfigError: evalkit.yaml: critical_tags: no case has the tag 'biling'; ...
    """
    import difflib

    policy = GatePolicy.from_suite(
        suite_config.critical_tags, suite_config.gate, suite_config.budgets, source
    )
    for tag in policy.critical_tags:
        if not corpus_counts.get(tag):
            guess = difflib.get_close_matches(tag, list(corpus_counts), n=1)
            hint = f"; did you mean {guess[0]!r}?" if guess else ""
            raise ConfigError(
                f"{source}: critical_tags: no case has the tag {tag!r}{hint} (tags in the "
                f"corpus: {', '.join(sorted(corpus_counts)[:20])})"
            )
    policy.validate_against(corpus_counts)
    warnings = []
    for tag in policy.critical_tags if selected_counts is not None else ():
        if (n := selected_counts.get(tag, 0)) < policy.min_cases():
            warnings.append(
                f"critical tag {tag!r} has {n} case(s) in this selection (≥ {policy.min_cases()} "
                "gate): it is not gated on this run's selection"
            )
    return warnings

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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from evalkit import stats
from evalkit.compare.pass_rules import PassRules
from evalkit.errors import ConfigError
from evalkit.provenance import DEFAULT_TRUSTED
from evalkit.run_manifest import RunManifest

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
    # A critical tag whose cases were edited/added without being rebaselined, or removed, beyond
    # this share of its cases is UNVERIFIED (its evidence is no longer the baseline's); so are
    # cases removed without evidence beyond this share of all the baseline's cases.
    max_changed_share: float = Field(0.1, ge=0, le=1)
    # Whether a BLOCKED sibling run of the candidate's configuration blocks (the default:
    # every run of one configuration identity, whatever corpus, is evidence; "report" only
    # shows them and counts as a loosening, issue 42).
    siblings: Literal["report", "block"] = "block"
    # Tags in which any broken case (pass → fail) blocks, whatever the statistics say (seed 001:
    # "a newly_failing list with even one entry should block"): a policy choice, stricter.
    block_on_any_broken: list[str] = Field(default_factory=list)
    # A change in the model the provider served (between the runs, or against system.snapshot):
    # "warn" reports it on the first screen, "block" stops the gate.
    served_model_change: Literal["warn", "block"] = "warn"
    # Paired limits on how much a critical tag's cases may grow against their own baseline:
    # the ratio of totals for total_tokens, cost_usd and steps (1.5 = +50%), seconds per case
    # for latency_s (mean) and latency_p50_s (median) (evalkit.compare.usage_deltas).
    relative_budgets: dict[
        Literal["total_tokens", "cost_usd", "steps", "latency_s", "latency_p50_s"], float
    ] = Field(default_factory=dict)
    # The intra-group correlation of paired changes assumed when sizing a critical tag whose
    # cases carry group: and whose own data cannot estimate it (evalkit.stats.gate_power).
    assumed_icc: float = Field(0.05, ge=0, le=1)
    # Policy options for the critical tier, off by default (their operating characteristics:
    # docs/statistics.md): "holm" adjusts the critical tags' exact p-values
    # across the tags gated (family-wise rate <= alpha, less power); mid_p reads the exact
    # test's mid-p (closer to alpha, more power, no longer guaranteed <= alpha).
    critical_adjust: Literal["none", "holm"] = "none"
    mid_p: bool = False
    # Who may write the promotions, flake lists and overrides the gate trusts
    # (evalkit.provenance): base_branch, person, ref:BRANCH, who:NAME, unknown.
    trusted_writers: list[
        Annotated[str, StringConstraints(pattern=r"^(base_branch|person|unknown|ref:.+|who:.+)$")]
    ] = Field(default_factory=lambda: list(DEFAULT_TRUSTED))


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
    max_changed_share: float = 0.1
    siblings: Literal["report", "block"] = "block"
    block_on_any_broken: tuple[str, ...] = ()
    served_model_change: Literal["warn", "block"] = "warn"
    relative_budgets: tuple[tuple[str, float], ...] = ()  # (metric, allowed), sorted
    assumed_icc: float = 0.05
    critical_adjust: Literal["none", "holm"] = "none"
    mid_p: bool = False
    pass_rules: PassRules = field(default_factory=PassRules)  # replays -> one verdict per case
    trusted_writers: tuple[str, ...] = DEFAULT_TRUSTED  # evalkit.provenance.why_untrusted

    @classmethod
    def from_suite(
        cls,
        critical_tags: Sequence[str],
        gate: Mapping[str, Any] | None = None,
        budgets: Mapping[str, Any] | None = None,
        source: str = "evalkit.yaml",
        pass_rules: Mapping[str, Any] | None = None,
    ) -> GatePolicy:
        """Validate the suite's ``critical_tags``, ``gate:`` and ``budgets:`` sections (and
        the ``replays:`` pass rules, `evalkit.compare.pass_rules.PassRules.from_config`).

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
        params["block_on_any_broken"] = tuple(params["block_on_any_broken"])
        params["trusted_writers"] = tuple(params["trusted_writers"])
        params["relative_budgets"] = tuple(sorted(params["relative_budgets"].items()))
        rules = PassRules.from_config(pass_rules, f"{source}: replays")
        return cls(critical_tags=tags, budgets=tuple(specs), pass_rules=rules, **params)

    @classmethod
    def from_manifest(
        cls, policy: Mapping[str, Any], source: str = "the pinned policy"
    ) -> GatePolicy:
        """Validate a policy in its manifest form (``critical_tags``, ``gate``, ``budgets``;
        ``tiers`` only matter to `policy_changes`), as a run manifest or a promotion pins it.

        Examples:
            >>> GatePolicy.from_manifest({"critical_tags": ["billing"], "gate": {}}).alpha
            0.05
        """
        return cls.from_suite(
            policy.get("critical_tags") or (), policy.get("gate"), policy.get("budgets"), source,
            policy.get("pass_rules"),
        )  # fmt: skip

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
        from evalkit.corpus.cases import MIN_CRITICAL_CASES  # here: a decision read back from
        # a file (the gate notebook's) needs the policy's fields, not the corpus models

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

    def validate_pair(
        self,
        base_cases: pl.DataFrame,
        cand_cases: pl.DataFrame,
        selection: Mapping[str, Any] | None,
        candidate: str,
    ) -> None:
        """`validate_against` the candidate's cases; a critical tag short only because the
        candidate lacks cases the baseline ran is refused as that, not with "add cases".

        Examples:
            >>> import polars as pl
            >>> tags = lambda n: pl.DataFrame({"tags": [["billing"]] * n})
            >>> GatePolicy(critical_tags=("billing",)).validate_pair(tags(10), tags(5), None, "c1")
            Traceback (most recent call last):
            evalkit.errors.ConfigError: critical tag 'billing' has 10 cases in the baseline but ...
        """
        try:
            self.validate_against(cand_cases, selection)
        except ConfigError:
            base_n, cand_n = tag_counts(base_cases), tag_counts(cand_cases)
            short = [t for t in self.critical_tags
                     if cand_n.get(t, 0) < self.min_cases() <= base_n.get(t, 0)]  # fmt: skip
            if not short:
                raise
            tag = short[0]
            raise ConfigError(
                f"critical tag {tag!r} has {base_n[tag]} cases in the baseline but "
                f"{cand_n.get(tag, 0)} in candidate {candidate}: the candidate did not run them "
                "all (a shard not merged, a partial or stopped run); run them and gate again"
            ) from None


def is_partial(selection: Mapping[str, Any] | None) -> bool:
    """Whether a run manifest's ``selection`` ran only part of the suite (a tier or tags).

    Examples:
        >>> is_partial({"tier": "smoke", "tags": ["smoke"]}), is_partial({"tags": []})
        (True, False)
    """
    return selection is not None and any(selection.get(k) for k in ("tier", "tags", "exclude_tags"))


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
    rules = cfg.pass_rules.model_dump()
    return GatePolicy.from_suite(cfg.critical_tags, cfg.gate, cfg.budgets, str(config_path), rules)


def load_policy_dict(config_path: str | None) -> dict[str, Any] | None:
    """The gate policy of a suite config file in its manifest form (what a run records and a
    promotion pins: ``critical_tags``, ``gate``, ``budgets``, ``tiers``); None without one."""
    if not config_path:
        return None
    from evalkit.corpus.manifest import gate_policy
    from evalkit.corpus.suite import load_suite

    return gate_policy(load_suite(config_path))


@dataclass(frozen=True)
class PolicyChanges:
    """How a proposed policy differs from the pinned one, one readable line per change: the
    ``looser`` ones need a person's promotion (``baseline promote --policy``), the ``stricter``
    ones apply at once."""

    looser: tuple[str, ...] = ()
    stricter: tuple[str, ...] = ()

    @property
    def any(self) -> bool:
        """Whether the two policies differ at all."""
        return bool(self.looser or self.stricter)


#: ``gate:`` key -> (the way it loosens: "up", "down" or "any" change, why looser, why stricter).
_GATE_RULES: dict[str, tuple[str, str, str]] = {
    "alpha": ("down", "the exact test blocks less", "the exact test blocks more"),
    "tolerance": ("up", "a larger drop passes the interval rule", "a smaller drop blocks"),
    "level": ("up", "wider intervals block less", "narrower intervals block more"),
    "max_error_rate": ("up", "more errored outputs are tolerated", "fewer errors are tolerated"),
    "judge_kappa_min": ("down", "a less reliable judge may gate", "a judge needs more agreement"),
    "judge_min_labels": ("down", "a judge may gate on fewer labels", "a judge needs more labels"),
    "judge_tolerance_levels": (
        "up", "a larger judge-level drop passes", "a smaller judge-level drop blocks",
    ),
    "max_changed_share": (
        "up", "more of a critical tag may change unverified", "less of a tag may change unverified",
    ),
    "siblings": ("down", "a blocked sibling run no longer blocks", "a blocked sibling run blocks"),
    "served_model_change": (
        "down", "a served-model change no longer blocks", "a served-model change blocks",
    ),
}  # fmt: skip
_ANY_CHANGE = "any change counts: the setting could be chosen until the gate passes"
_SIBLINGS_RANK = {"report": 0, "warn": 0, "block": 1}  # siblings and served_model_change


def _rank(key: str, value: Any) -> float:
    if value is None:  # judge_tolerance_levels: null turns the rule off, the loosest setting
        return float("inf")
    if key in ("siblings", "served_model_change"):
        return float(_SIBLINGS_RANK[value])
    return float(value)


def _shown(value: Any) -> str:
    if value is None:
        return "null"
    return f"{value:g}" if isinstance(value, float) else str(value)


def policy_changes(pinned: Mapping[str, Any], proposed: Mapping[str, Any]) -> PolicyChanges:
    """How ``proposed`` changes ``pinned`` (both in the manifest form, see `load_policy_dict`),
    defaults filled in; anything not clearly stricter counts as looser.

    Raises:
        ConfigError: either policy does not validate.

    Examples:
        >>> policy_changes({"gate": {}}, {"gate": {"alpha": 0.05}}).any
        False
        >>> changes = policy_changes({"critical_tags": ["billing"]}, {"gate": {"alpha": 0.01}})
        >>> for line in changes.looser:
        ...     print(line)
        critical_tags: 'billing' dropped (looser: it no longer blocks)
        gate.alpha 0.05 → 0.01 (looser: the exact test blocks less)
    """
    old = GatePolicy.from_manifest(pinned, "the pinned policy")
    new = GatePolicy.from_manifest(proposed, "the proposed policy")
    looser = [f"critical_tags: {t!r} dropped (looser: it no longer blocks)"
              for t in old.critical_tags if t not in new.critical_tags]  # fmt: skip
    stricter = [f"critical_tags: {t!r} added (stricter: it blocks)"
                for t in new.critical_tags if t not in old.critical_tags]  # fmt: skip
    for key in _Gate.model_fields:
        was, now = getattr(old, key), getattr(new, key)
        if was == now:
            continue
        if key == "relative_budgets":  # each removed or raised limit loosens
            _relative_changes(dict(was), dict(now), looser, stricter)
            continue
        if key == "trusted_writers":  # each writer added loosens (its records excuse)
            looser += [f"gate.trusted_writers: {w!r} added (looser: its records excuse "
                       "findings)" for w in now if w not in was]  # fmt: skip
            stricter += [f"gate.trusted_writers: {w!r} dropped (stricter)" for w in was
                         if w not in now]  # fmt: skip
            continue
        if key == "block_on_any_broken":  # a list of tags: each dropped one loosens
            looser += [f"gate.block_on_any_broken: {t!r} dropped (looser: a broken case there "
                       "no longer blocks by itself)" for t in was if t not in now]  # fmt: skip
            stricter += [f"gate.block_on_any_broken: {t!r} added (stricter: any broken case "
                         "there blocks)" for t in now if t not in was]  # fmt: skip
            continue
        way, why_looser, why_stricter = _GATE_RULES.get(key, ("any", _ANY_CHANGE, ""))
        if way == "any":  # power, bootstrap_iters, bootstrap_seed
            loose, why = True, _ANY_CHANGE
        else:
            loose = (_rank(key, now) > _rank(key, was)) == (way == "up")
            why = why_looser if loose else why_stricter
        if key == "judge_tolerance_levels" and now is None:
            why = "the judge-level rule is off"
        way = "looser" if loose else "stricter"
        (looser if loose else stricter).append(
            f"gate.{key} {_shown(was)} → {_shown(now)} ({way}: {why})"
        )
    _budget_changes(old, new, looser, stricter)
    if old.pass_rules != new.pass_rules:  # the verdicts themselves change: promote it first
        looser.append(
            f"replays pass rules {old.pass_rules.describe()} → {new.pass_rules.describe()} "
            f"(looser: {_ANY_CHANGE})"
        )
    _tier_changes(pinned.get("tiers") or {}, proposed.get("tiers") or {}, looser)
    return PolicyChanges(tuple(looser), tuple(stricter))


def _budget_changes(
    old: GatePolicy, new: GatePolicy, looser: list[str], stricter: list[str]
) -> None:
    was = {b.metric: b for b in old.budgets}
    now = {b.metric: b for b in new.budgets}
    for metric in sorted(was.keys() | now.keys()):
        a, b = was.get(metric), now.get(metric)
        if b is None:
            looser.append(f"budgets.{metric} removed (looser: it is no longer limited)")
        elif a is None:
            stricter.append(f"budgets.{metric} added (stricter: limit {_shown(b.limit)}, "
                            f"{b.action})")  # fmt: skip
        else:
            if a.limit != b.limit:
                loose = b.limit > a.limit
                why = "looser: a higher mean passes" if loose else "stricter: a lower limit"
                line = f"budgets.{metric}.limit {_shown(a.limit)} → {_shown(b.limit)} ({why})"
                (looser if loose else stricter).append(line)
            if a.action != b.action:
                loose = b.action == "warn"
                why = "looser: an overrun only warns" if loose else "stricter: an overrun blocks"
                (looser if loose else stricter).append(
                    f"budgets.{metric}.action {a.action} → {b.action} ({why})"
                )


def _relative_changes(
    was: dict[str, float], now: dict[str, float], looser: list[str], stricter: list[str]
) -> None:
    for metric in sorted(was.keys() | now.keys()):
        a, b = was.get(metric), now.get(metric)
        if b is None:
            looser.append(f"gate.relative_budgets.{metric} removed (looser: growth is unlimited)")
        elif a is None:
            stricter.append(f"gate.relative_budgets.{metric} added (stricter: {_shown(b)})")
        elif a != b:
            loose = b > a
            why = "looser: more growth passes" if loose else "stricter: less growth passes"
            line = f"gate.relative_budgets.{metric} {_shown(a)} → {_shown(b)} ({why})"
            (looser if loose else stricter).append(line)


def _tier_changes(was: Mapping[str, Any], now: Mapping[str, Any], looser: list[str]) -> None:
    """Any tier added, removed or redefined is looser: a tier's baseline ran its old selection."""
    import json

    for name in sorted(was.keys() | now.keys()):
        a, b = was.get(name), now.get(name)
        if a is None:
            looser.append(f"tiers.{name} added (looser: a new selection to gate against)")
        elif b is None:
            looser.append(f"tiers.{name} removed (looser: its runs are no longer gated as it)")
        elif json.dumps(a, sort_keys=True) != json.dumps(b, sort_keys=True):
            fields = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
            what = "; ".join(f"{k} {a.get(k)} → {b.get(k)}" for k in fields)
            looser.append(f"tiers.{name} redefined: {what} (looser: its baseline ran the old one)")


def effective_policy(
    pinned: Mapping[str, Any] | None,
    proposed: Mapping[str, Any] | None,
    source: str = "evalkit.yaml",
) -> tuple[GatePolicy, PolicyChanges]:
    """The policy to decide under, and how ``proposed`` (the pull request's) changes the pin.

    No pin: the proposed policy (the default without either). A proposed policy that only
    tightens applies at once; one that loosens anything leaves the pinned policy in force (the
    caller reports the looser changes: the gate is UNVERIFIED until a person promotes them).

    Examples:
        >>> policy, changes = effective_policy({"gate": {"alpha": 0.05}}, {"gate": {"alpha": 0.1}})
        >>> policy.alpha, changes.stricter
        (0.1, ('gate.alpha 0.05 → 0.1 (stricter: the exact test blocks more)',))
    """
    if pinned is None:
        proposed_policy = GatePolicy.from_manifest(proposed, source) if proposed else GatePolicy()
        return proposed_policy, PolicyChanges()
    if proposed is None:
        return GatePolicy.from_manifest(pinned), PolicyChanges()
    changes = policy_changes(pinned, proposed)
    if changes.looser:
        return GatePolicy.from_manifest(pinned), changes
    return GatePolicy.from_manifest(proposed, source), changes


@dataclass(frozen=True)
class PinnedPolicy:
    """The policy a baseline run pins (manifest form; None when it predates pinning), and where
    it comes from, for the person reading the report."""

    policy: dict[str, Any] | None
    source: str


class _PinStore(Protocol):  # what `pinned_policy` reads of evalkit.store.Store
    def pinned_policy(self, run_id: str) -> tuple[dict[str, Any], dict[str, Any]] | None: ...

    def manifest(self, run_id: str) -> RunManifest: ...


def pinned_policy(store: _PinStore, base_run_id: str) -> PinnedPolicy:
    """The policy of the newest promotion of ``base_run_id`` that pinned one, else the one its
    manifest recorded, else none.

    Examples:
        >>> pinned_policy(store, "b1").source  # doctest: +SKIP
        'promoted by ana on 2026-12-02: v1 shipped'
    """
    promoted = store.pinned_policy(base_run_id)
    if promoted is not None:
        policy, row = promoted
        when = str(row.get("promoted_at") or "?")[:10]
        return PinnedPolicy(dict(policy), f"promoted by {row['who']} on {when}: {row['reason']}")
    recorded = store.manifest(base_run_id).gate_policy
    if recorded is not None:
        return PinnedPolicy(dict(recorded), f"recorded in baseline run {base_run_id}'s manifest")
    return PinnedPolicy(None, "none (the baseline predates policy pinning)")


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
    for tag in policy.critical_tags:
        if selected_counts is None:
            break
        if (n := selected_counts.get(tag, 0)) < policy.min_cases():
            warnings.append(
                f"critical tag {tag!r} has {n} case(s) in this selection (≥ {policy.min_cases()} "
                "gate): it is not gated on this run's selection"
            )
    return warnings

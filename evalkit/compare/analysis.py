"""From stored results to the gate's input: verdicts, the paired frame, flips and slices (Polars).

Data flows one way: outputs + scores -> replay verdicts -> case verdicts (majority over replays)
-> paired frame of two runs -> flips and per-slice statistics. Every function takes frames (so
notebooks and tests need no database); `load_comparison` is the thin wrapper over a store.

A (case, replay) is *errored* when the provider failed (``error``), a scorer could not decide,
or nothing scored it; errors are never counted as pass or fail (the runner's summary counts the
same way). Otherwise it *fails* when the runner set ``fail_reason`` or any scorer failed, and
*passes* when every scorer passed.

Examples:
    >>> import polars as pl
    >>> out = pl.DataFrame({"run_id": ["r"] * 3, "case_id": ["a"] * 3, "replay": [0, 1, 2],
    ...     "error": [None, None, "timeout"], "fail_reason": [None] * 3})
    >>> sc = pl.DataFrame({"run_id": ["r"] * 2, "case_id": ["a"] * 2, "replay": [0, 1],
    ...     "scorer": ["contains"] * 2, "score": [1.0, 0.0], "passed": [True, False],
    ...     "error": [False, False]})
    >>> verdicts(out, sc).select("case_id", "passed", "unstable", "n_error").row(0)
    ('a', False, True, 1)
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import polars as pl

from evalkit import stats
from evalkit.errors import ComparabilityError, ConfigError
from evalkit.judges.gating import (
    JudgeGating,
    gated_scores,
    judge_gating,
    judge_rows,
    ungated_scores,
)

if TYPE_CHECKING:
    from evalkit.store import Store

_KEY = ["run_id", "case_id", "replay"]
_META = ["case_hash", "tags", "criticality", "sealed"]
_USAGE = ["latency_ms", "prompt_tokens", "completion_tokens", "total_tokens", "cost_usd"]
#: Budget metrics, as named in ``evalkit.yaml`` ``budgets:``, and the verdict column behind each.
BUDGET_METRICS = dict(
    mean_latency_ms="latency_ms", mean_total_tokens="total_tokens", mean_cost_usd="cost_usd"
)


def _col(frame: pl.DataFrame, name: str, default: Any, dtype: pl.DataType) -> pl.Expr:
    return pl.col(name) if name in frame.columns else pl.lit(default, dtype=dtype).alias(name)


def _code(name: str) -> pl.Expr:
    """A string column's global categorical code: equal strings, equal codes."""
    return pl.col(name).cast(pl.Categorical).to_physical()


def _per_replay(scores: pl.DataFrame, one_run: bool) -> pl.LazyFrame:
    """Scorer counts per (run, case, replay), keyed by ``_run, _key`` (`_keys`): grouped by
    integers, so neither a million string keys are hashed nor the rows sorted (several times
    slower, and the store returns rows in the order they were written)."""
    counts = dict.fromkeys(["n_scores", "n_scorer_errors", "n_scorer_fails"], pl.Int64)
    if scores.height == 0:
        schema = {"_run": pl.UInt32, "_key": pl.UInt64} | counts | {"score": pl.Float64}
        return pl.LazyFrame(schema=schema)
    err = pl.col("error").fill_null(False) | pl.col("passed").is_null()
    return (
        scores.lazy()
        .select(
            *_keys(one_run),
            err.alias("_err"),
            pl.col("passed").fill_null(False).alias("_pass"),
            pl.col("score").fill_null(0.0).alias("_value"),
        )
        .group_by("_run", "_key")
        .agg(
            pl.len().alias("n_scores"),
            pl.col("_err").sum().alias("n_scorer_errors"),
            (~pl.col("_err") & ~pl.col("_pass")).sum().alias("n_scorer_fails"),
            pl.col("_value").filter(~pl.col("_err")).mean().alias("score"),  # null: none decided
        )
        .with_columns(pl.col(*counts).cast(pl.Int64))
    )


def _keys(one_run: bool) -> tuple[pl.Expr, pl.Expr]:
    """``_run`` (run_id's global categorical code; 0 when ``one_run``: every row has the same
    run_id) and ``_key`` ((case_id, replay) as one integer): joins and group-bys hash integers,
    not strings."""
    code = _code("case_id").cast(pl.UInt64)
    key = (code * (1 << 20) + pl.col("replay").cast(pl.UInt64)).alias("_key")
    run = pl.lit(0, pl.UInt32) if one_run else _code("run_id")
    return run.alias("_run"), key


def _one_run(*frames: pl.DataFrame) -> bool:
    """Whether every row of ``frames`` has one and the same run_id (min = max: no hashing)."""
    bounds: set[str] = set()
    for frame in frames:
        if frame.height:
            run = pl.col("run_id")
            bounds.update(frame.select(run.min().alias("lo"), run.max().alias("hi")).row(0))
    return len(bounds) <= 1


def replay_verdicts(outputs: pl.DataFrame, scores: pl.DataFrame) -> pl.DataFrame:
    """One row per (run, case, replay): ``passed`` (null when errored) and ``errored``.

    ``score`` is the mean of the scorers that decided; usage columns are carried through.

    Examples:
        >>> out = pl.DataFrame({"run_id": ["r"], "case_id": ["a"], "replay": [0],
        ...     "error": [None], "fail_reason": ["unexpected tool call x()"]})
        >>> sc = out.select("run_id", "case_id", "replay").with_columns(scorer=pl.lit("s"),
        ...     score=pl.lit(1.0), passed=pl.lit(True), error=pl.lit(False))
        >>> replay_verdicts(out, sc).select("passed", "errored").row(0)
        (False, False)
    """
    usage = [_col(outputs, c, None, pl.Float64) for c in _USAGE if c != "total_tokens"]
    one_run = _one_run(outputs, scores)
    out = (
        outputs.lazy()
        .select(
            "run_id",
            "case_id",
            pl.col("replay").cast(pl.Int64),
            _col(outputs, "error", None, pl.String).alias("output_error"),
            _col(outputs, "fail_reason", None, pl.String),
            *usage,
        )
        .with_columns(*_keys(one_run))
        .join(_per_replay(scores, one_run), on=["_run", "_key"], how="left", maintain_order="left")
        .with_columns(pl.col("n_scores", "n_scorer_errors", "n_scorer_fails").fill_null(0))
    )
    errored = pl.col("output_error").is_not_null() | (pl.col("n_scorer_errors") > 0)
    failed = pl.col("fail_reason").is_not_null() | (pl.col("n_scorer_fails") > 0)
    unscored = pl.col("n_scores") == 0
    passed = pl.when(errored).then(None).when(failed).then(False).when(unscored).then(None)
    passed = passed.otherwise(True)
    return (
        out.with_columns(
            passed.alias("passed"),
            (pl.col("prompt_tokens") + pl.col("completion_tokens")).alias("total_tokens"),
        )
        .with_columns(pl.col("passed").is_null().alias("errored"))
        .select(*_KEY, "passed", "errored", "output_error", "fail_reason", "score", *_USAGE)
        .collect()
    )


def verdicts(
    outputs: pl.DataFrame, scores: pl.DataFrame, cases: pl.DataFrame | None = None
) -> pl.DataFrame:
    """One verdict per (run, case): majority over decided replays, ties fail.

    ``passed`` is null and ``error`` true when every replay errored; ``unstable`` is true when
    decided replays disagree. With ``cases``, every case of the run appears (a case with no
    output is an error) and its ``case_hash, tags, criticality, sealed`` are attached.

    Examples:
        >>> out = pl.DataFrame({"run_id": ["r"] * 2, "case_id": ["a"] * 2, "replay": [0, 1],
        ...     "error": [None, None], "fail_reason": [None, None]})
        >>> sc = out.select("run_id", "case_id", "replay").with_columns(scorer=pl.lit("s"),
        ...     score=pl.Series([1.0, 0.0]), passed=pl.Series([True, False]), error=pl.lit(False))
        >>> verdicts(out, sc).select("passed", "unstable", "n_pass", "n_fail").row(0)
        (False, True, 1, 1)
    """
    per_case = (
        replay_verdicts(outputs, scores)
        .lazy()
        .group_by("run_id", "case_id")  # ~100k groups: hashing their strings is cheap
        .agg(
            pl.len().alias("n_replays"),
            pl.col("passed").sum().cast(pl.Int64).alias("n_pass"),
            (pl.col("passed") == False).sum().cast(pl.Int64).alias("n_fail"),  # noqa: E712
            pl.col("errored").sum().cast(pl.Int64).alias("n_error"),
            pl.col("score").mean(),  # null for errored replays
            *[pl.col(c).cast(pl.Float64).mean() for c in _USAGE],
        )
    )
    if cases is not None:
        meta = cases.lazy().select("run_id", "case_id", *_META)
        per_case = meta.join(per_case, on=["run_id", "case_id"], how="left").with_columns(
            pl.col("n_replays", "n_pass", "n_fail", "n_error").fill_null(0)
        )
    return (
        per_case.with_columns((pl.col("n_pass") + pl.col("n_fail") == 0).alias("error"))
        .with_columns(
            pl.when(pl.col("n_pass") + pl.col("n_fail") > 0)
            .then(pl.col("n_pass") > pl.col("n_fail"))
            .alias("passed"),
            ((pl.col("n_pass") > 0) & (pl.col("n_fail") > 0)).alias("unstable"),
        )
        .sort("run_id", "case_id")
        .collect()
    )


def run_verdicts(store: Store, ref: str) -> pl.DataFrame:
    """Per-case verdicts of a stored run (a run id or label), as :func:`verdicts` computes them.

    Examples:
        >>> run_verdicts(open_store("data/demo.duckdb"), "candidate")  # doctest: +SKIP
    """
    run_id = store.resolve_run(ref)
    return verdicts(store.outputs(run_id), store.scores(run_id), store.cases(run_id))


def case_changes(base_cases: pl.DataFrame, cand_cases: pl.DataFrame) -> pl.DataFrame:
    """Cases that cannot be paired: ``edited`` (hash differs), ``added`` or ``removed``.

    Examples:
        >>> b = pl.DataFrame({"case_id": ["a", "b"], "case_hash": ["1", "2"], "source": ["x", "y"]})
        >>> c = pl.DataFrame({"case_id": ["b", "c"], "case_hash": ["9", "3"], "source": ["y", "z"]})
        >>> case_changes(b, c).select("case_id", "change").rows()
        [('a', 'removed'), ('b', 'edited'), ('c', 'added')]
    """
    b = base_cases.select("case_id", pl.col("case_hash").alias("base_hash"), "source")
    c = cand_cases.select("case_id", pl.col("case_hash").alias("cand_hash"), "source")
    both = b.join(c, on="case_id", how="full", coalesce=True, suffix="_cand")
    bh, ch = pl.col("base_hash"), pl.col("cand_hash")
    change = pl.when(bh.is_null()).then(pl.lit("added")).when(ch.is_null()).then(pl.lit("removed"))
    change = change.when(bh != ch).then(pl.lit("edited")).alias("change")
    return (
        both.with_columns(change, pl.coalesce("source_cand", "source").alias("source"))
        .filter(pl.col("change").is_not_null())
        .select("case_id", "change", "base_hash", "cand_hash", "source")
        .sort("case_id")
    )


def paired_frame(
    base_verdicts: pl.DataFrame,
    cand_verdicts: pl.DataFrame,
    base_cases: pl.DataFrame,
    cand_cases: pl.DataFrame,
) -> pl.DataFrame:
    """The gate's input: one row per case present, unedited, in both runs.

    Columns: ``case_id, tags, criticality, sealed, base, cand`` (null when that side errored),
    ``base_score, cand_score, base_error, cand_error, base_unstable, cand_unstable`` and the
    usage means ``base_latency_ms ... cand_cost_usd``. Edited cases never pair (`case_changes`).

    Examples:
        >>> cases = pl.DataFrame({"case_id": ["a"], "case_hash": ["h"], "tags": [["billing"]],
        ...     "criticality": ["normal"], "sealed": [False]})
        >>> v = pl.DataFrame({"case_id": ["a"], "passed": [True], "score": [1.0],
        ...     "error": [False], "unstable": [False]})
        >>> p = paired_frame(v, v.with_columns(passed=False), cases, cases)
        >>> p.select("base", "cand").row(0)
        (True, False)
    """
    base_hashes = base_cases.select("case_id", pl.col("case_hash").alias("_bh"))
    frame = cand_cases.select("case_id", *_META).join(base_hashes, on="case_id")
    frame = frame.filter(pl.col("case_hash") == pl.col("_bh")).drop("_bh")
    for side, v in (("base", base_verdicts), ("cand", cand_verdicts)):
        usage = [pl.col(c).alias(f"{side}_{c}") for c in _USAGE if c in v.columns]
        named = [pl.col(c).alias(f"{side}_{c}") for c in ("score", "error", "unstable")]
        side_cols = v.select("case_id", pl.col("passed").alias(side), *named, *usage)
        frame = frame.join(side_cols, on="case_id", how="left").with_columns(
            pl.col(f"{side}_error").fill_null(True), pl.col(f"{side}_unstable").fill_null(False)
        )
    first = ["case_id", "tags", "criticality", "sealed", "base", "cand"]
    return frame.select(*first, pl.exclude(*first, "case_hash")).sort("case_id")


class Flips(NamedTuple):
    """Cases that changed verdict: ``broken`` (pass -> fail) and ``fixed`` (fail -> pass)."""

    broken: pl.DataFrame
    fixed: pl.DataFrame


def flips(paired: pl.DataFrame) -> Flips:
    """Split the paired frame's flips; errored sides are never flips.

    Examples:
        >>> p = pl.DataFrame({"case_id": ["a", "b", "c"], "base": [True, False, None],
        ...     "cand": [False, True, False]})
        >>> broken, fixed = flips(p)
        >>> broken["case_id"].to_list(), fixed["case_id"].to_list()
        (['a'], ['b'])
    """
    return Flips(
        paired.filter(pl.col("base") & ~pl.col("cand")),
        paired.filter(~pl.col("base") & pl.col("cand")),
    )


_RATES = ["base_pass", "base_lo", "base_hi", "cand_pass", "cand_lo", "cand_hi"]
_DIFFS = ["diff", "diff_lo", "diff_hi", "p_value"]
_SLICE_SCHEMA: dict[str, Any] = {"slice": pl.String, "n": pl.Int64, "n_error": pl.Int64}
_SLICE_SCHEMA |= dict.fromkeys(_RATES, pl.Float64) | {"broken": pl.Int64, "fixed": pl.Int64}
_SLICE_SCHEMA |= dict.fromkeys(_DIFFS, pl.Float64) | {"interval_method": pl.String}
#: How ``diff_lo, diff_hi`` are computed for pass/fail verdicts (`stats.paired_diff_interval`):
#: Tango's score interval, reaching 0 where the exact McNemar test finds no evidence.
INTERVAL_METHOD = "tango-exact"


def _per_slice(paired: pl.DataFrame) -> pl.DataFrame:
    rows = paired.select(
        pl.col("tags").cast(pl.List(pl.String)).alias("slice"),
        (pl.col("base_error") | pl.col("cand_error")).alias("err"),
        pl.col("base").fill_null(False).alias("b"),
        pl.col("cand").fill_null(False).alias("c"),
    )
    long = pl.concat(
        [rows.explode("slice").drop_nulls("slice"), rows.with_columns(slice=pl.lit("ALL"))]
    )
    ok = ~pl.col("err")
    return long.group_by("slice").agg(
        ok.sum().cast(pl.Int64).alias("n"),
        pl.col("err").sum().cast(pl.Int64).alias("n_error"),
        (pl.col("b") & ok).sum().cast(pl.Int64).alias("base_k"),
        (pl.col("c") & ok).sum().cast(pl.Int64).alias("cand_k"),
        (pl.col("b") & ~pl.col("c") & ok).sum().cast(pl.Int64).alias("broken"),
        (~pl.col("b") & pl.col("c") & ok).sum().cast(pl.Int64).alias("fixed"),
    )


def slice_stats(
    n: int, base_k: int, cand_k: int, broken: int, fixed: int, iters: int = 10_000, **kw: Any
) -> dict[str, Any]:
    """Pass rates with Wilson intervals, an interval for the paired difference, one-sided McNemar.

    The difference's interval is `stats.paired_diff_interval` ("tango-exact", named in
    ``interval_method``): nominal coverage at small n, and ``diff_hi < 0`` only where the exact
    one-sided McNemar p <= (1 - level) / 2, so an interval block never fires where the exact test
    sees no evidence (the percentile bootstrap gave 4 broken of 8 an upper bound of -12.5 points
    at p = 0.0625, and no flips the point [0, 0]). ``kw``: ``level`` (default 0.95); ``iters``
    and ``seed`` are accepted for callers that still pass them (pass/fail needs no resampling).
    n = 0 gives None statistics.

    Examples:
        >>> s = slice_stats(100, 92, 84, broken=8, fixed=0)
        >>> round(s["diff"], 2), round(s["p_value"], 4), round(s["diff_hi"], 3)
        (-0.08, 0.0039, -0.04)
        >>> s["interval_method"]
        'tango-exact'
        >>> slice_stats(8, 8, 4, broken=4, fixed=0)["diff_hi"]  # p = 0.0625: no evidence
        0.0
    """
    out: dict[str, Any] = dict.fromkeys(_RATES + _DIFFS) | {"broken": broken, "fixed": fixed}
    out["interval_method"] = None
    if n == 0:
        return out
    level = kw.get("level", 0.95)
    for side, k in (("base", base_k), ("cand", cand_k)):
        lo, hi = stats.wilson_interval(k, n, level)
        out |= {f"{side}_pass": k / n, f"{side}_lo": lo, f"{side}_hi": hi}
    diff = stats.paired_diff_interval(broken, fixed, n, level, INTERVAL_METHOD)
    p = stats.mcnemar_exact(broken, fixed, "greater")
    out["interval_method"] = diff.method
    return out | dict(zip(_DIFFS, (diff.diff, diff.lo, diff.hi, p), strict=True))


def slices(
    paired: pl.DataFrame, iters: int = 10_000, seed: int = 0, level: float = 0.95
) -> pl.DataFrame:
    """Per-tag statistics plus an ``ALL`` row (last); cases errored on either side are excluded
    from ``n`` and counted in ``n_error``. ``p_value`` is one-sided (candidate breaks more);
    ``diff_lo, diff_hi`` are `slice_stats`' small-n interval, its method in ``interval_method``.

    Examples:
        >>> p = pl.DataFrame({"case_id": list("abcd"), "tags": [["x"]] * 4,
        ...     "base": [True] * 4, "cand": [False] * 4, "base_error": [False] * 4,
        ...     "cand_error": [False] * 4})
        >>> slices(p).select("slice", "n", "broken", "p_value", "diff_hi").rows()
        [('x', 4, 4, 0.0625, 0.0), ('ALL', 4, 4, 0.0625, 0.0)]
    """
    counts = _per_slice(paired).sort(pl.col("slice") == "ALL", "slice")
    rows = []
    for r in counts.iter_rows(named=True):  # one iteration per slice, not per case
        k = (r["n"], r["base_k"], r["cand_k"], r["broken"], r["fixed"])
        s = slice_stats(*k, iters, seed=seed, level=level)
        rows.append({"slice": r["slice"], "n": r["n"], "n_error": r["n_error"], **s})
    return pl.DataFrame(rows, schema=_SLICE_SCHEMA)


def _short(value: Any, width: int = 24) -> str:
    text = json.dumps(value, sort_keys=True, default=str) if not isinstance(value, str) else value
    return text if len(text) <= width else text[: width - 1] + "…"


def _leaf_diffs(a: Any, b: Any, path: str) -> Iterable[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            yield from _leaf_diffs(a.get(key), b.get(key), f"{path}.{key}")
    elif a != b:
        yield f"{path} {_short(a)} → {_short(b)}"


def check_comparable(
    base_manifest: dict[str, Any], cand_manifest: dict[str, Any], allow_diff: Sequence[str] = ()
) -> list[str]:
    """The comparable manifest fields that differ; refuse what the declaration does not cover.

    Without ``allow_diff`` one differing field is the variable under test and more are refused.
    With ``allow_diff`` (``--allow-diff FIELD``, the declared variables under test) every
    differing field must be declared: ``--allow-diff prompt`` refuses a pair that differs in
    ``model``. A declared field that does not differ is a warning (:func:`comparability_warnings`).

    Raises:
        ComparabilityError: naming each differing field and its values.
        ConfigError: ``allow_diff`` names a field that is not a comparable manifest field.

    Examples:
        >>> check_comparable({"model": "a", "prompt": "p"}, {"model": "b", "prompt": "p"})
        ['model']
    """
    from evalkit.corpus.suite import COMPARABLE_FIELDS, manifest_diff

    unknown = sorted(set(allow_diff) - set(COMPARABLE_FIELDS))
    if unknown:
        raise ConfigError(
            f"--allow-diff: unknown manifest field(s) {', '.join(unknown)}; "
            f"comparable fields are {', '.join(COMPARABLE_FIELDS)}"
        )
    differing = manifest_diff(base_manifest, cand_manifest)
    undeclared = [f for f in differing if f not in allow_diff]
    if undeclared and (allow_diff or len(differing) > 1):
        details = "; ".join(
            next(iter(_leaf_diffs(base_manifest.get(f), cand_manifest.get(f), f)), f)
            for f in differing
        )
        flags = " ".join(f"--allow-diff {f}" for f in undeclared)
        declared = f" (declared: {', '.join(allow_diff)})" if allow_diff else ""
        raise ComparabilityError(
            f"refusing to compare: the runs' manifests differ in {len(differing)} field(s) "
            f"({', '.join(differing)}){declared}: {details}; compare runs that differ only in "
            f"the variable under test, or declare the other differences with {flags}"
        )
    return differing


def comparability_warnings(differing: Sequence[str], allow_diff: Sequence[str]) -> list[str]:
    """A warning per declared variable under test that did not change between the runs.

    Examples:
        >>> comparability_warnings(["prompt"], ["prompt", "model"])
        ['--allow-diff model: the runs do not differ in model (is this the pair you meant?)']
    """
    return [
        f"--allow-diff {f}: the runs do not differ in {f} (is this the pair you meant?)"
        for f in allow_diff
        if f not in differing
    ]


def usage_means(v: pl.DataFrame) -> dict[str, float | None]:
    """Budget metrics of one run's verdicts: mean latency, total tokens and cost per case.

    Examples:
        >>> usage_means(pl.DataFrame({"latency_ms": [100.0, 300.0], "total_tokens": [10, 30],
        ...     "cost_usd": [0.1, 0.3]}))["mean_latency_ms"]
        200.0
    """
    means = {
        m: v[c].cast(pl.Float64).mean() if c in v.columns else None
        for m, c in BUDGET_METRICS.items()
    }
    return {m: None if x is None else float(x) for m, x in means.items()}  # type: ignore[arg-type]


@dataclass(frozen=True)
class RunData:
    """One run's frames as the store returns them (see the data contract in `evalkit.store`);
    `load_run` reads outputs and scores in storage order (not sorted)."""

    run_id: str
    label: str
    manifest: dict[str, Any]
    cases: pl.DataFrame
    outputs: pl.DataFrame
    scores: pl.DataFrame

    @property
    def config_hash(self) -> str | None:
        return self.manifest.get("config_hash")


@dataclass(frozen=True)
class Comparison:
    """Everything a gate, a report or a notebook needs about one baseline/candidate pair."""

    base: RunData
    cand: RunData
    manifest_diff: tuple[str, ...]
    base_verdicts: pl.DataFrame
    cand_verdicts: pl.DataFrame
    paired: pl.DataFrame
    changes: pl.DataFrame
    judge_notes: tuple[str, ...] = ()  # judge checks reported but not gated, and why
    warnings: tuple[str, ...] = ()  # for the person reading the report (comparability, runs)

    # Verdicts of the judge checks that may not gate (uncalibrated), paired like ``paired``:
    # their flips are reported, labelled "judge not calibrated — reported, not gated".
    judge_paired: pl.DataFrame | None = None

    def _repr_html_(self) -> str:
        """Jupyter shows the pair's runs and its per-slice table (percentages, 3-digit p)."""
        from html import escape

        from evalkit.compare.tables import slice_table  # great_tables: only when displayed

        head = (
            f"<p><b>{escape(self.base.label)}</b> ({escape(self.base.run_id)}) → "
            f"<b>{escape(self.cand.label)}</b> ({escape(self.cand.run_id)}): "
            f"{self.paired.height} paired cases</p>"
        )
        return head + slice_table(slices(self.paired)).as_raw_html()


def compare(
    base: RunData,
    cand: RunData,
    allow_diff: Sequence[str] = (),
    gating: JudgeGating | None = None,
) -> Comparison:
    """Check comparability, then build verdicts, the paired frame and the case changes.

    With ``gating``, verdicts ignore the judge checks that may not gate (uncalibrated judges);
    their scores stay in ``base.scores``/``cand.scores`` for the report.
    """
    differing = check_comparable(base.manifest, cand.manifest, allow_diff)
    base_scores, cand_scores = base.scores, cand.scores
    judge_paired = None
    if gating is not None and not all(check.gating for check in gating.checks):
        base_scores, cand_scores = (
            gated_scores(base_scores, gating),
            gated_scores(cand_scores, gating),
        )
        judge_paired = _ungated_judge_paired(base, cand, gating)
    bv = verdicts(base.outputs, base_scores, base.cases)
    cv = verdicts(cand.outputs, cand_scores, cand.cases)
    paired, changes = (
        paired_frame(bv, cv, base.cases, cand.cases),
        case_changes(base.cases, cand.cases),
    )
    if judge_paired is not None:
        # A case whose every check is an ungated judge has nothing that may gate: it is not
        # errored (its outputs exist); it leaves the gated pairing and is reported instead.
        scored = pl.concat([base_scores["case_id"], cand_scores["case_id"]]).unique()
        failed = pl.concat(
            [r.outputs.filter(pl.col("error").is_not_null())["case_id"] for r in (base, cand)]
        )
        paired = paired.filter(
            pl.col("case_id").is_in(scored.implode()) | pl.col("case_id").is_in(failed.implode())
        )
    notes = tuple(gating.reasons) if gating is not None else ()
    warnings = [*comparability_warnings(differing, allow_diff)]
    for run, role in ((base, "baseline"), (cand, "candidate")):
        warnings += [f"{role} run: {w}" for w in run.manifest.get("warnings") or ()]
    return Comparison(
        base, cand, tuple(differing), bv, cv, paired, changes, notes, tuple(warnings), judge_paired
    )


def _ungated_judge_paired(base: RunData, cand: RunData, gating: JudgeGating) -> pl.DataFrame:
    """The paired frame of the judge checks that may not gate, on the cases they scored."""
    judged = [ungated_scores(run.scores, gating) for run in (base, cand)]
    sides = [verdicts(r.outputs, s, r.cases) for r, s in zip((base, cand), judged, strict=True)]
    frame = paired_frame(*sides, base.cases, cand.cases)
    return frame.filter(
        pl.col("case_id").is_in(pl.concat([s["case_id"] for s in judged]).implode())
    )


def load_run(store: Store, ref: str) -> RunData:
    """A run's frames from the store; ``ref`` is a run id, a unique prefix or a label."""
    run_id = store.resolve_run(ref)
    runs = store.runs().filter(pl.col("run_id") == run_id)
    label = runs["label"][0] if runs.height else ref
    # In storage order: verdicts group the rows themselves, faster than the store can sort them.
    outputs, scores = store.outputs(run_id, ordered=False), store.scores(run_id, ordered=False)
    return RunData(run_id, label, store.manifest(run_id), store.cases(run_id), outputs, scores)


def load_comparison(
    store: Store,
    baseline: str,
    candidate: str,
    allow_diff: Sequence[str] = (),
    judge_kappa_min: float = 0.6,
    judge_min_labels: int = 100,
) -> Comparison:
    """`compare` two runs read from the store; judge checks gate only where the store holds a
    calibration record for that judge model, snapshot, prompt version and rubric on at least
    ``judge_min_labels`` items whose kappa interval's lower bound is ≥ ``judge_kappa_min``.

    Examples:
        >>> cmp = load_comparison(open_store("x.duckdb"), "base", "cand")  # doctest: +SKIP
        >>> flips(cmp.paired).broken.height                              # doctest: +SKIP
        12
    """
    base, cand = load_run(store, baseline), load_run(store, candidate)
    judged = [run.scores.filter(judge_rows(run.scores)) for run in (base, cand)]
    both = pl.concat(judged, how="diagonal_relaxed")  # judge rows only: not 3M score rows
    gating = judge_gating(both, store.calibrations(), judge_kappa_min, judge_min_labels)
    return compare(base, cand, allow_diff, gating)

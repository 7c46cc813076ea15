"""Verdicts: per (case, replay), then per case by majority over replays or the suite's
replay pass rules (`evalkit.compare.pass_rules`) (Polars).

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

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import polars as pl

from evalkit.compare.pass_rules import PassRules

if TYPE_CHECKING:
    from evalkit.store import Store

_KEY = ["run_id", "case_id", "replay"]
#: Case columns every verdict frame carries, and the usage columns averaged per case.
CASE_META = ["case_hash", "tags", "criticality", "sealed"]
USAGE_COLUMNS = [
    "latency_ms", "prompt_tokens", "completion_tokens", "total_tokens", "cost_usd", "steps",
]  # fmt: skip
#: Cases `verdicts` decides at once: a million outputs' replay verdicts, joins and groups
#: at once grew the process by several times their own size.
VERDICT_CASES = 50_000
#: Budget metrics, as named in ``evalkit.yaml`` ``budgets:``, and the verdict column behind each.
BUDGET_METRICS = dict(
    mean_latency_ms="latency_ms", mean_total_tokens="total_tokens", mean_cost_usd="cost_usd"
)


def _col(
    frame: pl.DataFrame, name: str, default: Any, dtype: pl.DataType | type[pl.DataType]
) -> pl.Expr:
    return pl.col(name) if name in frame.columns else pl.lit(default, dtype=dtype).alias(name)


def _code(name: str) -> pl.Expr:
    """A string column's global categorical code: equal strings, equal codes (for columns of
    few distinct values: the global categories keep every string they saw)."""
    return pl.col(name).cast(pl.Categorical).to_physical()


def _case_codes(*frames: pl.DataFrame) -> pl.Series:
    """The case ids of ``frames``, sorted, once each: a case's code is its position here
    (`_keys`), exact and local to these frames. (A categorical code kept every one of a
    million ids in Polars' global categories for the rest of the process.)"""
    ids = [frame["case_id"].cast(pl.String) for frame in frames if frame.height]
    return pl.concat(ids).unique().sort() if ids else pl.Series("case_id", [], pl.String)


def _per_replay(scores: pl.DataFrame, one_run: bool, codes: pl.Series) -> pl.LazyFrame:
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
            *_keys(one_run, codes),
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


def _keys(one_run: bool, codes: pl.Series) -> tuple[pl.Expr, pl.Expr]:
    """``_run`` (run_id's global categorical code; 0 when ``one_run``: every row has the same
    run_id) and ``_key`` ((case_id, replay) as one integer; the case's code its position in
    ``codes``, `_case_codes`): joins and group-bys hash integers, not strings."""
    code = pl.lit(codes).search_sorted(pl.col("case_id").cast(pl.String)).cast(pl.UInt64)
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
    usage = [_col(outputs, c, None, pl.Float64) for c in USAGE_COLUMNS if c != "total_tokens"]
    one_run = _one_run(outputs, scores)
    codes = _case_codes(outputs, scores)
    per_replay = _per_replay(scores, one_run, codes)
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
        .with_columns(*_keys(one_run, codes))
        .join(per_replay, on=["_run", "_key"], how="left", maintain_order="left")
        .with_columns(pl.col("n_scores", "n_scorer_errors", "n_scorer_fails").fill_null(0))
    )
    errored = pl.col("output_error").is_not_null() | (pl.col("n_scorer_errors") > 0)
    failed = pl.col("fail_reason").is_not_null() | (pl.col("n_scorer_fails") > 0)
    unscored = pl.col("n_scores") == 0
    undecided = pl.when(errored).then(None).when(failed).then(False).when(unscored).then(None)
    passed = undecided.otherwise(True)
    return (
        out.with_columns(
            passed.alias("passed"),
            (pl.col("prompt_tokens") + pl.col("completion_tokens")).alias("total_tokens"),
        )
        .with_columns(pl.col("passed").is_null().alias("errored"))
        .select(*_KEY, "passed", "errored", "output_error", "fail_reason", "score", *USAGE_COLUMNS)
        .collect()
    )


def verdicts(
    outputs: pl.DataFrame,
    scores: pl.DataFrame,
    cases: pl.DataFrame | None = None,
    rules: PassRules | None = None,
    *,
    scores_of: Callable[[str | None, str | None], pl.DataFrame] | None = None,
    outputs_of: Callable[[str | None, str | None], pl.DataFrame] | None = None,
) -> pl.DataFrame:
    """One verdict per (run, case): majority over decided replays, ties fail, unless ``rules``
    (`evalkit.compare.pass_rules.PassRules`, the suite's ``replays:`` rules) say otherwise for
    the case or its tags (tag rules need ``cases``, which carries the tags).

    ``passed`` is null and ``error`` true unless more than half of its replays were decided
    (`undecided_case`: 1 pass and 4 errored replays is no pass); ``unstable`` is true when
    decided replays disagree. With ``cases``, every case of the run appears (a case with no
    output is an error) and its ``case_hash, tags, criticality, sealed`` are attached.

    A case's verdict reads only its own rows: past :data:`VERDICT_CASES` cases, they are
    decided a range of case ids at a time, so what the grouping holds at once is bounded by
    the range, not the run (the same figures, case by case). ``scores_of(low, high)``, when
    given, reads the score rows of the case ids from ``low`` (inclusive) up to ``high``
    (exclusive; None: unbounded) in their stored order, in place of ``scores`` (a thin run's
    scores stay in the store: `evalkit.compare.analysis.verdicts_of`); ``outputs_of`` the same
    for the output rows (``outputs`` then only names the run's case ids: a thin run holds its
    outputs without the usage figures, which only verdicts read).

    Examples:
        >>> out = pl.DataFrame({"run_id": ["r"] * 2, "case_id": ["a"] * 2, "replay": [0, 1],
        ...     "error": [None, None], "fail_reason": [None, None]})
        >>> sc = out.select("run_id", "case_id", "replay").with_columns(scorer=pl.lit("s"),
        ...     score=pl.Series([1.0, 0.0]), passed=pl.Series([True, False]), error=pl.lit(False))
        >>> verdicts(out, sc).select("passed", "unstable", "n_pass", "n_fail").row(0)
        (False, True, 1, 1)
    """
    ids = _case_ids(outputs, cases)
    if ids.len() <= VERDICT_CASES:
        # one chunk, however Polars' sort left it: a mean over the frame (budgets) sums it in
        # one order, whether it was decided in one pass or in ranges
        scores = scores if scores_of is None else scores_of(None, None)
        outputs = outputs if outputs_of is None else outputs_of(None, None)
        return _shared_meta(_verdicts(outputs, scores, cases, rules).rechunk(), cases)
    bounds = ids.gather_every(VERDICT_CASES).to_list()
    # one run's cases, each once in order: every range's case columns are those rows of
    # ``cases``, attached once after stacking instead of held and copied range by range
    lean = _one_run_in_order(cases)
    parts = []
    for i, low in enumerate(bounds):
        high = bounds[i + 1] if i + 1 < len(bounds) else None
        share = pl.col("case_id") >= low
        if high is not None:
            share = share & (pl.col("case_id") < high)
        mine = None if cases is None else cases.filter(share)
        held = scores.filter(share) if scores_of is None else scores_of(low, high)
        answered = outputs.filter(share) if outputs_of is None else outputs_of(low, high)
        part = _verdicts(answered, held, mine, rules)
        parts.append(part.drop(CASE_META) if lean else part)
    # each range sorted, the ranges in order: one run's verdicts are in order as they are
    # (a sort of the whole would hold a second copy of them); several runs' are sorted
    if not _one_run(*parts):
        joined = pl.concat(parts, how="vertical", rechunk=False)
        return _shared_meta(joined.sort("run_id", "case_id").rechunk(), cases)
    stacked = _stacked(parts)
    if lean and cases is not None:
        for at, name in enumerate(CASE_META, 2):
            stacked = stacked.insert_column(at, cases.get_column(name))
    return _shared_meta(stacked, cases)


def _one_run_in_order(cases: pl.DataFrame | None) -> bool:
    """Whether ``cases`` are one run's, each case once in order, with every `CASE_META`
    column: its verdicts' rows are its rows, in its order.

    Examples:
        >>> cases = pl.DataFrame({"run_id": ["r", "r"], "case_id": ["a", "b"],
        ...     "case_hash": ["h"] * 2, "tags": [["x"]] * 2, "criticality": ["normal"] * 2,
        ...     "sealed": [False] * 2})
        >>> _one_run_in_order(cases), _one_run_in_order(cases.reverse())
        (True, False)
    """
    if cases is None or not {"run_id", "case_id", *CASE_META} <= set(cases.columns):
        return False
    runs = cases.get_column("run_id")
    return runs.null_count() == 0 and runs.n_unique() == 1 and strictly_increasing(cases["case_id"])


def _stacked(parts: list[pl.DataFrame]) -> pl.DataFrame:
    """``parts`` one above the other, each column in one chunk (as ``rechunk`` leaves it),
    copied a column at a time: the parts' copy of each column is let go once it is copied, so
    what is held at once is the result and one column more, not twice the result. Empties
    ``parts``.

    Examples:
        >>> parts = [pl.DataFrame({"a": [1], "b": ["x"]}), pl.DataFrame({"a": [2], "b": ["y"]})]
        >>> _stacked(parts).rows(), parts
        ([(1, 'x'), (2, 'y')], [])
    """
    columns = []
    for name in parts[0].columns:
        columns.append(pl.concat([part.get_column(name) for part in parts], rechunk=True))
        parts[:] = [part.drop(name) for part in parts]
    parts.clear()
    return pl.DataFrame(columns)


def _shared_meta(decided: pl.DataFrame, cases: pl.DataFrame | None) -> pl.DataFrame:
    """``decided`` with its case columns (ids, hashes, tags, ...) those of ``cases`` itself
    when both hold the same cases in the same order: one copy of a million cases' tags is
    held, not one more per verdict frame.

    Examples:
        >>> cases = pl.DataFrame({"run_id": ["r"], "case_id": ["a"], "case_hash": ["h"],
        ...     "tags": [["x"]], "criticality": ["normal"], "sealed": [False]})
        >>> _shared_meta(cases.with_columns(passed=pl.lit(True)), cases).columns[-1]
        'passed'
    """
    shared = ["run_id", "case_id", *CASE_META]
    if cases is None or cases.height != decided.height or not set(shared) <= set(cases.columns):
        return decided
    if not all(decided[c].dtype == cases[c].dtype for c in shared):
        return decided
    ids = cases["case_id"]
    if not strictly_increasing(ids):  # each case once, in order
        return decided
    if not (decided["case_id"].equals(ids) and decided["run_id"].equals(cases["run_id"])):
        return decided
    return decided.with_columns(cases.get_column(c) for c in shared)


def strictly_increasing(ids: pl.Series) -> bool:
    """Whether ``ids`` are sorted, each once and none null: one run's cases as read.

    Examples:
        >>> strictly_increasing(pl.Series(["a", "b"])), strictly_increasing(pl.Series(["a", "a"]))
        (True, False)
    """
    return ids.null_count() == 0 and bool((ids.head(-1) < ids.tail(-1)).all())


def _case_ids(outputs: pl.DataFrame, cases: pl.DataFrame | None) -> pl.Series:
    """Every case id the verdicts will have, sorted (once each)."""
    if cases is not None:  # the verdicts are the cases' (an output of no case is left out)
        ids = cases["case_id"]
        # one run's cases in order: no hashing of a million ids to find them unique
        return ids if strictly_increasing(ids) else ids.unique().sort()
    return outputs["case_id"].unique().sort()


def _verdicts(
    outputs: pl.DataFrame,
    scores: pl.DataFrame,
    cases: pl.DataFrame | None,
    rules: PassRules | None,
) -> pl.DataFrame:
    """`verdicts` of one share of the cases (all of them, or one range of their ids)."""
    per_case = (
        replay_verdicts(outputs, scores)
        .lazy()
        .group_by("run_id", "case_id")  # one group a case: hashing their strings is cheap
        .agg(
            pl.len().alias("n_replays"),
            pl.col("passed").sum().cast(pl.Int64).alias("n_pass"),
            (pl.col("passed") == False).sum().cast(pl.Int64).alias("n_fail"),  # noqa: E712
            pl.col("errored").sum().cast(pl.Int64).alias("n_error"),
            pl.col("score").mean(),  # null for errored replays
            *[pl.col(c).cast(pl.Float64).mean() for c in USAGE_COLUMNS],
        )
    )
    if cases is not None:
        meta = cases.lazy().select("run_id", "case_id", *CASE_META)
        per_case = meta.join(per_case, on=["run_id", "case_id"], how="left").with_columns(
            pl.col("n_replays", "n_pass", "n_fail", "n_error").fill_null(0)
        )
    verdict = (rules or PassRules()).verdict_expr(
        pl.col("tags") if cases is not None else None, pl.col("case_id")
    )
    return (
        per_case.with_columns(undecided_case().alias("error"))
        .with_columns(
            pl.when(pl.col("error")).then(None).otherwise(verdict).alias("passed"),
            ((pl.col("n_pass") > 0) & (pl.col("n_fail") > 0)).alias("unstable"),
        )
        .sort("run_id", "case_id")
        .collect()
    )


def undecided_case() -> pl.Expr:
    """A case decides only when more than half of its replays were decided (passed or failed):
    4 unparsable judge answers and 1 pass of 5 replays is errored, never a pass (issue 42).

    Examples:
        >>> f = pl.DataFrame({"n_replays": [5, 5, 2, 0], "n_pass": [1, 3, 1, 0],
        ...     "n_fail": [0, 0, 0, 0]})
        >>> f.select(undecided_case())["n_pass"].to_list()
        [True, False, True, True]
    """
    decided = pl.col("n_pass") + pl.col("n_fail")
    return (decided == 0) | (decided * 2 <= pl.col("n_replays"))


def run_verdicts(store: Store, ref: str) -> pl.DataFrame:
    """Per-case verdicts of a stored run (a run id or label), as :func:`verdicts` computes them.

    Examples:
        >>> run_verdicts(open_store("data/demo.duckdb"), "candidate")  # doctest: +SKIP
    """
    run_id = store.resolve_run(ref)
    return verdicts(store.outputs(run_id), store.scores(run_id), store.cases(run_id))


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

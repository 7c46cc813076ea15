"""The queries behind history across runs: per run and tag the case verdicts counted, per run
and served model the usage summed, and per run the newest flake measurement of its
configuration. `evalkit.compare.history` gives them meaning.

The verdicts are counted inside DuckDB, never fetched: a history of 1,000 runs of 10k cases reads
10M outputs and 20M scores and returns a few thousand rows. They follow
`evalkit.compare.verdicts` exactly (a test checks): a (case, replay) is *errored* when the
provider failed, a scorer errored or could not decide, or nothing scored it; else it *fails*
when the runner set ``fail_reason`` or a scorer failed; a case passes by majority over its
decided replays (ties fail) and is *unstable* when they disagree. Each run is read in its newest
scoring (a rescore replaces what a run's verdicts were).

Examples:
    >>> rows = tag_counts(store, ["nightly-41", "nightly-42"])  # doctest: +SKIP
    >>> rows.columns                                            # doctest: +SKIP
    ['run_id', 'tag', 'cases', 'decided', 'passed', 'errored', 'unstable']
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl

    from evalkit.store.db import Store

#: The slice every case belongs to (as `evalkit.compare.slices` names it).
ALL = "ALL"

_SELECTED = "sel AS (SELECT DISTINCT UNNEST(?::VARCHAR[]) AS run_id)"

# Each run's newest scoring, or its own (``<run>/s0``) when the scorings table has none.
_LATEST = f"""
{_SELECTED},
newest AS (
    SELECT s.run_id, s.scoring_id FROM scorings s JOIN sel USING (run_id)
    QUALIFY row_number() OVER (PARTITION BY s.run_id ORDER BY s.created_at DESC,
                               s.scoring_id DESC) = 1
),
latest AS (
    SELECT sel.run_id, coalesce(newest.scoring_id, sel.run_id || '/s0') AS scoring_id
    FROM sel LEFT JOIN newest USING (run_id)
)"""

_TAG_COUNTS = f"""
WITH {_LATEST},
per_replay AS (
    SELECT s.run_id, s.case_id, s.replay, count(*) AS n_scores,
           count(*) FILTER (coalesce(s.error, false) OR s.passed IS NULL) AS n_err,
           count(*) FILTER (NOT coalesce(s.error, false) AND NOT s.passed) AS n_fail
    FROM scores s JOIN latest l ON s.run_id = l.run_id AND s.scoring_id = l.scoring_id
    GROUP BY s.run_id, s.case_id, s.replay
),
replays AS (
    SELECT o.run_id, o.case_id,
           CASE WHEN o.error IS NOT NULL OR coalesce(r.n_err, 0) > 0 THEN NULL
                WHEN o.fail_reason IS NOT NULL OR coalesce(r.n_fail, 0) > 0 THEN false
                WHEN coalesce(r.n_scores, 0) = 0 THEN NULL
                ELSE true END AS passed
    FROM outputs o JOIN sel USING (run_id)
    LEFT JOIN per_replay r USING (run_id, case_id, replay)
),
per_case AS (
    SELECT run_id, case_id, count(*) FILTER (passed) AS n_pass,
           count(*) FILTER (NOT passed) AS n_fail
    FROM replays GROUP BY run_id, case_id
),
verdicts AS MATERIALIZED (
    SELECT c.run_id, c.tags, coalesce(v.n_pass, 0) AS n_pass, coalesce(v.n_fail, 0) AS n_fail
    FROM cases c JOIN sel USING (run_id) LEFT JOIN per_case v USING (run_id, case_id)
    {{where}}
),
tagged AS (
    SELECT run_id, UNNEST(tags) AS tag, n_pass, n_fail FROM verdicts
)
SELECT run_id, tag, count(*) AS cases, count(*) FILTER (n_pass + n_fail > 0) AS decided,
       count(*) FILTER (n_pass > n_fail) AS passed,
       count(*) FILTER (n_pass + n_fail = 0) AS errored,
       count(*) FILTER (n_pass > 0 AND n_fail > 0) AS unstable
FROM (SELECT run_id, '{ALL}' AS tag, n_pass, n_fail FROM verdicts
      UNION ALL SELECT * FROM tagged {{tag_where}})
GROUP BY run_id, tag ORDER BY run_id, tag
"""


def tag_counts(store: Store, run_ids: Sequence[str], tag: str | None = None) -> pl.DataFrame:
    """Per run and tag (``ALL``: every case of the run): ``cases``, ``decided`` (not errored),
    ``passed``, ``errored`` and ``unstable`` case counts, by the rules above. With ``tag``, only
    the cases carrying it (``ALL`` then counts those). A run with no cases has no rows.

    Returns:
        ``run_id, tag, cases, decided, passed, errored, unstable``, by run_id and tag.
    """
    if tag is None:
        sql = _TAG_COUNTS.format(where="", tag_where="")
        params: list[object] = [list(run_ids)]
    else:
        sql = _TAG_COUNTS.format(where="WHERE list_contains(c.tags, ?)", tag_where="WHERE tag = ?")
        params = [list(run_ids), tag, tag]
    return store.query(sql, params)


_USAGE = f"""
WITH {_SELECTED}
SELECT o.run_id, o.model, count(*) AS outputs,
       count(*) FILTER (o.cached) AS cached,
       count(o.latency_ms) AS timed, coalesce(sum(o.latency_ms), 0) AS latency_ms,
       coalesce(sum(o.cost_usd), 0) AS cost_usd,
       coalesce(sum(o.prompt_tokens + o.completion_tokens), 0) AS total_tokens,
       coalesce(sum(o.steps), 0) AS steps
FROM outputs o JOIN sel USING (run_id)
GROUP BY o.run_id, o.model ORDER BY o.run_id, outputs DESC, o.model
"""


def usage_by_model(store: Store, run_ids: Sequence[str]) -> pl.DataFrame:
    """Per run and served model (``outputs.model``; null where the provider named none): the
    outputs, how many came from the response cache, and sums of latency (over ``timed``
    outputs), cost, tokens and agent steps, for means per case replay.

    Returns:
        ``run_id, model, outputs, cached, timed, latency_ms, cost_usd, total_tokens, steps``.
    """
    return store.query(_USAGE, [list(run_ids)])


_FLAKES = f"""
WITH {_SELECTED},
configs AS (SELECT DISTINCT config_hash FROM runs JOIN sel USING (run_id)),
newest AS (
    SELECT f.config_hash, max(f.measured_at) AS measured_at
    FROM flakes f JOIN configs USING (config_hash) GROUP BY f.config_hash
),
flaky AS (
    SELECT f.config_hash, n.measured_at, count(*) AS measured,
           count(*) FILTER (f.flips > 0) AS flaky
    FROM flakes f JOIN newest n ON f.config_hash = n.config_hash
                               AND f.measured_at = n.measured_at
    GROUP BY f.config_hash, n.measured_at
)
SELECT r.run_id, r.config_hash, flaky.measured_at, flaky.measured, flaky.flaky
FROM runs r JOIN sel USING (run_id) JOIN flaky USING (config_hash) ORDER BY r.run_id
"""


def flaky_counts(store: Store, run_ids: Sequence[str]) -> pl.DataFrame:
    """Per run whose configuration (``config_hash``) has a flake measurement: the newest one's
    time, how many cases it measured and how many of them changed verdict (``flaky``). Runs of
    an unmeasured configuration have no row.

    Returns:
        ``run_id, config_hash, measured_at, measured, flaky``.
    """
    return store.query(_FLAKES, [list(run_ids)])

"""The SQL that decides a run's verdicts per tag and sums its usage, and the recording of both
when a run finishes (:func:`record_history`, called by ``Store.finish_run`` and
``Store.write_scoring``). Plain DuckDB, no Polars: it runs at the end of a lean run.
:mod:`evalkit.store.history_queries` reads what is recorded and counts what is not.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb

from evalkit.replay_rules import PassRules
from evalkit.store.history_tally import ALL, TagRow, TalliedHistory, pinned_rules
from evalkit.store.schema import HISTORY_DDL

SELECTED = "sel AS (SELECT DISTINCT UNNEST(?::VARCHAR[]) AS run_id)"

# Each run's newest scoring, or its own (``<run>/s0``) when the scorings table has none.
LATEST = f"""
{SELECTED},
newest AS (
    SELECT s.run_id, s.scoring_id FROM scorings s JOIN sel USING (run_id)
    QUALIFY row_number() OVER (PARTITION BY s.run_id ORDER BY s.created_at DESC,
                               s.scoring_id DESC) = 1
),
latest AS (
    SELECT sel.run_id, coalesce(newest.scoring_id, sel.run_id || '/s0') AS scoring_id
    FROM sel LEFT JOIN newest USING (run_id)
)"""

TAG_COUNTS = f"""
WITH {LATEST},
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
           count(*) FILTER (NOT passed) AS n_fail, count(*) AS n_replays
    FROM replays GROUP BY run_id, case_id
),
counted AS (
    SELECT c.run_id, c.case_id, c.tags, coalesce(v.n_pass, 0) AS n_pass,
           coalesce(v.n_fail, 0) AS n_fail,
           -- a case decides only when more than half of its replays were decided (issue 42)
           (coalesce(v.n_pass, 0) + coalesce(v.n_fail, 0)) * 2 > coalesce(v.n_replays, 0) AS ok
    FROM cases c JOIN sel USING (run_id) LEFT JOIN per_case v USING (run_id, case_id)
    {{where}}
),
verdicts AS MATERIALIZED (  -- passes: the run's replay pass rules (evalkit.replay_rules)
    SELECT run_id, tags, n_pass, n_fail, ok, {{passes}} AS pass FROM counted
),
tagged AS (
    SELECT run_id, UNNEST(tags) AS tag, n_pass, n_fail, ok, pass FROM verdicts
)
SELECT run_id, tag, count(*) AS cases, count(*) FILTER (ok) AS decided,
       count(*) FILTER (ok AND pass) AS passed,
       count(*) FILTER (NOT ok) AS errored,
       count(*) FILTER (n_pass > 0 AND n_fail > 0) AS unstable
FROM (SELECT run_id, '{ALL}' AS tag, n_pass, n_fail, ok, pass FROM verdicts
      UNION ALL SELECT * FROM tagged {{tag_where}})
GROUP BY run_id, tag ORDER BY run_id, tag
"""

#: The ``ALL`` rows of :data:`TAG_COUNTS` alone: each run's counts over every case (no tags).
ALL_COUNTS = TAG_COUNTS.format(where="", tag_where="WHERE false", passes="{passes}")

USAGE = f"""
WITH {SELECTED}
SELECT o.run_id, o.model, count(*) AS outputs,
       count(*) FILTER (o.cached) AS cached,
       count(o.latency_ms) AS timed, coalesce(sum(o.latency_ms), 0) AS latency_ms,
       coalesce(sum(o.cost_usd), 0) AS cost_usd,
       coalesce(sum(o.prompt_tokens + o.completion_tokens), 0) AS total_tokens,
       coalesce(sum(o.steps), 0) AS steps
FROM outputs o JOIN sel USING (run_id)
GROUP BY o.run_id, o.model ORDER BY o.run_id, outputs DESC, o.model
"""


@dataclass(frozen=True, kw_only=True)
class CaseCounts:
    """One run's cases as `evalkit history` counts them (its ``ALL`` row, newest scoring): the
    cases, those decided (more than half their replays decided), passed under the run's replay
    pass rules (``pass_rules``; majority by default, ties fail), undecided (``errored``) and
    ``unstable``; ``rate`` = passed / decided.

    Examples:
        >>> CaseCounts(run_id="r1", cases=16, decided=15, passed=9, errored=1, unstable=2).rate
        0.6
    """

    run_id: str
    cases: int
    decided: int
    passed: int
    errored: int
    unstable: int
    # the replay pass rules the counts follow: the run's own (its manifest's), majority for a
    # run whose counts were recorded before the rules were (`history_sql.record_history`)
    pass_rules: PassRules = field(default_factory=PassRules)

    @property
    def rate(self) -> float | None:
        return self.passed / self.decided if self.decided else None


#: The counts of a :class:`CaseCounts`, in the order :func:`record_history` returns them.
_COUNTED = ("cases", "decided", "passed", "errored", "unstable")


def record_history(
    con: duckdb.DuckDBPyConnection,
    run_id: str,
    scoring_id: str,
    *,
    tallied: TalliedHistory | None = None,
    tables: bool = False,
) -> CaseCounts | None:
    """Record a finished run's counts (every tag) and usage, for ``scoring_id``, replacing
    what it recorded before: what :func:`tag_counts` and :func:`usage_by_model` read instead of
    counting the run again. The counts follow the replay pass rules the run's manifest pinned
    (`run_rules`), recorded beside them in ``history_rules`` (a run recorded before had none:
    its counts are by majority). Plain DuckDB (no Polars): it runs at the end of a lean run.

    ``tallied``: the rows a fresh run's writer tallied for this scoring
    (:mod:`evalkit.store.history_tally`), recorded as they are instead of counted again;
    ``tables``: the history tables are known to be there (the store made or checked them).

    Returns:
        The counts of its ``ALL`` row as recorded (with those rules), so the run's own summary
        need not read them back; None for a run without cases.
    """
    if not tables:
        con.execute(HISTORY_DDL)
    con.execute("DELETE FROM history_counts WHERE run_id = ?", [run_id])
    if tallied is not None:
        rules = tallied.rules
        recorded = _insert_rows(con, run_id, scoring_id, tallied.rows)
    else:
        rules = run_rules(con, [run_id]).get(run_id, PassRules())
        counts = TAG_COUNTS.format(where="", tag_where="", passes=rules.sql("tags", "case_id"))
        recorded = con.execute(
            f"INSERT INTO history_counts SELECT run_id, ? AS scoring_id, tag, cases, decided, "
            f"passed, errored, unstable FROM ({counts}) RETURNING tag, {', '.join(_COUNTED)}",
            [scoring_id, [run_id]],
        ).fetchall()
    con.execute("DELETE FROM history_rules WHERE run_id = ?", [run_id])
    con.execute(
        "INSERT INTO history_rules VALUES (?, ?, ?)",
        [run_id, scoring_id, json.dumps(rules.to_config(), sort_keys=True)],
    )
    con.execute("DELETE FROM history_usage WHERE run_id = ?", [run_id])
    con.execute(f"INSERT INTO history_usage {USAGE}", [[run_id]])
    every = [row[1:] for row in recorded if row[0] == ALL]
    if not every:
        return None
    numbers = dict(zip(_COUNTED, map(int, every[0]), strict=True))
    return CaseCounts(run_id=run_id, pass_rules=rules, **numbers)


def _insert_rows(
    con: duckdb.DuckDBPyConnection, run_id: str, scoring_id: str, rows: Sequence[TagRow]
) -> list[TagRow]:
    """``rows`` into ``history_counts`` in one statement (a column of each); returns them."""
    if rows:
        columns = [list(column) for column in zip(*rows, strict=True)]
        con.execute(
            "INSERT INTO history_counts SELECT ?, ?, UNNEST(?::VARCHAR[]), "
            + ", ".join("UNNEST(?::BIGINT[])" for _ in _COUNTED),
            [run_id, scoring_id, *columns],
        )
    return list(rows)


#: Each selected run's manifest: where its replay pass rules are pinned.
RUN_MANIFESTS = f"WITH {SELECTED} SELECT run_id, manifest FROM runs JOIN sel USING (run_id)"


def run_rules(con: duckdb.DuckDBPyConnection, run_ids: Sequence[str]) -> dict[str, PassRules]:
    """Each run's replay pass rules, as its manifest pinned them (``gate_policy.pass_rules``;
    majority where it has none or they do not parse)."""
    rows = con.execute(RUN_MANIFESTS, [list(run_ids)]).fetchall()
    return {run_id: manifest_rules(text) for run_id, text in rows}


def manifest_rules(manifest: str | None) -> PassRules:
    """The pass rules of a stored manifest's JSON (majority: none, or unreadable)."""
    try:
        policy = (json.loads(manifest or "{}") or {}).get("gate_policy")
    except (ValueError, AttributeError):  # not JSON, not a mapping
        return PassRules()
    return pinned_rules(policy)


def stored_rules(config: str | None) -> PassRules:
    """The rules ``history_rules`` recorded (None: counts recorded before it existed, which
    are by majority)."""
    from evalkit.errors import ConfigError

    try:
        return PassRules.from_config(json.loads(config)) if config else PassRules()
    except (ValueError, AttributeError, ConfigError):
        return PassRules()

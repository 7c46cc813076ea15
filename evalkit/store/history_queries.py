"""The queries behind history across runs: per run and tag the case verdicts counted, per run
and served model the usage summed, and per run the newest flake measurement of its
configuration. `evalkit.trends.analysis` gives them meaning.

The verdicts are counted inside DuckDB, never fetched: a history of 1,000 runs of 10k cases reads
10M outputs and 20M scores and returns a few thousand rows. They follow
`evalkit.compare.verdicts` exactly (a test checks): a (case, replay) is *errored* when the
provider failed, a scorer errored or could not decide, or nothing scored it; else it *fails*
when the runner set ``fail_reason`` or a scorer failed; a case decides only when more than
half of its replays were decided, then passes under the run's replay pass rules (its
manifest's; majority by default, ties fail), and is *unstable* when they disagree. Each run is
read in its newest scoring (a rescore replaces what a run's verdicts were).

Examples:
    >>> rows = tag_counts(store, ["nightly-41", "nightly-42"])  # doctest: +SKIP
    >>> rows.columns                                            # doctest: +SKIP
    ['run_id', 'tag', 'cases', 'decided', 'passed', 'errored', 'unstable']
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from evalkit.replay_rules import PassRules
from evalkit.store.history_sql import (
    ALL,
    ALL_COUNTS,
    LATEST,
    RUN_MANIFESTS,
    SELECTED,
    TAG_COUNTS,
    USAGE,
    CaseCounts,
    manifest_rules,
    stored_rules,
)

if TYPE_CHECKING:
    import polars as pl

    from evalkit.store.db import Store


def tag_counts(store: Store, run_ids: Sequence[str], tag: str | None = None) -> pl.DataFrame:
    """Per run and tag (``ALL``: every case of the run): ``cases``, ``decided`` (not errored),
    ``passed``, ``errored`` and ``unstable`` case counts, by the rules above. With ``tag``, only
    the cases carrying it (``ALL`` then counts those). A run with no cases has no rows.

    The counts a run recorded when it finished (``history_sql.record_history``, for its newest
    scoring)
    are read as they are; only the other runs are counted from their outputs.

    Returns:
        ``run_id, tag, cases, decided, passed, errored, unstable``, by run_id and tag.
    """
    import polars as pl

    stored = _stored_counts(store, run_ids)
    counted = set(stored["run_id"].to_list())
    rest = [r for r in dict.fromkeys(run_ids) if r not in counted]
    if tag is not None:  # a tag's cases: its row, and ALL counting the same cases
        mine = stored.filter(pl.col("tag") == tag)
        stored = pl.concat([mine, mine.with_columns(tag=pl.lit(ALL))])
    fresh = count_tags(store, rest, tag) if rest else stored.clear()
    frame = pl.concat([stored, fresh.cast(stored.schema)]) if stored.height else fresh
    return frame.sort("run_id", "tag")


def case_counts(store: Store, run_ids: Sequence[str]) -> dict[str, CaseCounts]:
    """Each run's :class:`CaseCounts`, the one pass rate of a run that ``evalkit run``,
    ``evalkit runs list``, ``evalkit history`` and ``evalkit.Project`` show: what the run recorded
    when it finished (``ALL`` of :func:`tag_counts`) where it did, else counted from its
    outputs. Without Polars (the run path reads it). A run with no cases has no entry."""
    wanted = list(dict.fromkeys(run_ids))
    rows = []
    if wanted and store.has_table("history_counts"):
        rows = store.records(_with_rules(store) + " WHERE h.tag = ?", [wanted, ALL])
        for r in rows:
            r["pass_rules"] = stored_rules(r.get("pass_rules"))
    counted = {r["run_id"] for r in rows}
    rest = [r for r in wanted if r not in counted]
    for rules, runs in _by_rules(store, rest).items():
        fresh = store.records(ALL_COUNTS.format(passes=rules.sql("tags", "case_id")), [runs])
        rows += [r | {"pass_rules": rules} for r in fresh]
    numbers = ("cases", "decided", "passed", "errored", "unstable")
    return {
        r["run_id"]: CaseCounts(
            run_id=r["run_id"], pass_rules=r["pass_rules"], **{n: int(r[n]) for n in numbers}
        )
        for r in rows
    }


def counted_rules(store: Store, run_ids: Sequence[str]) -> dict[str, PassRules]:
    """The replay pass rules each run's counts (`case_counts`, `tag_counts`) follow: those
    recorded beside its counts (majority for counts recorded before the rules were), else its
    manifest's, which a count from its outputs follows."""
    wanted = list(dict.fromkeys(run_ids))
    found: dict[str, PassRules] = {}
    if wanted and store.has_table("history_counts"):
        for r in store.records(_with_rules(store) + " WHERE h.tag = ?", [wanted, ALL]):
            found[r["run_id"]] = stored_rules(r["pass_rules"])
    for rules, runs in _by_rules(store, [r for r in wanted if r not in found]).items():
        found |= dict.fromkeys(runs, rules)
    return found


def _by_rules(store: Store, run_ids: Sequence[str]) -> dict[PassRules, list[str]]:
    """``run_ids`` grouped by the replay pass rules their manifests pinned (one count each)."""
    groups: dict[PassRules, list[str]] = {}
    if not run_ids:
        return groups
    found = {r["run_id"]: r["manifest"] for r in store.records(RUN_MANIFESTS, [list(run_ids)])}
    for run_id in run_ids:
        groups.setdefault(manifest_rules(found.get(run_id)), []).append(run_id)
    return groups


def _with_rules(store: Store) -> str:
    """The recorded counts, with the rules recorded beside them where a store has them."""
    return _STORED_WITH_RULES if store.has_table("history_rules") else _STORED_NO_RULES


def count_tags(store: Store, run_ids: Sequence[str], tag: str | None = None) -> pl.DataFrame:
    """:func:`tag_counts` counted from the runs' outputs and scores (what is recorded)."""
    import polars as pl

    frames = []
    for rules, runs in (_by_rules(store, run_ids) or {PassRules(): []}).items():
        passes = rules.sql("tags", "case_id")
        if tag is None:
            sql = TAG_COUNTS.format(where="", tag_where="", passes=passes)
            params: list[object] = [runs]
        else:
            sql = TAG_COUNTS.format(
                where="WHERE list_contains(c.tags, ?)", tag_where="WHERE tag = ?", passes=passes
            )
            params = [runs, tag, tag]
        frames.append(store.query(sql, params))
    if len(frames) == 1:
        return frames[0]
    return pl.concat([f.cast(frames[0].schema) for f in frames]).sort("run_id", "tag")


_STORED_COUNTS = f"""
WITH {LATEST}
SELECT h.run_id, h.tag, h.cases, h.decided, h.passed, h.errored, h.unstable
FROM history_counts h JOIN latest l ON h.run_id = l.run_id AND h.scoring_id = l.scoring_id
"""

_STORED_WITH_RULES = f"""
WITH {LATEST}
SELECT r.pass_rules, h.run_id, h.tag, h.cases, h.decided, h.passed, h.errored, h.unstable
FROM history_counts h JOIN latest l ON h.run_id = l.run_id AND h.scoring_id = l.scoring_id
LEFT JOIN history_rules r ON r.run_id = h.run_id AND r.scoring_id = h.scoring_id
"""

_STORED_NO_RULES = _STORED_COUNTS.replace("SELECT h.run_id", "SELECT NULL AS pass_rules, h.run_id")

_COUNT_COLUMNS = ("run_id", "tag", "cases", "decided", "passed", "errored", "unstable")


def _stored_counts(store: Store, run_ids: Sequence[str]) -> pl.DataFrame:
    """The recorded counts of ``run_ids`` for their newest scoring (none in an older store)."""
    import polars as pl

    if not store.has_table("history_counts"):
        return pl.DataFrame(
            schema={c: pl.String if c in ("run_id", "tag") else pl.Int64 for c in _COUNT_COLUMNS}
        )
    frame = store.query(_STORED_COUNTS, [list(run_ids)])
    return frame.select(
        pl.col("run_id", "tag").cast(pl.String), pl.col(*_COUNT_COLUMNS[2:]).cast(pl.Int64)
    )


def usage_by_model(store: Store, run_ids: Sequence[str]) -> pl.DataFrame:
    """Per run and served model (``outputs.model``; null where the provider named none): the
    outputs, how many came from the response cache, and sums of latency (over ``timed``
    outputs), cost, tokens and agent steps, for means per case replay. Recorded usage
    (``history_sql.record_history``) is read as it is; the other runs are summed from their outputs.

    Returns:
        ``run_id, model, outputs, cached, timed, latency_ms, cost_usd, total_tokens, steps``.
    """
    import polars as pl

    wanted = list(dict.fromkeys(run_ids))
    stored = (
        store.query(
            f"WITH {SELECTED} SELECT h.* FROM history_usage h JOIN sel USING (run_id)", [wanted]
        )
        if store.has_table("history_usage")
        else None
    )
    counted = set() if stored is None else set(stored["run_id"].to_list())
    rest = [r for r in wanted if r not in counted]
    fresh = store.query(USAGE, [rest]) if rest or stored is None else None
    parts = [f for f in (stored, fresh) if f is not None and f.height]
    if not parts:
        return store.query(USAGE, [[]])
    frame = pl.concat([p.cast(parts[0].schema) for p in parts]) if len(parts) > 1 else parts[0]
    return frame.sort(
        "run_id", "outputs", "model", descending=[False, True, False], nulls_last=True
    )


_FLAKES = f"""
WITH {SELECTED},
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

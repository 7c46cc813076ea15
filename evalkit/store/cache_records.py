"""The response cache: getting and putting responses, what it holds, how often runs were
served from it, and pruning.

The cache is a table of (key, response, created_at); a key is a hash of everything that shaped
the request (`evalkit.run.cache.cache_key`), so it names no suite. What a suite got from the
cache is read from its runs' outputs (``cached``). Pruning deletes cache entries only: stored
run outputs and scores are never touched, so every report stays as it was.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from evalkit.store.schema import CACHE_COLUMNS, Columns
from evalkit.store.scrub import scrub_json
from evalkit.store.transaction import serialized

if TYPE_CHECKING:
    import duckdb
    import polars as pl


class CacheRecords:
    """Store methods for the response cache (mixed into :class:`evalkit.store.Store`)."""

    # Provided by Store.
    if TYPE_CHECKING:  # read-only: Store's property

        @property
        def _con(self) -> duckdb.DuckDBPyConnection: ...

    _frame: Callable[..., pl.DataFrame]
    _transaction: Callable[..., Any]
    _insert: Callable[[str, Columns, dict[str, str]], None]
    _lock: threading.RLock

    # -- keyed by provider, model, rendered request, sampling and replay index --------------

    @serialized
    def cache_get(self, keys: Iterable[str]) -> dict[str, str]:
        wanted = list(dict.fromkeys(keys))
        if not wanted:
            return {}
        rows = self._con.execute(
            "SELECT c.cache_key, c.response FROM response_cache c "
            "JOIN (SELECT UNNEST(?::VARCHAR[]) AS cache_key) w USING (cache_key)",
            [wanted],
        ).fetchall()
        return dict(rows)

    @serialized
    def cache_put(self, entries: dict[str, str]) -> None:
        if not entries:
            return
        rows: Columns = {
            "cache_key": list(entries),
            "response": [scrub_json(v) for v in entries.values()],
            "created_at": [dt.datetime.now(dt.UTC)] * len(entries),
        }
        with self._transaction():
            self._insert("response_cache", rows, CACHE_COLUMNS)

    # -- managing the cache -----------------------------------------------------------------

    def cache_stats(self) -> dict[str, Any]:
        """Entries, their total size in bytes, the oldest and newest entry. (``strlen`` counts a
        text's UTF-8 bytes; a cast to BLOB would read backslashes in the JSON as escapes.)"""
        count, size, oldest, newest = self._con.execute(
            "SELECT count(*), coalesce(sum(strlen(response)), 0), min(created_at), "
            "max(created_at) FROM response_cache"
        ).fetchall()[0]
        return {"entries": int(count), "bytes": int(size), "oldest": oldest, "newest": newest}

    def cache_hits_by_suite(self) -> pl.DataFrame:
        """Per suite: outputs stored, how many came from the cache, and the share."""
        return self._frame(
            "SELECT json_extract_string(r.manifest, '$.suite') AS suite, count(*) AS outputs, "
            "count(*) FILTER (WHERE o.cached) AS from_cache, "
            "round(count(*) FILTER (WHERE o.cached) / count(*), 4) AS hit_rate "
            "FROM outputs o JOIN runs r USING (run_id) GROUP BY suite ORDER BY suite"
        )

    def cache_prune(
        self, older_than_days: float | None = None, config_hash: str | None = None
    ) -> int:
        """Delete cache entries created more than ``older_than_days`` ago, or those that answered
        the first request of a run of ``config_hash`` (a run's later agent steps are keyed by
        requests its outputs do not record, so they stay until they age out); both given: both
        conditions. Returns how many were deleted. Stored outputs are never touched.
        """
        if older_than_days is None and config_hash is None:
            raise ValueError("cache_prune needs older_than_days or config_hash")
        where: list[str] = []
        params: list[Any] = []
        if older_than_days is not None:
            cutoff = dt.datetime.now(dt.UTC) - dt.timedelta(days=older_than_days)
            where.append("created_at < ?")
            params.append(cutoff)
        if config_hash is not None:
            where.append(
                "cache_key IN (SELECT o.request_hash FROM outputs o JOIN runs r USING (run_id) "
                "WHERE r.config_hash = ? OR r.config_hash LIKE ?)"
            )
            params += [config_hash, f"{config_hash}%"]
        condition = " AND ".join(where)
        with self._transaction():
            ((count,),) = self._con.execute(
                f"SELECT count(*) FROM response_cache WHERE {condition}", params
            ).fetchall()
            self._con.execute(f"DELETE FROM response_cache WHERE {condition}", params)
        return int(count)

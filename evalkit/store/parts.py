"""Immutable Parquet parts: what workers write instead of opening DuckDB.

Layout under a root (a local directory or ``s3://bucket/prefix``)::

    <root>/runs/<run_id>/manifest/<writer>.json             the run's manifest, one per writer
    <root>/runs/<run_id>/parts/<table>/<chunk>-<attempt>.parquet

``table`` is ``cases``, ``cache``, ``scores`` or ``outputs``. A part is never changed once
written: a local part is written to a hidden temporary file and linked into place (a name that
exists is never overwritten: the writer takes the next attempt number); on S3 it is one PUT of
the whole object through ``pyarrow.fs``. A chunk's outputs part is written last, so it is the
commit: the merge takes a chunk attempt only once its outputs part exists, and its scores and
cache parts are there already.

A part is trusted no more than any file: :meth:`PartsRoot.read_frame` refuses one that is not
Parquet (truncated, another file) or not of its table's schema, and :class:`RunKeys` one with
a row of another run, of a case the run does not have or of a replay it does not run, each in
one line naming the file.

An S3 root names its endpoint in the query string, as ``pyarrow.fs`` reads it:
``s3://bucket/prefix?endpoint_override=127.0.0.1:9000&scheme=http`` (credentials from the
usual ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` environment variables).

Examples:
    >>> root = PartsRoot("data/parts")                                # doctest: +SKIP
    >>> root.write_part("run-1", "outputs", "c0", frame.to_arrow())   # doctest: +SKIP
    'data/parts/runs/run-1/parts/outputs/c0-1.parquet'
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import polars as pl

from evalkit.errors import ConfigError, StoreError
from evalkit.run_manifest import RunManifest, as_manifest

try:  # the `distributed` extra: a one-machine run never writes parts
    import pyarrow as pa
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq
except ImportError:  # pragma: no cover - the test environment has it
    raise ConfigError(
        "sharded, Ray and merged runs write Parquet parts with pyarrow, which is not installed: "
        "pip install 'evalkit-gate[distributed]'"
    ) from None
from evalkit.store.part_checks import (
    CACHE_SCHEMA,
    CASE_SCHEMA,
    KEY_COLUMNS,
    PART_SCHEMAS,
    RunKeys,
    first_line,
    manifest_problem,
    schema_problem,
)
from evalkit.store.schema import OUTPUT_SCHEMA, SCORE_SCHEMA, StoredCase, case_columns

DEFAULT_PARTS = "data/parts"
#: The tables a chunk writes, in the order they are written: ``outputs`` last (the commit).
CHUNK_TABLES = ("cache", "scores", "outputs")
TABLES = ("cases", *CHUNK_TABLES)
_PART_NAME = re.compile(r"^(?P<chunk>.+)-(?P<attempt>\d+)\.parquet$")
#: What reading a file that is not a Parquet part of ours can raise.
_UNREADABLE = (pa.ArrowException, OSError, ValueError, pl.exceptions.PolarsError)


#: Rows per Parquet row group of a part: a reader decodes a row group at a time, so a cases
#: part of a million cases is read (:meth:`PartsRoot.read_batches`) in bounded memory.
ROW_GROUP_ROWS = 10_000


@dataclass(frozen=True)
class PartInfo:
    """One part file: its table, chunk, attempt, path inside the filesystem and write time."""

    table: str
    chunk_id: str
    attempt: int
    path: str
    mtime_ns: int

    @property
    def name(self) -> str:
        """``<table>/<chunk>-<attempt>``: how the merge records it."""
        return f"{self.table}/{self.chunk_id}-{self.attempt}"


class PartRefused(StoreError):
    """A part that is not what its name says (not Parquet, another schema, another run's rows):
    one line naming the file, why, and what to do."""

    def __init__(self, part: PartInfo, shown: str, reason: str) -> None:
        self.part, self.shown, self.reason = part, shown, reason
        super().__init__(
            f"{shown}: {part.table} part refused: {reason}; run the shard that wrote it again "
            "(it sets a refused part aside and redoes its chunk) or remove the file, then merge "
            "again"
        )


class PartsRoot:
    """Where parts live: a local directory or an S3 prefix, read and written via ``pyarrow.fs``."""

    def __init__(self, location: str | Path) -> None:
        text = str(location)
        self.location = text
        self.local = "://" not in text
        if self.local:
            self.fs: pafs.FileSystem = pafs.LocalFileSystem()
            self.base = str(Path(text).resolve())
        else:
            try:
                self.fs, self.base = pafs.FileSystem.from_uri(text)
            except (pa.ArrowInvalid, ValueError, OSError) as exc:
                raise StoreError(f"--parts {_shown(text)}: {exc}") from None
            self.base = self.base.rstrip("/")
        # run id -> chunk id -> highest attempt written or seen: one listing per run and process,
        # not one per chunk commit (a hint: a name taken meanwhile is still never overwritten)
        self._attempts: dict[str, dict[str, int]] = {}
        self.listings = 0  # directory listings made (tests count them)
        self.reads = 0  # part files read (tests count them)
        # parts read whole and kept while `holding` (path -> rows), and how many rows more fit
        self._held: dict[str, pl.DataFrame] | None = None
        self._room = 0

    def __repr__(self) -> str:
        return f"PartsRoot({_shown(self.location)!r})"

    def __str__(self) -> str:
        """The location as messages name it (credentials stripped), as ``--parts`` took it."""
        return _shown(self.location)

    # -- paths ------------------------------------------------------------------------------

    def run_dir(self, run_id: str) -> str:
        if not run_id or "/" in run_id or run_id.startswith("."):
            raise StoreError(f"run id {run_id!r}: not usable as a directory name")
        return f"{self.base}/runs/{run_id}"

    def _table_dir(self, run_id: str, table: str) -> str:
        if table not in TABLES:
            raise StoreError(f"unknown part table {table!r} (one of {', '.join(TABLES)})")
        return f"{self.run_dir(run_id)}/parts/{table}"

    # -- writes -----------------------------------------------------------------------------

    def write_part(
        self, run_id: str, table: str, chunk_id: str, data: pa.Table, attempt: int | None = None
    ) -> PartInfo:
        """Write one immutable part; ``attempt`` None: one past the chunk's highest so far.

        A local name that exists is never replaced: the next attempt number is taken instead.
        """
        directory = self._table_dir(run_id, table)
        self.fs.create_dir(directory, recursive=True)
        if attempt is None:
            attempt = self.next_attempt(run_id, chunk_id)
        while True:
            path = f"{directory}/{chunk_id}-{attempt}.parquet"
            if self.local:
                temp = f"{directory}/.{chunk_id}-{attempt}.{secrets.token_hex(4)}.tmp"
                pq.write_table(data, temp, row_group_size=ROW_GROUP_ROWS)
                try:
                    os.link(temp, path)  # fails if the name exists: parts are never overwritten
                except FileExistsError:
                    attempt += 1
                    continue
                finally:
                    os.unlink(temp)
            else:
                if self.fs.get_file_info(path).type != pafs.FileType.NotFound:
                    attempt += 1
                    continue
                # one object, whole or absent
                pq.write_table(data, path, filesystem=self.fs, row_group_size=ROW_GROUP_ROWS)
            info = self.fs.get_file_info(path)
            if (known := self._attempts.get(run_id)) is not None:
                known[chunk_id] = max(known.get(chunk_id, 0), attempt)
            return PartInfo(table, chunk_id, attempt, path, int(info.mtime_ns or 0))

    def write_chunk(
        self,
        run_id: str,
        chunk_id: str,
        outputs: pl.DataFrame,
        scores: pl.DataFrame,
        cache: dict[str, str],
    ) -> PartInfo:
        """Write one finished chunk: its cache entries, scores, then outputs (the commit), all
        with one attempt number, registered secrets scrubbed; returns the outputs part."""
        from evalkit.store.scrub import scrub_json, scrub_outputs, scrub_scores

        attempt = self.next_attempt(run_id, chunk_id)
        entries = pl.DataFrame(
            {"cache_key": list(cache), "response": [scrub_json(v) for v in cache.values()]},
            schema=CACHE_SCHEMA,
        )
        frames = {
            "cache": entries,
            "scores": scrub_scores(scores.select(list(SCORE_SCHEMA))),
            "outputs": scrub_outputs(outputs.select(list(OUTPUT_SCHEMA))),
        }
        written = None
        for table in CHUNK_TABLES:
            written = self.write_part(run_id, table, chunk_id, frames[table].to_arrow(), attempt)
            attempt = written.attempt  # a name taken meanwhile: the rest follow the new one
        assert written is not None
        return written

    def write_cases(self, run_id: str, writer: str, cases: Sequence[StoredCase]) -> PartInfo:
        """The run's cases as one part (merged once per case id, first written wins)."""
        frame = pl.DataFrame(case_columns(run_id, cases), schema=CASE_SCHEMA)
        return self.write_part(run_id, "cases", writer, frame.to_arrow(), 1)

    def next_attempt(self, run_id: str, chunk_id: str) -> int:
        """One past the highest attempt of ``chunk_id`` in any table (1 for a new chunk), from
        one listing of the run's parts per process, kept up to date by this root's writes:
        a chunk commit costs the same at the run's first chunk and its ten-thousandth."""
        known = self._attempts.get(run_id)
        if known is None:
            known = {}
            for table in TABLES:
                for part in self.parts(run_id, table):
                    known[part.chunk_id] = max(known.get(part.chunk_id, 0), part.attempt)
            self._attempts[run_id] = known
        return known.get(chunk_id, 0) + 1

    def write_manifest(
        self, run_id: str, writer: str, manifest: RunManifest | Mapping[str, Any]
    ) -> None:
        """Record the run's manifest as ``writer`` saw it (each shard writes its own), in its
        JSON form with its version (a JSON object is read as `RunManifest.from_stored` reads
        one)."""
        directory = f"{self.run_dir(run_id)}/manifest"
        self.fs.create_dir(directory, recursive=True)
        data = json.dumps(as_manifest(manifest).to_dict(), sort_keys=True).encode()
        path = f"{directory}/{writer}.json"
        if self.local:
            temp = f"{directory}/.{writer}.{secrets.token_hex(4)}.tmp"
            Path(temp).write_bytes(data)
            os.replace(temp, path)
        else:
            with self.fs.open_output_stream(path) as out:
                out.write(data)

    # -- reads ------------------------------------------------------------------------------

    def manifests(self, run_id: str) -> list[RunManifest]:
        """Every manifest written for ``run_id``, by writer name, migrated as the store's are.

        Raises:
            StoreError: naming the file, when one is not JSON, not a manifest of the run, or
                of a version a newer evalkit wrote.
        """
        directory = f"{self.run_dir(run_id)}/manifest"
        found = []
        for info in sorted(self._listing(directory), key=lambda i: i.base_name):
            if info.base_name.endswith(".json") and not info.base_name.startswith("."):
                try:
                    with self.fs.open_input_stream(info.path) as stream:
                        manifest = json.loads(stream.read())
                except (OSError, ValueError) as exc:
                    manifest = f"not readable JSON ({first_line(exc)})"
                problem = (
                    manifest if isinstance(manifest, str) else manifest_problem(manifest, run_id)
                )
                if problem:
                    raise StoreError(
                        f"{self.shown(info.path)}: manifest refused: {problem}; remove the file "
                        "(the shard that wrote it writes it anew when run again)"
                    )
                found.append(RunManifest.from_stored(manifest, source=self.shown(info.path)))
        return found

    def parts(self, run_id: str, table: str) -> list[PartInfo]:
        """The parts of one table, oldest write first (then by name)."""
        found = []
        for info in self._listing(self._table_dir(run_id, table)):
            match = _PART_NAME.match(info.base_name)
            if match and not info.base_name.startswith("."):
                found.append(
                    PartInfo(
                        table,
                        match.group("chunk"),
                        int(match.group("attempt")),
                        info.path,
                        int(info.mtime_ns or 0),
                    )
                )
        return sorted(found, key=lambda p: (p.mtime_ns, p.chunk_id, p.attempt))

    @contextlib.contextmanager
    def holding(self, max_rows: int) -> Iterator[None]:
        """Within it, a part :meth:`read_frame` reads is read whole and kept, while the outputs
        parts kept hold at most ``max_rows`` rows together (the scores and cache parts of their
        chunks come with them): a merge that checks its parts and then writes them reads each
        once when they fit one batch (a driver's periodic merge). The first outputs part that
        does not fit lets every kept part go, and parts are read as asked."""
        self._held, self._room = {}, max_rows
        try:
            yield
        finally:
            self._held, self._room = None, 0

    def read_frame(self, part: PartInfo, columns: Sequence[str] | None = None) -> pl.DataFrame:
        """The rows of ``part`` in its table's schema (only ``columns`` of it, when given; the
        whole file's schema is checked either way).

        Raises:
            StoreError: naming the file, when it is not Parquet (truncated, another file), or a
                column of its table is missing, of another type, or null where a key must be.
        """
        if self._held is None:
            return self._read_frame(part, columns)
        whole = self._held.get(part.path)
        if whole is None:
            whole = self._read_frame(part, None)
            rows = whole.height if part.table == "outputs" else 0
            if rows <= self._room:
                self._held[part.path], self._room = whole, self._room - rows
            else:  # more than a batch: kept parts would only add to what the merge holds
                self._held, self._room = None, 0
        return whole if columns is None else whole.select(columns)

    def _read_frame(self, part: PartInfo, columns: Sequence[str] | None) -> pl.DataFrame:
        self.reads += 1
        schema = PART_SCHEMAS[part.table]
        try:
            found = pl.from_arrow(pq.read_schema(part.path, filesystem=self.fs).empty_table())
        except _UNREADABLE as exc:
            raise self.refused(part, f"not a readable Parquet file ({first_line(exc)})") from None
        assert isinstance(found, pl.DataFrame)
        problem = schema_problem(part.table, found.schema)
        if problem:
            raise self.refused(part, problem)
        wanted = list(columns or schema)
        try:
            table = pq.read_table(
                part.path, filesystem=self.fs, columns=[c for c in wanted if c in found.columns]
            )
            frame = pl.from_arrow(table)
        except _UNREADABLE as exc:
            raise self.refused(part, f"its data cannot be read ({first_line(exc)})") from None
        assert isinstance(frame, pl.DataFrame)
        return self._conformed(part, frame, wanted)

    def read_batches(self, part: PartInfo, batch_rows: int) -> Iterator[pl.DataFrame]:
        """The rows of ``part`` as :meth:`read_frame` reads them, at most ``batch_rows`` at a
        time (a cases part of a million cases is never held whole); refused, naming the file,
        as :meth:`read_frame` refuses it, at the batch that fails."""
        self.reads += 1
        schema = PART_SCHEMAS[part.table]
        try:
            source = self.fs.open_input_file(part.path)
        except _UNREADABLE as exc:
            raise self.refused(part, f"not a readable Parquet file ({first_line(exc)})") from None
        with source:
            try:
                file = pq.ParquetFile(source)
                found = pl.from_arrow(file.schema_arrow.empty_table())
            except _UNREADABLE as exc:
                raise self.refused(
                    part, f"not a readable Parquet file ({first_line(exc)})"
                ) from None
            assert isinstance(found, pl.DataFrame)
            problem = schema_problem(part.table, found.schema)
            if problem:
                raise self.refused(part, problem)
            wanted = list(schema)
            present = [c for c in wanted if c in found.columns]
            batches = file.iter_batches(batch_size=batch_rows, columns=present)
            while True:
                try:
                    batch = next(batches, None)
                    if batch is None:
                        return
                    frame = pl.from_arrow(batch)
                except _UNREADABLE as exc:
                    raise self.refused(
                        part, f"its data cannot be read ({first_line(exc)})"
                    ) from None
                assert isinstance(frame, pl.DataFrame)
                yield self._conformed(part, frame, wanted)

    def _conformed(self, part: PartInfo, frame: pl.DataFrame, wanted: list[str]) -> pl.DataFrame:
        """``frame`` as its table's ``wanted`` columns, refused when a key is null."""
        schema = PART_SCHEMAS[part.table]
        frame = frame.select(
            (pl.col(c) if c in frame.columns else pl.lit(None)).cast(schema[c]).alias(c)
            for c in wanted
        )
        nulls = [c for c in KEY_COLUMNS[part.table] if c in wanted and frame[c].null_count()]
        if nulls:
            raise self.refused(part, f"rows without {', '.join(nulls)}")
        return frame

    def read_checked(self, part: PartInfo, keys: RunKeys) -> pl.DataFrame:
        """The :data:`KEY_COLUMNS` of ``part``, refused (naming the file) unless every row
        belongs to the run ``keys`` describes."""
        rows = self.read_frame(part, KEY_COLUMNS[part.table])
        problem = keys.refusal(part.table, rows)
        if problem:
            raise self.refused(part, problem)
        return rows

    def check_attempt(
        self, outputs: PartInfo, scores: PartInfo | None, cache: PartInfo | None, keys: RunKeys
    ) -> pl.DataFrame:
        """Refuse (naming the part) a chunk attempt whose outputs, scores or cache part is not
        the run's, or whose scores are of (case, replay) its outputs do not have; returns the
        outputs' key columns."""
        answered = self.read_checked(outputs, keys)
        if scores is not None:
            orphans = self.read_checked(scores, keys).join(
                answered, on=["case_id", "replay"], how="anti"
            )
            if orphans.height:
                first = orphans.row(0, named=True)
                raise self.refused(
                    scores,
                    f"scores of {orphans.height} (case, replay) its chunk's outputs part lacks "
                    f"(first: {first['case_id']}, {first['replay']})",
                )
        if cache is not None:
            self.read_checked(cache, keys)
        return answered

    def refused(self, part: PartInfo, reason: str) -> PartRefused:
        """The one-line error refusing ``part``: which file, why, and what to do."""
        return PartRefused(part, self.shown(part.path), reason)

    def set_aside(self, part: PartInfo) -> str:
        """Rename a refused part to a hidden name no listing shows (kept for a post-mortem);
        returns the new path."""
        directory, name = part.path.rsplit("/", 1)
        aside = f"{directory}/.{name}.refused-{secrets.token_hex(4)}"
        self.fs.move(part.path, aside)
        return aside

    def shown(self, path: str) -> str:
        """A path inside the filesystem as the user names it (``s3://`` for an S3 root)."""
        return path if self.local else f"{urlsplit(self.location).scheme}://{path}"

    def completed_keys(self, run_id: str) -> set[tuple[str, int]]:
        """(case_id, replay) of every committed output part of ``run_id``: work already done,
        merged or not.

        Raises:
            StoreError: naming the file, when an outputs part is not one (see ``read_frame``).
        """
        done: set[tuple[str, int]] = set()
        for part in self.parts(run_id, "outputs"):
            frame = self.read_frame(part, ["case_id", "replay"])
            done.update(frame.iter_rows())
        return done

    def _listing(self, directory: str) -> list[pafs.FileInfo]:
        self.listings += 1
        selector = pafs.FileSelector(directory, allow_not_found=True)
        try:
            infos = self.fs.get_file_info(selector)
        except OSError as exc:
            raise StoreError(f"{_shown(self.location)}: cannot list {directory}: {exc}") from None
        return [i for i in infos if i.type == pafs.FileType.File]


def _shown(location: str) -> str:
    """A location without any credentials in its URL or query string."""
    parts = urlsplit(location)
    if "://" not in location:
        return location
    host = parts.hostname or ""
    query = "&".join(
        q for q in parts.query.split("&") if q and not q.lower().startswith(("secret", "access"))
    )
    return f"{parts.scheme}://{host}{parts.path}" + (f"?{query}" if query else "")

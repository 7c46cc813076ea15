"""Iceberg (pyiceberg) against DuckLake for the team's shared response cache, in one invocation.

The team store is built on Apache Iceberg through pyiceberg (issue 27 asked for DuckLake "when
it ships for the DuckDB version in use"). This measures the shape the shared cache has: one
commit of ``--rows`` entries per run, then a 100-key lookup (what a run's prefetch asks), as the
table grows to each of ``--commits`` commits, both on a SQLite catalog and a directory:

* ``iceberg``          pyiceberg ``Table.append``, the defaults evalkit uses;
* ``iceberg-merged``   the same with ``commit.manifest-merge.enabled`` (manifests merged on
                       commit, so a commit does not rewrite an ever longer manifest list);
* ``ducklake``         DuckLake's ``INSERT`` through DuckDB with the ``ducklake`` and
                       ``sqlite_scanner`` extensions loaded from their PyPI wheels.

Then two processes commit ``--race`` times each at once into each format: every row must be
there once (printed, and the script exits 1 if not).

DuckDB loads an extension built for its own version only, and the PyPI wheels of DuckLake stop
at DuckDB 1.5.5 while evalkit's venv has DuckDB 2.x: so this runs in a scratch venv, never the
project's (nothing in the suite imports it)::

    python3.11 -m venv /tmp/formats
    /tmp/formats/bin/pip install duckdb==1.5.5 duckdb-extension-ducklake==1.5.5 \\
        duckdb-extension-sqlite-scanner==1.5.5 'pyiceberg[sql-sqlite,pyarrow]==0.12.0'
    /tmp/formats/bin/python bench/bench_table_formats.py --commits 16,200,500

Figures are printed with the load average, never asserted.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import ClassVar

VALUE = "v" * 400  # about a cached chat completion's size once compressed


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _extension(name: str) -> str:
    """The extension file a ``duckdb-extension-<name>`` wheel installed, for this DuckDB."""
    import importlib

    import duckdb

    package = importlib.import_module(f"duckdb_extension_{name}")
    path = (
        Path(package.__file__).parent
        / "extensions"
        / f"v{duckdb.__version__}"
        / f"{name}.duckdb_extension"
    )
    if not path.exists():
        sys.exit(f"bench_table_formats: no {name} extension for DuckDB {duckdb.__version__}")
    return str(path)


class DuckLake:
    name = "ducklake"

    def __init__(self, root: Path) -> None:
        import duckdb

        self.duckdb = duckdb
        self.db = duckdb.connect()
        self.db.execute(f"LOAD '{_extension('ducklake')}'")
        self.db.execute(f"LOAD '{_extension('sqlite_scanner')}'")
        (root / "data").mkdir(parents=True, exist_ok=True)
        self.db.execute(
            f"ATTACH 'ducklake:sqlite:{root}/catalog.sqlite' AS lake (DATA_PATH '{root}/data/')"
        )
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS lake.cache (key VARCHAR, value VARCHAR, published DOUBLE)"
        )

    def commit(self, keys: list[str]) -> int:
        """Append ``keys``; the number of retries a concurrent commit cost."""
        for attempt in range(100):
            try:
                self.db.execute(
                    "INSERT INTO lake.cache SELECT unnest($1), $2, $3", [keys, VALUE, time.time()]
                )
                return attempt
            except self.duckdb.TransactionException:
                time.sleep(0.005 * (attempt + 1))
        raise RuntimeError("ducklake: 100 conflicting commits in a row")

    def lookup(self, keys: list[str]) -> set[str]:
        rows = self.db.execute(
            "SELECT key FROM lake.cache WHERE key IN (SELECT unnest($1))", [keys]
        ).fetchall()
        return {key for (key,) in rows}

    def count(self) -> tuple[int, int]:
        return self.db.execute("SELECT count(*), count(DISTINCT key) FROM lake.cache").fetchone()


class Iceberg:
    name = "iceberg"
    properties: ClassVar[dict[str, str]] = {}

    def __init__(self, root: Path) -> None:
        import pyarrow as pa
        from pyiceberg.catalog.sql import SqlCatalog
        from pyiceberg.exceptions import CommitFailedException, TableAlreadyExistsError

        self.pa, self.conflict = pa, CommitFailedException
        root.mkdir(parents=True, exist_ok=True)
        self.catalog = SqlCatalog(
            "bench", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}"
        )
        self.schema = pa.schema(
            [("key", pa.string()), ("value", pa.string()), ("published", pa.float64())]
        )
        self.catalog.create_namespace_if_not_exists("bench")
        try:
            self.table = self.catalog.create_table(
                "bench.cache", schema=self.schema, properties=self.properties
            )
        except TableAlreadyExistsError:
            self.table = self.catalog.load_table("bench.cache")

    def commit(self, keys: list[str]) -> int:
        rows = self.pa.table(
            {"key": keys, "value": [VALUE] * len(keys), "published": [time.time()] * len(keys)},
            schema=self.schema,
        )
        for attempt in range(100):
            try:
                self.table.append(rows)
                return attempt
            except self.conflict:
                self.table = self.catalog.load_table("bench.cache")
                time.sleep(0.005 * (attempt + 1))
        raise RuntimeError("iceberg: 100 conflicting commits in a row")

    def lookup(self, keys: list[str]) -> set[str]:
        from pyiceberg.expressions import In

        table = self.catalog.load_table("bench.cache")  # a reader in another job: fresh metadata
        return set(table.scan(row_filter=In("key", keys)).to_arrow().column("key").to_pylist())

    def count(self) -> tuple[int, int]:
        keys = self.catalog.load_table("bench.cache").scan().to_arrow().column("key").to_pylist()
        return len(keys), len(set(keys))


class IcebergMerged(Iceberg):
    name = "iceberg-merged"
    properties: ClassVar[dict[str, str]] = {"commit.manifest-merge.enabled": "true"}


FORMATS: dict[str, Callable[[Path], DuckLake | Iceberg]] = {
    f.name: f for f in (Iceberg, IcebergMerged, DuckLake)
}


def grow(fmt: str, root: Path, commits: int, rows: int) -> None:
    store = FORMATS[fmt](root)
    cpu, wall = time.process_time(), time.perf_counter()
    last = []
    for i in range(commits):
        start = time.perf_counter()
        store.commit([f"k{i}-{j}" for j in range(rows)])
        if i >= commits - 10:
            last.append(time.perf_counter() - start)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    rng = random.Random(commits)
    keys = [f"k{rng.randrange(commits)}-{rng.randrange(rows)}" for _ in range(100)]
    lookups = []
    for _ in range(3):
        start = time.perf_counter()
        found = store.lookup(keys)
        lookups.append(time.perf_counter() - start)
    if found != set(keys):
        sys.exit(f"{fmt}: a lookup missed {len(set(keys) - found)} of the keys")
    print(
        f"  {fmt:15} {commits:5} commits: {wall / commits * 1e3:6.1f} ms wall "
        f"({cpu / commits * 1e3:5.1f} ms CPU) per commit on average, the last 10 "
        f"{statistics.median(last) * 1e3:6.1f} ms; 100-key lookup "
        f"{statistics.median(lookups) * 1e3:6.0f} ms  (load {_load()})",
        flush=True,
    )


def _writer(fmt: str, root: str, tag: str, commits: int, rows: int, out) -> None:
    store = FORMATS[fmt](Path(root))
    retries = sum(store.commit([f"{tag}{i}-{j}" for j in range(rows)]) for i in range(commits))
    out.put(retries)


def race(fmt: str, root: Path, commits: int, rows: int) -> bool:
    FORMATS[fmt](root)  # the table exists before either writer starts
    out = multiprocessing.get_context("spawn").Queue()
    ctx = multiprocessing.get_context("spawn")
    writers = [
        ctx.Process(target=_writer, args=(fmt, str(root), tag, commits, rows, out)) for tag in "ab"
    ]
    start = time.perf_counter()
    for w in writers:
        w.start()
    retries = [out.get(timeout=1800) for _ in writers]
    for w in writers:
        w.join()
    wall = time.perf_counter() - start
    total, distinct = FORMATS[fmt](root).count()
    want = 2 * commits * rows
    ok = total == distinct == want
    print(
        f"  {fmt:15} two writers x {commits} commits: {total} rows, {distinct} distinct "
        f"(want {want}: {'ok' if ok else 'LOST OR DUPLICATED'}), retries {retries}, "
        f"{wall:.1f} s  (load {_load()})",
        flush=True,
    )
    return ok


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--commits", default="16,200,500", help="table sizes, in commits")
    parser.add_argument("--rows", type=int, default=50, help="entries per commit")
    parser.add_argument("--race", type=int, default=100, help="commits per writer in the race")
    parser.add_argument("--formats", default=",".join(FORMATS))
    args = parser.parse_args(argv)
    formats = args.formats.split(",")
    import duckdb
    import pyiceberg

    print(f"DuckDB {duckdb.__version__}, pyiceberg {pyiceberg.__version__}, load {_load()}")
    ok = True
    with tempfile.TemporaryDirectory(prefix="bench-formats-") as tmp:
        for commits in (int(c) for c in args.commits.split(",")):
            print(f"{commits} commits of {args.rows} entries, then a 100-key lookup:")
            for fmt in formats:  # alternated per size: drifting load touches each alike
                root = Path(tmp) / f"{fmt}-{commits}"
                grow(fmt, root, commits, args.rows)
                shutil.rmtree(root)
        print("concurrent commits:")
        for fmt in formats:
            ok &= race(fmt, Path(tmp) / f"{fmt}-race", args.race, args.rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

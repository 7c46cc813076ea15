"""The shared response cache stays a bounded number of data files
(evalkit.store.shared.compaction): a publish past the bound compacts it, `evalkit cache
compact` does on demand, a compaction racing a publish (two processes) loses and doubles no
row, a key held twice keeps its first-published row, and a compaction killed midway leaves
the table readable with every row."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pytest

from evalkit.cli import main
from evalkit.run.shared_cache import SharedCacheStore
from evalkit.store.shared import open_shared_store, parse_store_uri
from evalkit.store.shared import store as store_module
from evalkit.store.shared.compaction import data_files
from evalkit.store.shared.tables import TABLES, load_table, open_catalog


def _uri(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'team' / 'catalog.db'}"


def _table(uri: str):  # a pyiceberg Table, read through a fresh catalog
    found = load_table(open_catalog(parse_store_uri(uri)), TABLES["response_cache"], create=False)
    assert found is not None
    return found


def _rows(uri: str) -> pl.DataFrame:
    """Every row of the shared cache, as another job reads it."""
    return pl.from_arrow(_table(uri).scan().to_arrow())  # type: ignore[return-value]


def _entries(prefix: str, n: int) -> dict[str, str]:
    return {f"{prefix}-{i:04d}": json.dumps({"text": f"{prefix} answer {i}"}) for i in range(n)}


def _fill(uri: str, commits: int, rows: int = 5) -> dict[str, str]:
    """``commits`` publishes of ``rows`` entries each (one data file apiece)."""
    shared = open_shared_store(uri)
    published: dict[str, str] = {}
    for c in range(commits):
        batch = _entries(f"c{c:03d}", rows)
        shared.cache_put(batch)
        published.update(batch)
    return published


def test_a_publish_past_the_bound_compacts_and_every_entry_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "COMPACT_AT_FILES", 8)
    uri = _uri(tmp_path)
    shared = open_shared_store(uri)
    published: dict[str, str] = {}
    files_seen, compactions = [], 0
    for c in range(30):
        batch = _entries(f"c{c:03d}", 5)
        done = shared.cache_put(batch)
        published.update(batch)
        compactions += done.compacted is not None
        files_seen.append(data_files(_table(uri)))
        assert done.compact_failure is None
    assert max(files_seen) <= 8  # a publish that made it 9 compacted it at once
    assert compactions == 3  # at the 9th, 17th and 25th file
    assert open_shared_store(uri).cache_get(list(published)) == published
    rows = _rows(uri)
    assert rows.height == 150 and rows["cache_key"].n_unique() == 150
    assert len(_table(uri).metadata.snapshots) <= 8  # older snapshots expired


def test_a_run_says_its_publish_compacted_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from synthetic_runs import C, make_run, write_store

    monkeypatch.setattr(store_module, "COMPACT_AT_FILES", 3)
    uri = _uri(tmp_path)
    _fill(uri, 3)
    write_store(tmp_path / "a.duckdb", [make_run("r0", [C("c1", "p")])])
    from evalkit.store import open_store

    with open_store(tmp_path / "a.duckdb", write=True) as store:
        team = SharedCacheStore(store, open_shared_store(uri))
        team.cache_put(_entries("mine", 4))
        published = team.publish("r0")
    assert published.failure is None and published.added == 4
    assert "; compacted the cache from 4 data files into 1 (" in published.render()
    assert data_files(_table(uri)) == 1


def test_a_key_held_twice_keeps_its_first_published_row(tmp_path: Path) -> None:
    uri = _uri(tmp_path)
    _fill(uri, 2)
    table = _table(uri)
    early, late = dt.datetime(2026, 1, 1, tzinfo=dt.UTC), dt.datetime(2026, 6, 1, tzinfo=dt.UTC)
    first, later = '{"text": "first"}', '{"text": "later"}'
    held = [("dup-a", later, late), ("dup-a", first, early),
            ("dup-b", first, early), ("dup-b", later, late)]  # fmt: skip
    for key, response, at in held:  # by hand, one file each, in both orders
        table.append(pa.table({"cache_key": [key], "response": [response], "created_at": [at],
                               "publisher": [None]},
                              schema=TABLES["response_cache"].arrow))  # fmt: skip
    before = open_shared_store(uri).cache_get(["dup-a", "dup-b"])
    done = open_shared_store(uri).compact_cache()
    assert (done.files_before, done.files_after) == (6, 1)
    assert (done.rows_before, done.rows_after) == (14, 12)
    rows = _rows(uri)
    assert rows.height == 12 and not rows["cache_key"].is_duplicated().any()
    after = open_shared_store(uri).cache_get(["dup-a", "dup-b"])
    assert after == before == {"dup-a": '{"text": "first"}', "dup-b": '{"text": "first"}'}
    again = open_shared_store(uri).compact_cache()  # one file, no key twice: left alone
    assert not again.compacted and len(_table(uri).metadata.snapshots) == 1


def test_cache_compact_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = _uri(tmp_path)
    published = _fill(uri, 12)
    shown = parse_store_uri(uri).shown
    assert main(["cache", "compact", "--store", uri]) == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith(f"compacted the shared response cache of {shown}: 12 data files into 1")
    # 12 publishes and the delete half of the overwrite
    assert "(60 entries, 0 duplicate rows dropped; 13 old snapshots expired" in out
    assert main(["cache", "compact", "--store", uri]) == 0
    assert capsys.readouterr().out.strip() == (
        f"the shared response cache of {shown} is 1 data file (60 entries) already: nothing "
        "to compact"
    )
    assert open_shared_store(uri).cache_get(list(published)) == published
    bad = "postgresql://ci:hunter2@db/evalkit?warehouse=s3://b/w"
    assert main(["cache", "compact", "--store", bad]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "hunter2" not in err


# -- the two ways a race goes, one at a time: which commit lands first ------------------------


def test_a_compaction_that_loses_to_a_publish_reads_the_new_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from evalkit.store.shared import compaction

    uri = _uri(tmp_path)
    published = _fill(uri, 4)
    late = _entries("late", 3)
    read = compaction.first_published

    def publish_meanwhile(rows: pa.Table) -> pa.Table:  # after the compaction read the table
        if not publish_meanwhile.done:  # type: ignore[attr-defined]
            publish_meanwhile.done = True  # type: ignore[attr-defined]
            open_shared_store(uri).cache_put(late)  # another job, another catalog connection
        return read(rows)

    publish_meanwhile.done = False  # type: ignore[attr-defined]
    monkeypatch.setattr(compaction, "first_published", publish_meanwhile)
    done = open_shared_store(uri).compact_cache()
    assert done.conflicts == 1 and (done.files_before, done.files_after) == (5, 1)
    rows = _rows(uri)
    assert rows.height == 23 and not rows["cache_key"].is_duplicated().any()
    assert open_shared_store(uri).cache_get([*published, *late]) == {**published, **late}


def test_a_publish_that_loses_to_a_compaction_appends_on_the_compacted_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from evalkit.store.shared import tables

    uri = _uri(tmp_path)
    published = _fill(uri, 4)
    late = {**_entries("late", 3), next(iter(published)): '{"text": "asked again"}'}
    keys_of = tables.existing_keys

    def compact_meanwhile(*args: object) -> set[tuple]:  # after the publish read the keys
        found = keys_of(*args)  # type: ignore[arg-type]
        if not compact_meanwhile.done:  # type: ignore[attr-defined]
            compact_meanwhile.done = True  # type: ignore[attr-defined]
            assert open_shared_store(uri).compact_cache().compacted
        return found

    compact_meanwhile.done = False  # type: ignore[attr-defined]
    monkeypatch.setattr(tables, "existing_keys", compact_meanwhile)
    done = open_shared_store(uri).cache_put(late)
    assert (done.added, done.present, done.conflicts) == (3, 1, 1)
    assert data_files(_table(uri)) == 2  # the compacted file and the publish's
    rows = _rows(uri)
    assert rows.height == 23 and not rows["cache_key"].is_duplicated().any()
    assert open_shared_store(uri).cache_get([*published, *late]) == {**late, **published}


# -- two processes: a compactor and a publisher at once ----------------------------------------

_PUBLISHER = """
import json, sys, time
from pathlib import Path
from typing import Any
from evalkit.store.shared import open_shared_store
from evalkit.store.shared.compaction import data_files
uri, go = sys.argv[1:3]
shared = open_shared_store(uri)
shared.cache_get(["warm"])
Path(go + ".publisher").touch()
while not Path(go).exists():
    time.sleep(0.002)
conflicts = added = 0
files = []  # data files after each commit: fewer than before means a compaction came between
for c in range(16):
    batch = {f"p{c:03d}-{i:02d}": json.dumps({"text": f"publisher {c} {i}"}) for i in range(10)}
    done = shared.cache_put(batch)
    added, conflicts = added + done.added, conflicts + done.conflicts
    files.append(data_files(shared._table("response_cache")))
    if c == 7:
        # halfway, wait for a compaction to land between two of our commits: left to timing,
        # a loaded machine's compactor can lose to every one of them
        Path(go + ".wanted").touch()
        deadline = time.monotonic() + 120
        while not Path(go + ".compacted").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
    # room for a compaction's read, write and commit between two of ours (~0.1-0.3 s): back
    # to back, ours land every ~0.15 s and the compactor only ever loses and retries
    time.sleep(0.3)
Path(go + ".published").touch()
print(json.dumps({"added": added, "conflicts": conflicts, "files": files}))
"""

_COMPACTOR = """
import json, sys, time
from pathlib import Path
from typing import Any
from evalkit.store.shared import open_shared_store
uri, go = sys.argv[1:3]
shared = open_shared_store(uri)
shared.cache_get(["warm"])
Path(go + ".compactor").touch()
while not Path(go).exists():
    time.sleep(0.002)
compactions = conflicts = 0
while not Path(go + ".published").exists():
    wanted = Path(go + ".wanted").exists()  # asked before this compaction began
    done = shared.compact_cache()
    compactions += done.compacted
    conflicts += done.conflicts
    if wanted and done.compacted:
        Path(go + ".compacted").touch()
    time.sleep(0.05)  # a table of one file is read again at once otherwise
print(json.dumps({"compactions": compactions, "conflicts": conflicts}))
"""


def _started(scripts: dict[str, str], uri: str, go: Path) -> dict[str, subprocess.Popen[str]]:
    procs = {
        who: subprocess.Popen([sys.executable, "-c", code, uri, str(go)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for who, code in scripts.items()
    }  # fmt: skip
    deadline = time.monotonic() + 120
    while not all(Path(f"{go}.{who}").exists() for who in procs):
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs.values()):
            _stop(procs)
            why = {who: p.communicate(timeout=60)[1][-2000:] for who, p in procs.items()}
            pytest.fail(f"a process exited or hung before it was ready: {why}")
        time.sleep(0.01)
    return procs


def _stop(procs: dict[str, subprocess.Popen[str]]) -> None:
    for p in procs.values():
        if p.poll() is None:
            p.kill()
            p.wait()


def test_a_compaction_racing_a_publish_loses_and_doubles_no_row(tmp_path: Path) -> None:
    # Every attempt must lose and double no row, and really race: a compaction landing
    # between two of the publisher's commits. The publisher waits for one halfway (the
    # other commits race by timing alone, which on a loaded machine the compactor may lose).
    raced = []
    for attempt in range(3):
        files, published, compacted = _race_once(tmp_path / f"attempt{attempt}")
        raced.append(any(b < a for a, b in itertools.pairwise(files)))
        if raced[-1]:
            break
    assert any(raced), (published, compacted)
    print("commits retried: publisher", published["conflicts"], "compactor", compacted)


def _race_once(folder: Path) -> tuple[list[int], dict[str, Any], dict[str, Any]]:
    folder.mkdir()
    uri = _uri(folder)
    seeded = _fill(uri, 10)  # files for the first compactions to rewrite
    go = folder / "go"
    procs = _started({"publisher": _PUBLISHER, "compactor": _COMPACTOR}, uri, go)
    try:
        go.touch()
        outs = {who: p.communicate(timeout=600) for who, p in procs.items()}
    finally:
        _stop(procs)
    assert [p.returncode for p in procs.values()] == [0, 0], outs
    published = json.loads(outs["publisher"][0])
    compacted = json.loads(outs["compactor"][0])
    assert published["added"] == 160
    assert compacted["compactions"] >= 1, (published, compacted)
    rows = _rows(uri)
    assert rows.height == 210 and not rows["cache_key"].is_duplicated().any()
    expected = {
        **seeded,
        **{f"p{c:03d}-{i:02d}": json.dumps({"text": f"publisher {c} {i}"})
           for c in range(16) for i in range(10)},
    }  # fmt: skip
    assert open_shared_store(uri).cache_get(list(expected)) == expected
    return published["files"], published, compacted


# -- a compaction killed midway ------------------------------------------------------------------

_KILLED = """
import sys, time
from pathlib import Path
from typing import Any
from pyiceberg.catalog.sql import SqlCatalog
from evalkit.store.shared import compaction, open_shared_store
uri, stage, ready = sys.argv[1:4]

def stop_here(*args, **kwargs):
    Path(ready).touch()
    time.sleep(600)  # the test kills the process here

commit = SqlCatalog.commit_table

def stop_at_the_added_file(self, table, requirements, updates):
    adds = [u for u in updates if type(u).__name__ == "AddSnapshotUpdate"]
    if any(u.snapshot.summary.get("added-data-files") for u in adds):
        stop_here()  # the commit naming the new file, not made (nor any before it in its place)
    return commit(self, table, requirements, updates)

if stage == "written":  # the new data file written, the commit adding it not made
    SqlCatalog.commit_table = stop_at_the_added_file
else:  # the overwrite committed, the old snapshots not expired yet
    compaction.expire_older_snapshots = stop_here
open_shared_store(uri).compact_cache()
"""


@pytest.mark.parametrize("stage", ["written", "committed"])
def test_a_compaction_killed_midway_leaves_every_row_readable(tmp_path: Path, stage: str) -> None:
    uri = _uri(tmp_path)
    published = _fill(uri, 6)
    parquet = lambda: sorted((tmp_path / "team").rglob("*.parquet"))  # noqa: E731
    files_on_disk = len(parquet())
    ready = tmp_path / "ready"
    proc = subprocess.Popen([sys.executable, "-c", _KILLED, uri, stage, str(ready)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            assert proc.poll() is None, proc.communicate()[1][-2000:]
            assert time.monotonic() < deadline, "the compaction never got there"
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert len(parquet()) == files_on_disk + 1  # it had written the compacted file
    assert data_files(_table(uri)) == (6 if stage == "written" else 1)
    rows = _rows(uri)
    assert rows.height == 30 and not rows["cache_key"].is_duplicated().any()
    assert open_shared_store(uri).cache_get(list(published)) == published
    done = open_shared_store(uri).compact_cache()  # and a next compaction finishes the job
    assert data_files(_table(uri)) == 1 and len(_table(uri).metadata.snapshots) == 1
    assert done.rows_after == 30

"""A run publishes its own response-cache entries to the team's shared store, and an
unreachable shared store (a catalog that refuses, a warehouse on S3 gone mid-run) degrades the
cache, never the run (evalkit.run.shared_cache.SharedCacheStore);
`evalkit pull` against one fails, one line. The runs go through the demo simulator on
127.0.0.1 (the module's ``demo_server``); two publishers are two processes released at once."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from evalkit.cli import main
from evalkit.corpus.cases import load_corpus
from evalkit.corpus.suite import load_suite
from evalkit.run.cache_provenance import Publisher, this_host
from evalkit.run.runner import RunOptions, run_suite
from evalkit.run.shared_cache import (
    SharedCacheStore,
    open_team_store,
    publish_new_cache,
    with_shared_cache,
)
from evalkit.run.summary import RunSummary
from evalkit.store import open_store
from evalkit.store.shared import open_shared_store, parse_store_uri
from evalkit.store.shared.tables import TABLES, load_table, open_catalog

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from s3_support import endpoint, moto_server, set_test_keys, warehouse_uri
from synthetic_runs import C, make_run, write_store

#: A teammate's job on this host that recorded itself as the entries' publisher (a consumer
#: takes no entry whose publisher is unrecorded: evalkit.run.cache_provenance).
_TEAMMATE = Publisher(
    host=this_host(), run="their-run", commit=None, endpoint=None, loopback=False, reported=None
).to_json()


def _team_uri(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'team' / 'catalog.db'}"


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then let go): a catalog that refuses."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _refusing_uri(tmp_path: Path) -> str:
    return (
        f"postgresql+psycopg2://evalkit@127.0.0.1:{_closed_port()}/evalkit"
        f"?warehouse={tmp_path / 'wh'}"
    )


def _cache_rows(uri: str) -> pl.DataFrame:
    """Every row of the shared response cache, through a fresh catalog (another job's view)."""
    found = load_table(open_catalog(parse_store_uri(uri)), TABLES["response_cache"], create=False)
    if found is None or found.current_snapshot() is None:
        return pl.DataFrame(schema={"cache_key": pl.String, "response": pl.String})
    return pl.from_arrow(found.scan().to_arrow())  # type: ignore[return-value]


@pytest.fixture
def project(project_factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An ``evalkit init`` project (the demo model); its config gets a shared store per test
    (:func:`_share`); the cwd is its parent."""
    made = project_factory()
    monkeypatch.chdir(tmp_path)
    return made.config


def _share(config: Path, uri: str | None) -> Path:
    """A copy of ``config`` naming ``uri`` as the shared store (None: none)."""
    text = config.read_text() + (f"\nstore: {{shared: '{uri}'}}\n" if uri else "")
    named = config.with_name(f"evalkit-{abs(hash(uri)) % 10**6}.yaml" if uri else "plain.yaml")
    named.write_text(text)
    return named


class _Job:
    """One CI job's run as ``evalkit run`` makes it, with the end-of-run publish the CLI
    calls: the shared cache wrapped around a fresh local store, the run, then
    :func:`publish_new_cache`. Keeps what it warned and reported."""

    def __init__(self, config: Path, db: Path, url: str) -> None:
        self.suite = load_suite(config, overrides=[f"system.base_url={url}"])
        self.db = db
        self.warned: list[str] = []
        self.reported: list[str] = []
        self.team: object = None

    def run(self, label: str) -> RunSummary:
        corpus = load_corpus(self.suite.root, user_template=self.suite.config.system.user_template)
        with open_store(self.db, write=True) as store:
            self.team = with_shared_cache(store, self.suite, warn=self.warned.append)
            options = RunOptions(label=label, progress=False)
            summary = run_suite(self.suite, corpus, self.team, options)  # type: ignore[arg-type]
            return publish_new_cache(self.team, summary, report=self.reported.append)  # type: ignore[arg-type]


def _texts(db: Path, label: str) -> list[tuple[str, str]]:
    with open_store(db, read_only=True) as store:
        outputs = store.outputs(label)
    return sorted(zip(outputs["case_id"].to_list(), outputs["text"].to_list(), strict=True))


def test_a_run_publishes_what_it_asked_and_a_second_job_asks_nothing(
    project: Path, demo_server, tmp_path: Path
) -> None:
    uri = _team_uri(tmp_path)
    config = _share(project, uri)
    demo_server.reset_stats()
    first = _Job(config, tmp_path / "job1.duckdb", demo_server.base_url)
    summary = first.run("ci")
    asked = int(demo_server.stats()["requests"])
    assert asked > 0 and summary.complete and not first.warned
    published = _cache_rows(uri)
    assert published.height == asked  # every answer it asked, once (no `evalkit push`)
    assert first.reported == [
        f"published {asked} new response-cache entries to {parse_store_uri(uri).shown} "
        f"(1 commit, {first.reported[0].split('commit, ')[1].split(' s;')[0]} s; 0 there already)"
    ]
    demo_server.reset_stats()
    second = _Job(config, tmp_path / "job2.duckdb", demo_server.base_url)
    again = second.run("ci")
    assert int(demo_server.stats()["requests"]) == 0  # the team had asked it all
    assert again.cache_hits == asked and second.team.shared_hits == asked  # type: ignore[attr-defined]
    assert second.reported == []  # it asked nothing: it publishes nothing
    assert _cache_rows(uri).height == asked  # and the shared hits are not published back
    assert _texts(tmp_path / "job2.duckdb", "ci") == _texts(tmp_path / "job1.duckdb", "ci")


def test_publishing_twice_adds_no_row(tmp_path: Path) -> None:
    write_store(tmp_path / "a.duckdb", [make_run("r0", [C("c1", "p")])])
    uri = _team_uri(tmp_path)
    entries = {f"key-{i:03d}": json.dumps({"text": f"answer {i}"}) for i in range(40)}
    with open_store(tmp_path / "a.duckdb", write=True) as store:
        team = SharedCacheStore(store, open_shared_store(uri))
        team.cache_put(entries)
        first, again = team.publish(), team.publish()
        other = SharedCacheStore(store, open_shared_store(uri))  # another job, the same keys
        other.cache_put(entries)
        third = other.publish(batch_rows=15)
    assert (first.added, first.commits) == (40, 1)
    assert (again.asked, again.added) == (0, 0)  # published keys are not noted again
    assert (third.asked, third.added, third.present, third.commits) == (40, 0, 40, 0)
    rows = _cache_rows(uri)
    assert rows.height == 40 and rows["cache_key"].n_unique() == 40


_PUBLISHER = """
import json, sys, time
from pathlib import Path
from evalkit.store.shared import open_shared_store
uri, go, who = sys.argv[1:4]
shared = open_shared_store(uri)
shared.cache_put({"warm-" + who: "{}"})  # the table made, the catalog opened
Path(go + "." + who).touch()
while not Path(go).exists():
    time.sleep(0.002)
entries = {f"key-{i:04d}": json.dumps({"text": f"{who} answers {i}"}) for i in range(600)}
done = shared.cache_put(entries, batch_rows=60)
print(json.dumps({"added": done.added, "conflicts": done.conflicts}))
"""


def test_two_jobs_publishing_the_same_keys_at_once_leave_one_value_per_key(
    tmp_path: Path,
) -> None:
    uri = _team_uri(tmp_path)
    open_shared_store(uri).cache_put({"first": "{}"})  # one catalog made before both start
    go = tmp_path / "go"
    procs = [
        subprocess.Popen([sys.executable, "-c", _PUBLISHER, uri, str(go), who],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for who in ("a", "b")
    ]  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not all(Path(f"{go}.{who}").exists() for who in ("a", "b")):
            assert time.monotonic() < deadline, "the publishers never got ready"
            if any(p.poll() is not None for p in procs):  # one died: stop the other, say why
                for p in procs:
                    if p.poll() is None:
                        p.kill()
                why = [p.communicate(timeout=60)[1][-2000:] for p in procs]
                pytest.fail(f"a publisher exited before it was ready: {why}")
            time.sleep(0.01)
        go.touch()
        outs = [p.communicate(timeout=300) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert [p.returncode for p in procs] == [0, 0], outs
    done = [json.loads(out) for out, _ in outs]
    assert sum(d["added"] for d in done) == 600  # each key landed once, from one job
    rows = _cache_rows(uri).filter(pl.col("cache_key").str.starts_with("key-"))
    assert rows.height == 600 and not rows["cache_key"].is_duplicated().any()
    keys = [f"key-{i:04d}" for i in range(600)]
    answers = open_shared_store(uri).cache_get(keys)
    assert answers == open_shared_store(uri).cache_get(keys[::-1])  # the same, every time
    assert set(answers) == set(keys)
    assert all(json.loads(v)["text"].endswith(f" answers {int(k[4:])}") for k, v in answers.items())
    print("commits retried per publisher:", [d["conflicts"] for d in done])


def test_a_key_held_twice_answers_its_first_published_row_whatever_the_scan_order(
    tmp_path: Path,
) -> None:
    import pyarrow as pa

    def held_twice(uri: str, order: list[int]) -> str:
        shared = open_shared_store(uri)
        shared.cache_put({"other": "{}"})  # the table
        table = shared._table("response_cache")
        assert table is not None
        early, late = dt.datetime(2026, 1, 1, tzinfo=dt.UTC), dt.datetime(2026, 6, 1, tzinfo=dt.UTC)
        rows = [("dup", '{"text": "first"}', early), ("dup", '{"text": "later"}', late)]
        for i in order:  # appended by hand, as an older evalkit's rebasing retry could leave it
            key, response, at = rows[i]
            table.append(pa.table({"cache_key": [key], "response": [response], "created_at": [at],
                                   "publisher": [None]},
                                  schema=TABLES["response_cache"].arrow))  # fmt: skip
        assert _cache_rows(uri).filter(pl.col("cache_key") == "dup").height == 2
        return open_shared_store(uri).cache_get(["dup"])["dup"]

    assert held_twice(_team_uri(tmp_path / "a"), [0, 1]) == '{"text": "first"}'
    assert held_twice(_team_uri(tmp_path / "b"), [1, 0]) == '{"text": "first"}'


def test_a_failed_publish_is_a_warning_and_leaves_the_run_as_it_finished(
    project: Path, demo_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from evalkit.store.shared.store import SharedStore

    def unreachable(self: SharedStore, entries: object, **_: object) -> None:
        raise OSError("[Errno 28] No space left on device: '/team/warehouse/data'")

    monkeypatch.setattr(SharedStore, "cache_put", unreachable)
    uri = _team_uri(tmp_path)
    job = _Job(_share(project, uri), tmp_path / "job.duckdb", demo_server.base_url)
    summary = job.run("ci")
    shown = parse_store_uri(uri).shown
    (warning,) = job.warned
    assert warning.startswith(f"shared store {shown}: ") and "No space left on device" in warning
    assert f"`evalkit push {summary.run_id}` publishes them" in warning
    assert summary.complete and warning in summary.warnings  # the summary says so
    with open_store(tmp_path / "job.duckdb", read_only=True) as store:
        assert store.run_status(summary.run_id) == "complete"
        assert warning not in store.manifest(summary.run_id).warnings  # unchanged


def test_an_unreachable_catalog_warns_once_and_the_run_answers_as_without_one(
    project: Path, demo_server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = _refusing_uri(tmp_path)
    shown = parse_store_uri(uri).shown
    url = ["--set", f"system.base_url={demo_server.base_url}", "--no-progress"]
    plain = ["run", "--config", str(_share(project, None)), "--db", str(tmp_path / "p.duckdb")]
    assert main([*plain, "--label", "ci", *url]) == 0
    capsys.readouterr()
    demo_server.reset_stats()
    shared = ["run", "--config", str(_share(project, uri)), "--db", str(tmp_path / "s.duckdb")]
    assert main([*shared, "--label", "ci", *url]) == 0  # the run completes, exit 0
    err = capsys.readouterr().err
    assert int(demo_server.stats()["requests"]) > 0  # answered by the model
    warned = [line for line in err.splitlines() if "is unreachable" in line]
    assert len(warned) == 1, err  # one line, naming the store and the cause
    assert warned[0].startswith(f"evalkit: warning: shared store {shown} is unreachable (")
    assert "Connection refused" in warned[0] or "connection" in warned[0].lower()
    assert _texts(tmp_path / "s.duckdb", "ci") == _texts(tmp_path / "p.duckdb", "ci")
    with open_store(tmp_path / "s.duckdb", read_only=True) as store:
        caveats = store.manifest(store.resolve_run("ci")).warnings
    assert any(c.startswith(f"shared store {shown} is unreachable") for c in caveats)


def test_pull_from_an_unreachable_catalog_fails_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = _refusing_uri(tmp_path)
    code = main(["pull", "demo", "--db", str(tmp_path / "pr.duckdb"), "--store", uri])
    err = capsys.readouterr().err.strip()
    assert code == 2  # a gate that cannot get its baseline must not go on
    assert len(err.splitlines()) == 1, err
    assert parse_store_uri(uri).shown in err and "cannot open the catalog" in err


def test_a_store_lost_mid_run_is_warned_once_and_lookups_go_on_locally(tmp_path: Path) -> None:
    write_store(tmp_path / "a.duckdb", [make_run("r0", [C("c1", "p")])])
    uri = _team_uri(tmp_path)
    open_shared_store(uri).cache_put(
        {"team-key": '{"text": "the team asked it"}'}, publisher=_TEAMMATE
    )
    warned: list[str] = []
    with open_store(tmp_path / "a.duckdb", write=True) as store:
        shared = open_shared_store(uri)
        team = SharedCacheStore(store, shared, warn=warned.append)
        assert team.cache_get(["team-key"]) == {"team-key": '{"text": "the team asked it"}'}
        shutil.rmtree(tmp_path / "team" / "warehouse")  # the shared disk went away
        team.cache_put({"mine": '{"text": "asked now"}'})
        assert team.cache_get(["mine", "gone-1"]) == {"mine": '{"text": "asked now"}'}
        assert team.cache_get(["gone-2"]) == {}  # not asked of the lost store again
        assert team.cache_get(["team-key"]) == {"team-key": '{"text": "the team asked it"}'}
        later = SharedCacheStore(store, shared, warn=warned.append)  # a next chunk, same process
        assert later.cache_get(["gone-3"]) == {}
        published = team.publish("r0")
        team.finish_run("r0", "complete", {}, warnings=["an earlier warning"])
        manifest = store.manifest("r0")
    (warning,) = warned  # once, for the process
    assert warning.startswith(f"shared store {parse_store_uri(uri).shown} failed during the run (")
    assert published.failure is not None and published.added == 0
    assert "`evalkit push r0` publishes them" in published.failure
    assert manifest.warnings[:2] == ("an earlier warning", warning)


def test_a_shard_opening_an_unreachable_store_goes_on_without_it(tmp_path: Path) -> None:
    warned: list[str] = []
    uri = _refusing_uri(tmp_path)
    assert open_team_store(uri, source="evalkit.yaml: store.shared", warn=warned.append) is None
    (line,) = warned
    assert line.startswith(f"shared store {parse_store_uri(uri).shown} is unreachable (")


def test_a_chunk_publishes_through_its_part_sink(tmp_path: Path) -> None:
    """A shard or Ray chunk wraps its Parquet part sink, not a store: what it asked is read
    back from the sink and published, what the team served it is not."""
    from evalkit.run.sharded import PartSink

    uri = _team_uri(tmp_path)
    open_shared_store(uri).cache_put({"team": '{"text": "asked by another job"}'},
                                     publisher=_TEAMMATE)  # fmt: skip
    sink = PartSink()
    chunk = SharedCacheStore(sink, open_shared_store(uri))
    assert chunk.cache_get(["team", "new"]) == {"team": '{"text": "asked by another job"}'}
    chunk.cache_put({"new": '{"text": "asked by this chunk"}'})
    published = chunk.publish()
    assert (published.asked, published.added, published.present) == (1, 1, 0)
    assert sorted(_cache_rows(uri)["cache_key"].to_list()) == ["new", "team"]


def test_a_merged_run_publishes_its_cache_once_and_a_second_job_asks_nothing(
    project: Path, demo_server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Ray run's driver publishes after its last merge (:func:`publish_run_cache`): from the
    local store, every entry the run cached, in one commit; publishing again adds nothing,
    and a second job with an empty local store asks the endpoint nothing."""
    from evalkit.run.shared_cache import publish_run_cache

    uri = _team_uri(tmp_path)
    demo_server.reset_stats()
    merged = _Job(_share(project, None), tmp_path / "merged.duckdb", demo_server.base_url)
    run_id = merged.run("nightly").run_id  # no shared store while it ran: as a Ray run's tasks
    asked = int(demo_server.stats()["requests"])
    suite = load_suite(_share(project, uri), overrides=[f"system.base_url={demo_server.base_url}"])
    capsys.readouterr()
    with open_store(tmp_path / "merged.duckdb", write=True) as store:
        first = publish_run_cache(store, suite, run_id)
        again = publish_run_cache(store, suite, run_id)
    assert first is not None and again is not None
    assert (first.added, first.commits, first.failure) == (asked, 1, None)
    assert (again.added, again.present) == (0, asked)
    assert _cache_rows(uri).height == asked
    lines = [line for line in capsys.readouterr().err.splitlines() if "published" in line]
    assert [line.split(" to ")[0] for line in lines] == [
        f"evalkit: published {asked} new response-cache entries",
        "evalkit: published 0 new response-cache entries",
    ]
    demo_server.reset_stats()
    second = _Job(_share(project, uri), tmp_path / "job2.duckdb", demo_server.base_url)
    second.run("ci")
    assert int(demo_server.stats()["requests"]) == 0


# -- the warehouse on S3 (moto's server on 127.0.0.1), and the server gone mid-run ---------------


@pytest.fixture
def s3_server(monkeypatch: pytest.MonkeyPatch):  # yields moto's ThreadedMotoServer
    """moto's S3 on a free loopback port, keys only in the environment; stopped after (a test
    may stop it sooner with ``stop_once``)."""
    set_test_keys(monkeypatch)
    with moto_server() as server:
        yield server


def _s3_uri(tmp_path: Path, server) -> str:
    return warehouse_uri(f"sqlite:///{tmp_path / 'team' / 'catalog.db'}", endpoint(server),
                         "team-bucket")  # fmt: skip


def test_s3_gone_mid_run_leaves_the_run_local_warned_once_and_the_gate_as_without_it(
    project: Path, demo_server, tmp_path: Path, s3_server, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    from evalkit.compare.pin import gate_pair
    from evalkit.store.shared.store import SharedStore

    uri = _s3_uri(tmp_path, s3_server)
    shown = parse_store_uri(uri).shown
    url = ["--set", f"system.base_url={demo_server.base_url}", "--no-progress"]
    db = tmp_path / "ci.duckdb"  # empty: every key of the run is asked of the shared cache
    seeded = _Job(_share(project, uri), tmp_path / "seed.duckdb", demo_server.base_url)
    assert seeded.run("seed").complete and not seeded.warned  # the team's cache, on S3
    assert _cache_rows(uri).height > 0
    assert main(["push", "seed", "--db", str(tmp_path / "seed.duckdb"), "--store", uri]) == 0
    capsys.readouterr()
    looked_up = SharedStore.cache_get_published

    def s3_goes_first(self: SharedStore, keys: object) -> dict[str, tuple[str, str | None]]:
        s3_server.stop_once()  # the run has its store and its manifest: S3 goes now
        return looked_up(self, keys)  # type: ignore[arg-type]

    monkeypatch.setattr(SharedStore, "cache_get_published", s3_goes_first)
    demo_server.reset_stats()
    shared = ["run", "--config", str(_share(project, uri)), "--db", str(db)]
    assert main([*shared, "--label", "cand", *url]) == 0  # the run completes, exit 0
    err = capsys.readouterr().err
    assert int(demo_server.stats()["requests"]) > 0  # the model answered what S3 could not
    warned = [line for line in err.splitlines() if "warning" in line]
    assert len(warned) == 1, err
    assert warned[0].startswith(f"evalkit: warning: shared store {shown} failed during the run (")
    assert "published" not in err  # nothing was, and no second line says it was not
    plain = ["run", "--config", str(_share(project, None)), "--db", str(db)]
    assert main([*plain, "--label", "base", *url]) == 0  # no shared store at all
    assert main([*plain, "--label", "plain", *url]) == 0
    with open_store(db, read_only=True) as store:
        caveats = store.manifest(store.resolve_run("cand")).warnings
        kept = [c for c in caveats if c.startswith(f"shared store {shown}")]
        assert kept == [warned[0].removeprefix("evalkit: warning: ")]  # one, in the manifest
        _, with_s3_down = gate_pair(store, "base", "cand", None)
        _, without = gate_pair(store, "base", "plain", None)
    assert _texts(db, "cand") == _texts(db, "base")

    def decided(d: object) -> tuple:
        return (d.status, d.blocking(), d.n_paired, d.n_verified)  # type: ignore[attr-defined]

    assert decided(with_s3_down) == decided(without) == ("PASSED", (), 4, 4)
    capsys.readouterr()
    code = main(["pull", "seed", "--db", str(tmp_path / "pull.duckdb"), "--store", uri])
    pulled = capsys.readouterr().err.strip()
    assert code == 2, pulled  # a gate that cannot get its baseline must not go on
    assert len(pulled.splitlines()) == 1, pulled
    assert pulled.startswith(f"evalkit: error: {shown}: the shared store is unreachable (")
    assert "testing" not in pulled  # no key


def test_a_merge_publishes_once_what_a_shard_that_lost_the_store_could_not(
    project: Path, demo_server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A shard matrix's shards publish their own entries; one that could not reach the store
    publishes none, and the merge that completes the run publishes those, once."""
    uri = _team_uri(tmp_path)
    parts = str(tmp_path / "parts")
    url = ["--set", f"system.base_url={demo_server.base_url}", "--no-progress"]
    common = ["--run-id", "matrix", "--parts", parts, "--label", "matrix", *url]
    demo_server.reset_stats()
    assert main(["run", "--config", str(_share(project, uri)), "--shard", "1/2", *common]) == 0
    lost = _share(project, _refusing_uri(tmp_path))
    assert main(["run", "--config", str(lost), "--shard", "2/2", *common]) == 0
    asked = int(demo_server.stats()["requests"])
    by_shards = _cache_rows(uri).height
    assert 0 < by_shards < asked  # the second shard published nothing
    db = str(tmp_path / "merged.duckdb")
    capsys.readouterr()
    assert main(["runs", "merge", "matrix", "--parts", parts, "--db", db]) == 0  # no store named
    assert "published" not in capsys.readouterr().err and _cache_rows(uri).height == by_shards
    assert main(["runs", "merge", "matrix", "--parts", parts, "--db", db, "--store", uri]) == 0
    (line,) = [x for x in capsys.readouterr().err.splitlines() if "published" in x]
    assert line.startswith(f"evalkit: published {asked - by_shards} new response-cache entries")
    assert line.endswith(f"; {by_shards} there already)") and "(1 commit," in line
    rows = _cache_rows(uri)
    assert rows.height == asked and not rows["cache_key"].is_duplicated().any()
    assert main(["runs", "merge", "matrix", "--parts", parts, "--db", db, "--store", uri]) == 0
    (again,) = [x for x in capsys.readouterr().err.splitlines() if "published" in x]
    assert again.startswith("evalkit: published 0 new response-cache entries")
    assert _cache_rows(uri).height == asked

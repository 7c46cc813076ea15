"""The shared store (evalkit.store.shared) on a SQLite catalog and a directory warehouse: push and
pull round trips, two processes pushing at once, a pusher SIGKILLed mid-commit, a PR-style gate
against a pulled baseline, and a second job served by the shared response cache."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

from evalkit.cli import main
from evalkit.compare.pin import gate_pair
from evalkit.errors import ConfigError, StoreError
from evalkit.store import open_store
from evalkit.store.shared import open_shared_store, parse_store_uri
from evalkit.store.shared.tables import TABLES, load_table, open_catalog

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from s3_support import endpoint, moto_server, set_test_keys, warehouse_uri
from synthetic_runs import C, make_run, seed000_runs, write_store

TESTS = Path(__file__).resolve().parents[1]
_KEYS = {"runs": ["run_id"], "cases": ["run_id", "case_id"], "outputs": ["run_id", "case_id",
         "replay"], "scores": ["scoring_id", "case_id", "replay", "scorer_index"]}  # fmt: skip


def _uri(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'catalog.db'}?warehouse={tmp_path / 'warehouse'}"


def _shared_rows(uri: str, table: str) -> pl.DataFrame:
    """Every row of a shared table, read through a fresh catalog (what another job sees)."""
    found = load_table(open_catalog(parse_store_uri(uri)), TABLES[table], create=False)
    if found is None or found.current_snapshot() is None:
        return pl.DataFrame(schema=list(TABLES[table].columns))
    return pl.from_arrow(found.scan().to_arrow())  # type: ignore[return-value]


def _runs(prefix: str, n: int, cases: int = 40) -> list:
    return [
        make_run(f"{prefix}{i}", [C(f"c{j:03d}", ("pp", "pf")[j % 2], ["t"]) for j in range(cases)])
        for i in range(n)
    ]


def _frames(db: Path, run_id: str) -> dict[str, pl.DataFrame]:
    with open_store(db, read_only=True) as store:
        got = {
            "runs": store.query("SELECT * EXCLUDE (finished_at) FROM runs WHERE run_id = ?",
                                [run_id]),
            "cases": store.query("SELECT * FROM cases WHERE run_id = ?", [run_id]),
            "outputs": store.query("SELECT * FROM outputs WHERE run_id = ?", [run_id]),
            "scores": store.query("SELECT * FROM scores WHERE run_id = ?", [run_id]),
        }  # fmt: skip
    return {name: frame.sort(_KEYS[name]) for name, frame in got.items()}


def test_push_then_pull_round_trips_every_row_and_both_are_idempotent(tmp_path: Path) -> None:
    base, cand = seed000_runs()
    write_store(tmp_path / "a.duckdb", [base, cand])
    with open_store(tmp_path / "a.duckdb", write=True) as store:
        store.promote_baseline("demo", "base-run", "ana", "reviewed in #12", None, {"alpha": 0.01})
    shared = open_shared_store(_uri(tmp_path))
    with open_store(tmp_path / "a.duckdb", read_only=True) as store:
        first = shared.push_run(store, "base")  # a label resolves as locally
        again = shared.push_run(store, "base-run")
    assert first.added["outputs"] == 600 and first.added["scores"] == 1200
    assert first.added["runs"] == 1 and first.added["baselines"] == 1
    assert again.rows == 0
    with open_store(tmp_path / "b.duckdb", write=True) as store:
        pulled = shared.pull(store, "demo")
        repeat = shared.pull(store, "demo")
        assert store.current_baseline("demo") == "base-run"
        (promotion,) = store.baselines("demo").iter_rows(named=True)
    assert pulled.baseline_of == "demo" and pulled.run_id == "base-run"
    assert pulled.added["outputs"] == 600 and repeat.rows == 0
    assert (promotion["who"], promotion["reason"]) == ("ana", "reviewed in #12")
    assert json.loads(promotion["policy"]) == {"alpha": 0.01}
    for name, frame in _frames(tmp_path / "a.duckdb", "base-run").items():
        assert frame.equals(_frames(tmp_path / "b.duckdb", "base-run")[name]), name


def _labels(texts: dict[str, str], label: int) -> pl.DataFrame:
    """Human labels by ``ana`` of outputs (case id -> text), and one of a case, by output."""
    from evalkit.judges.labels import output_hash

    rows = [(case_id, output_hash(text)) for case_id, text in texts.items()]
    rows.append((next(iter(texts)), None))  # a label of the case that names no output
    return pl.DataFrame(
        {
            "case_id": [c for c, _ in rows], "output_hash": [h for _, h in rows],
            "rater": ["ana"] * len(rows), "label": [label] * len(rows),
            "scorer": ["judge"] * len(rows), "source": ["labels.csv"] * len(rows),
        }
    )  # fmt: skip


def test_overrides_and_human_labels_are_pushed_and_pulled_once(tmp_path: Path) -> None:
    base, cand = seed000_runs()
    write_store(tmp_path / "a.duckdb", [base, cand])
    with open_store(tmp_path / "a.duckdb", write=True) as store:
        store.save_override("base-run", "cand-run", "ana", "billing change reviewed", ["k1"])
        store.save_override("other-run", "other-cand", "ben", "not of these runs", ["k2"])
        texts = dict(
            store.query("SELECT case_id, text FROM outputs WHERE run_id = 'cand-run' "
                        "ORDER BY case_id LIMIT 2").iter_rows()
        )  # fmt: skip
        store.save_human_labels(_labels(texts, 3))
        store.save_human_labels(_labels({"zz-none": "not an output"}, 1).head(1))
    shared = open_shared_store(_uri(tmp_path))
    with open_store(tmp_path / "a.duckdb", read_only=True) as store:
        first = shared.push_run(store, "cand-run")
        again = shared.push_run(store, "cand-run")
        base_push = shared.push_run(store, "base-run")  # the override names it too: once
    assert (first.added["overrides"], first.added["human_labels"]) == (1, 3)
    assert again.rows == 0 and base_push.added["overrides"] == 0
    assert _shared_rows(_uri(tmp_path), "overrides").height == 1
    with open_store(tmp_path / "b.duckdb", write=True) as store:
        pulled = shared.pull(store, "cand-run")
        repeat = shared.pull(store, "cand-run")
        (override,) = store.overrides("base-run", "cand-run").iter_rows(named=True)
        labels = store.human_labels()
    assert (pulled.added["overrides"], pulled.added["human_labels"]) == (1, 3)
    assert repeat.rows == 0
    assert (override["who"], override["findings"]) == ("ana", ["k1"])
    assert sorted(labels["label"].to_list()) == [3, 3, 3]
    # relabelled in job a and pushed: job b's pull replaces its labels with the newer values
    with open_store(tmp_path / "a.duckdb", write=True) as store:
        store.save_human_labels(_labels(texts, 5))
    with open_store(tmp_path / "a.duckdb", read_only=True) as store:
        assert shared.push_run(store, "cand-run").added["human_labels"] == 3
    assert _shared_rows(_uri(tmp_path), "human_labels").height == 6  # history is kept
    with open_store(tmp_path / "b.duckdb", write=True) as store:
        assert shared.pull(store, "cand-run").added["human_labels"] == 3
        assert shared.pull(store, "cand-run").rows == 0
        assert sorted(store.human_labels()["label"].to_list()) == [5, 5, 5]


def test_only_a_complete_run_is_pushed_and_an_unknown_pull_is_one_line(tmp_path: Path) -> None:
    write_store(tmp_path / "a.duckdb", _runs("r", 1), status="running")
    shared = open_shared_store(_uri(tmp_path))
    refused = pytest.raises(StoreError, match="r0 is running: only a complete run is pushed")
    with open_store(tmp_path / "a.duckdb", read_only=True) as store, refused:
        shared.push_run(store, "r0")
    unknown = pytest.raises(StoreError, match="no published run or suite baseline 'nope'")
    with open_store(tmp_path / "b.duckdb", write=True) as store, unknown:
        shared.pull(store, "nope")
    assert _shared_rows(_uri(tmp_path), "outputs").height == 0


_PUSHER = """
import sys, time
from pathlib import Path
from evalkit.store import open_store
from evalkit.store.shared import open_shared_store
db, uri, go = sys.argv[1:4]
shared = open_shared_store(uri)
Path(go + "." + Path(db).stem).touch()  # ready
while not Path(go).exists():
    time.sleep(0.005)
conflicts = 0
with open_store(db, read_only=True) as store:
    for run_id in sys.argv[4:]:
        conflicts += shared.push_run(store, run_id).conflicts
print(conflicts)
"""


def _stderrs(procs: list[subprocess.Popen[str]]) -> list[str]:
    """The last lines each (ended) process wrote to stderr."""
    return [p.communicate(timeout=60)[1][-2000:] for p in procs]


def _start_together(tmp_path: Path, uri: str, jobs: list[tuple[Path, list[str]]]) -> list[str]:
    """Start one pusher per job, release them at the same moment, return their stdout."""
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _PUSHER, str(db), uri, str(go), *run_ids],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for db, run_ids in jobs
    ]
    try:
        deadline = time.monotonic() + 120
        while not all(Path(f"{go}.{db.stem}").exists() for db, _ in jobs):
            assert time.monotonic() < deadline, "the pushers never got ready"
            if any(p.poll() is not None for p in procs):  # one died: stop the other, say why
                for p in procs:
                    if p.poll() is None:
                        p.kill()
                pytest.fail(f"a pusher exited before it was ready: {_stderrs(procs)}")
            time.sleep(0.01)
        go.touch()
        outs = [p.communicate(timeout=300) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert [p.returncode for p in procs] == [0, 0], outs
    return [out for out, _ in outs]


#: sqlite: one machine; postgresql: a team's catalog; postgresql+s3: the team set-up the README
#: names (a PostgreSQL catalog, the warehouse on S3 — here a moto server on 127.0.0.1).
@pytest.mark.parametrize("catalog", ["sqlite", "postgresql", "postgresql+s3"])
def test_two_processes_pushing_at_once_lose_and_duplicate_nothing(
    tmp_path: Path, catalog: str, request: pytest.FixtureRequest
) -> None:
    uri = _uri(tmp_path) if catalog == "sqlite" else request.getfixturevalue("postgres_uri")
    if catalog.endswith("+s3"):
        catalog = uri.split("?", 1)[0]
        uri = warehouse_uri(catalog, request.getfixturevalue("s3_endpoint"), "race-bucket")
    runs = _runs("r", 6)
    write_store(tmp_path / "a.duckdb", runs[:4])
    write_store(tmp_path / "b.duckdb", runs[2:])  # r2 and r3 are pushed by both, at once
    ids = [r.run_id for r in runs]
    conflicts = _start_together(
        tmp_path, uri, [(tmp_path / "a.duckdb", ids[:4]), (tmp_path / "b.duckdb", ids[2:][::-1])]
    )
    outputs = _shared_rows(uri, "outputs")
    assert sorted(_shared_rows(uri, "runs")["run_id"]) == ids
    assert outputs.group_by("run_id").len().sort("run_id")["len"].to_list() == [80] * 6
    assert outputs.select(_KEYS["outputs"]).is_duplicated().sum() == 0
    scores = _shared_rows(uri, "scores")
    assert scores.height == 6 * 40 * 2 * 2  # runs x cases x replays x scorers
    assert not scores.select(_KEYS["scores"]).is_duplicated().any()
    assert (tmp_path / "wh").exists() == (catalog == "postgresql")  # s3: no local warehouse
    print("conflicts retried per process:", conflicts)


def test_a_namespace_another_process_makes_between_check_and_insert_is_taken_as_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pyiceberg's SQL catalog checks that the namespace is missing, then inserts it: the other
    process's insert in between broke the unique key and stopped a CI pusher (seen once)."""
    from pyiceberg.catalog.sql import SqlCatalog

    uri = parse_store_uri(_uri(tmp_path))
    open_catalog(uri)  # the other process: its namespace is in the catalog now
    exists = SqlCatalog.namespace_exists
    asked: list[bool] = []

    def missing_on_the_first_check(self: SqlCatalog, namespace: str) -> bool:
        asked.append(exists(self, namespace))
        return asked[-1] and len(asked) > 1  # the first check ran before the other's insert

    monkeypatch.setattr(SqlCatalog, "namespace_exists", missing_on_the_first_check)
    catalog = open_catalog(uri)
    assert asked == [True, True]  # the insert broke the key once, the retry found it made
    assert catalog.list_namespaces() == [("evalkit",)]


_KILLED_PUSHER = """
import os, signal, sys
from pyiceberg.catalog.sql import SqlCatalog
from evalkit.store import open_store
from evalkit.store.shared import open_shared_store
write = SqlCatalog._write_metadata
def write_then_die(metadata, io, metadata_path):
    write(metadata, io, metadata_path)  # the data and metadata files are written ...
    if "/scores-" in metadata_path or "/scores/" in metadata_path:
        os.kill(os.getpid(), signal.SIGKILL)  # ... and the catalog never hears of them
SqlCatalog._write_metadata = staticmethod(write_then_die)
with open_store(sys.argv[1], read_only=True) as store:
    open_shared_store(sys.argv[2]).push_run(store, sys.argv[3])
"""


def test_a_pusher_killed_mid_commit_leaves_readable_tables_and_a_repush_completes(
    tmp_path: Path,
) -> None:
    write_store(tmp_path / "a.duckdb", _runs("k", 1, cases=300))
    uri = _uri(tmp_path)
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED_PUSHER, str(tmp_path / "a.duckdb"), uri, "k0"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert _shared_rows(uri, "outputs").height == 600  # committed before the kill
    assert _shared_rows(uri, "scores").height == 0  # its commit never reached the catalog
    assert _shared_rows(uri, "runs").height == 0  # so the run is not published
    shared = open_shared_store(uri)
    with pytest.raises(StoreError, match="no published run"):
        shared.resolve_run("k0")
    with open_store(tmp_path / "a.duckdb", read_only=True) as store:
        repushed = shared.push_run(store, "k0")
    assert repushed.added["outputs"] == 0 and repushed.added["scores"] == 1200
    assert repushed.added["runs"] == 1
    assert _shared_rows(uri, "outputs").height == 600
    assert _shared_rows(uri, "scores").height == 1200


def _decision(db: Path, *refs: str):
    with open_store(db, read_only=True) as store:
        _, decision = gate_pair(store, *(refs if len(refs) == 2 else (None, *refs)), None)
    return decision


def test_a_pr_gate_against_the_pulled_baseline_decides_as_the_two_run_local_gate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, cand = seed000_runs()
    write_store(tmp_path / "main.duckdb", [base, cand])
    with open_store(tmp_path / "main.duckdb", write=True) as store:
        store.promote_baseline("demo", "base-run", "ana", "nightly 41 reviewed")
    local = _decision(tmp_path / "main.duckdb", "base-run", "cand-run")
    assert local.blocked and local.findings  # seed 000 breaks billing and a must_pass case
    uri = _uri(tmp_path)
    assert main(["push", "base-run", "--db", str(tmp_path / "main.duckdb"), "--store", uri]) == 0
    write_store(tmp_path / "pr.duckdb", [cand])  # the PR job ran only the candidate
    assert main(["pull", "demo", "--db", str(tmp_path / "pr.duckdb"), "--store", uri]) == 0
    assert "pulled baseline of suite 'demo': run base-run" in capsys.readouterr().out
    pulled = _decision(tmp_path / "pr.duckdb", "cand-run")  # against the promoted baseline
    assert (pulled.blocked, pulled.unverified, pulled.n_paired) == (
        local.blocked, local.unverified, local.n_paired,
    )  # fmt: skip
    assert [(f.tier, f.message) for f in pulled.findings] == [
        (f.tier, f.message) for f in local.findings
    ]


def test_a_password_in_the_config_is_refused_without_showing_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_store(tmp_path / "a.duckdb", _runs("r", 1))
    config = tmp_path / "evalkit.yaml"
    config.write_text(
        "suite: demo\nsystem: {provider: openai, model: m}\n"
        "store: {shared: 'postgresql://ci:hunter2@db.internal/evalkit?warehouse=s3://b/w'}\n"
    )
    args = ["push", "r0", "--db", str(tmp_path / "a.duckdb"), "--config", str(config)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"{config}: store.shared" in err and "holds a password" in err
    assert "hunter2" not in err
    with pytest.raises(ConfigError, match=r"s3\.secret-access-key is a credential"):
        parse_store_uri("sqlite:///c.db?s3.secret-access-key=abc")


def test_the_store_flag_wins_over_the_config(tmp_path: Path) -> None:
    write_store(tmp_path / "a.duckdb", _runs("r", 1))
    config = tmp_path / "evalkit.yaml"
    config.write_text(
        "suite: demo\nsystem: {provider: openai, model: m}\n"
        f"store: {{shared: 'sqlite:///{tmp_path / 'from-config.db'}'}}\n"
    )
    args = ["push", "r0", "--db", str(tmp_path / "a.duckdb"), "--config", str(config)]
    assert main([*args, "--store", _uri(tmp_path)]) == 0
    assert _shared_rows(_uri(tmp_path), "runs")["run_id"].to_list() == ["r0"]
    assert not (tmp_path / "from-config.db").exists()
    assert main(args) == 0  # without the flag: the config's
    assert (tmp_path / "from-config.db").exists()


@pytest.fixture
def project(project_factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An ``evalkit init`` project whose config names a shared store; the cwd is its parent."""
    shared = f"sqlite:///{tmp_path / 'team' / 'catalog.db'}"
    made = project_factory(config=f"\nstore: {{shared: '{shared}'}}\n")
    monkeypatch.chdir(tmp_path)
    return made.config


def test_a_second_job_asks_nothing_the_first_asked(project: Path, demo_server, tmp_path) -> None:
    def job(db: str, label: str) -> int:
        demo_server.reset_stats()
        args = ["--config", str(project), "--db", db, "--set",
                f"system.base_url={demo_server.base_url}"]  # fmt: skip
        assert main(["run", "--label", label, "--no-progress", *args]) == 0
        return int(demo_server.stats()["requests"])

    first = job(str(tmp_path / "job1.duckdb"), "ci-shard")
    assert first > 0
    assert main(["push", "ci-shard", "--db", str(tmp_path / "job1.duckdb"),
                 "--config", str(project)]) == 0  # fmt: skip
    second = job(str(tmp_path / "job2.duckdb"), "ci-shard")
    assert second == 0
    with open_store(tmp_path / "job2.duckdb", read_only=True) as store:
        outputs = store.outputs("ci-shard")
    assert outputs.height and outputs["cached"].all()  # marked as served from the cache


def test_a_run_names_the_shared_store_with_the_store_flag(
    project_factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, demo_server, capsys
) -> None:
    """`evalkit run --store URI` (a config without `store:`): the first job publishes what it
    asked, a second job in a fresh store asks nothing; a password in the flag is refused."""
    config = str(project_factory().config)
    monkeypatch.chdir(tmp_path)  # the job's directory: the store's relative path is under it

    def job(db: str, *store: str) -> int:
        demo_server.reset_stats()
        code = main(["run", "--label", "pr", "--no-progress", "--config", config, "--db", db,
                     "--set", f"system.base_url={demo_server.base_url}", *store])  # fmt: skip
        assert code == 0
        return int(demo_server.stats()["requests"])

    team = ["--store", "sqlite:///team/catalog.db"]
    first = job("job1.duckdb", *team)
    assert first > 0 and (tmp_path / "team" / "catalog.db").is_file()
    assert job("job2.duckdb", *team) == 0
    assert job("job3.duckdb") == first  # without the flag: no shared store, asked again
    capsys.readouterr()
    password = "postgresql://ci:hunter2@db.internal/evalkit?warehouse=s3://b/w"
    assert main(["run", "--config", config, "--db", "job4.duckdb", "--store", password]) == 2
    err = capsys.readouterr().err
    assert "--store" in err and "holds a password" in err and "hunter2" not in err
    assert not (tmp_path / "job4.duckdb").exists()


# -- the warehouse on S3: moto's server on 127.0.0.1, keys only in the environment --------------


@pytest.fixture
def s3_endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    set_test_keys(monkeypatch)
    with moto_server() as server:
        yield endpoint(server)


def test_a_warehouse_on_s3_round_trips_with_keys_from_the_environment(
    tmp_path: Path, s3_endpoint: str
) -> None:
    import pyarrow.fs as pafs

    base, _ = seed000_runs()
    write_store(tmp_path / "a.duckdb", [base])
    uri = warehouse_uri(f"sqlite:///{tmp_path / 'catalog.db'}", s3_endpoint, "team-bucket")
    fs = pafs.S3FileSystem(endpoint_override=s3_endpoint.removeprefix("http://"),
                           scheme="http", region="us-east-1")  # fmt: skip
    shared = open_shared_store(uri)
    with open_store(tmp_path / "a.duckdb", read_only=True) as store:
        assert shared.push_run(store, "base-run").added["outputs"] == 600
    with open_store(tmp_path / "b.duckdb", write=True) as store:
        assert shared.pull(store, "base-run").added["scores"] == 1200
    stored = fs.get_file_info(pafs.FileSelector("team-bucket/evalkit", recursive=True))
    assert any(i.path.endswith(".parquet") and "/outputs/data/" in i.path for i in stored)
    assert not (tmp_path / "warehouse").exists()  # nothing went to a local directory


# -- the catalog on PostgreSQL: Debian's server, started by the test on 127.0.0.1 ---------------


def _pg_bin() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if not found:
        # the machine image has Debian's PostgreSQL: a missing server fails, never skips
        pytest.fail("no PostgreSQL server binaries (apt-get install postgresql)")
    return found[-1].parent


@pytest.fixture(scope="module")
def postgres_server() -> Iterator[tuple[Path, int]]:
    """A throwaway PostgreSQL cluster on a free loopback port (trust auth: no password
    anywhere), stopped and deleted after the module."""
    import shutil
    import socket
    import tempfile

    bin_dir = _pg_bin()
    root = Path(tempfile.mkdtemp(prefix="evalkit-pg-"))  # not under pytest's 0700 tmp dirs
    as_owner: list[str] = []
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root: run it as its own user
        shutil.chown(root, "postgres")
        as_owner = ["runuser", "-u", "postgres", "--"]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    data = root / "data"

    def pg(*args: str) -> None:
        subprocess.run([*as_owner, *args], check=True, capture_output=True, timeout=120)

    pg(str(bin_dir / "initdb"), "-D", str(data), "-U", "evalkit", "--auth=trust", "-E", "UTF8")
    options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1"
    pg(str(bin_dir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(root / "log"), "-w",
       "start")  # fmt: skip
    try:
        yield bin_dir, port
    finally:
        subprocess.run([*as_owner, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate",
                        "-w", "stop"], capture_output=True, timeout=120)  # fmt: skip
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def postgres_uri(postgres_server: tuple[Path, int], tmp_path: Path) -> str:
    """A fresh database of the test server, as a shared-store URI (its warehouse a directory)."""
    bin_dir, port = postgres_server
    name = f"t{time.monotonic_ns()}"
    subprocess.run([str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U",
                    "evalkit", name], check=True, capture_output=True, timeout=60)  # fmt: skip
    return f"postgresql+psycopg2://evalkit@127.0.0.1:{port}/{name}?warehouse={tmp_path / 'wh'}"


def test_push_and_pull_through_a_postgresql_catalog(tmp_path: Path, postgres_uri: str) -> None:
    base, _ = seed000_runs()
    write_store(tmp_path / "a.duckdb", [base])
    shared = open_shared_store(postgres_uri)
    with open_store(tmp_path / "a.duckdb", read_only=True) as store:
        assert shared.push_run(store, "base-run").added["outputs"] == 600
        assert shared.push_run(store, "base-run").rows == 0
    with open_store(tmp_path / "b.duckdb", write=True) as store:
        assert shared.pull(store, "base").added["scores"] == 1200
    assert shared.uri.shown.startswith("postgresql+psycopg2://127.0.0.1:")  # no user shown


def test_promotions_in_the_shared_store_need_a_published_run_and_keep_history(
    tmp_path: Path,
) -> None:
    write_store(tmp_path / "a.duckdb", _runs("r", 2))
    shared = open_shared_store(_uri(tmp_path))
    with pytest.raises(StoreError, match="run r0 is not pushed; push it first"):
        shared.promote("demo", "r0", "ana", "first baseline")
    with open_store(tmp_path / "a.duckdb", read_only=True) as store:
        for run_id in ("r0", "r1"):
            shared.push_run(store, run_id)
    shared.promote("demo", "r0", "ana", "first baseline", policy={"alpha": 0.05})
    shared.promote("demo", "r1", "bo", "prompt v3 reviewed")
    assert shared.current_baseline("demo") == "r1"
    history = shared.baselines("demo")
    assert history.select("run_id", "who", "reason").rows() == [
        ("r1", "bo", "prompt v3 reviewed"), ("r0", "ana", "first baseline"),
    ]  # fmt: skip
    assert json.loads(history["policy"][1]) == {"alpha": 0.05}
    with open_store(tmp_path / "b.duckdb", write=True) as store:
        assert shared.pull(store, "demo").run_id == "r1"
        assert store.baselines("demo").height == 2  # the history comes along


# -- Store.import_rows: the pull's one write --------------------------------------------------


def _cache_frame(keys: list[str], response: str = "{}") -> pl.DataFrame:
    import datetime as dt

    now = dt.datetime.now(dt.UTC)
    return pl.DataFrame({"cache_key": keys, "response": [response] * len(keys),
                         "created_at": [now] * len(keys)})  # fmt: skip


def test_import_rows_checks_every_table_and_writes_all_or_nothing(tmp_path: Path) -> None:
    with open_store(tmp_path / "a.duckdb", write=True) as store:
        with pytest.raises(StoreError, match=r"into 'response_cahce': no such table \(did you"):
            store.import_rows({"response_cahce": _cache_frame(["k"])})
        with pytest.raises(StoreError, match="into response_cache: extra column x"):
            store.import_rows({"response_cache": _cache_frame(["k"]).with_columns(x=pl.lit(1))})
        with pytest.raises(StoreError, match="into response_cache: missing column response"):
            store.import_rows({"response_cache": _cache_frame(["k"]).drop("response")})
        bad_flakes = pl.DataFrame({c: ["not a number"] for c in TABLES["flakes"].columns})
        with pytest.raises(StoreError, match="cannot import rows"):  # rolled back whole
            store.import_rows({"response_cache": _cache_frame(["k1"]), "flakes": bad_flakes})
        assert store.cache_get(["k1"]) == {}
        reordered = _cache_frame(["k1", "k2"]).select("response", "created_at", "cache_key")
        assert store.import_rows({"response_cache": reordered.to_arrow()}) == {
            "response_cache": 2
        }  # Arrow or Polars, columns in any order
        assert store.cache_get(["k1", "k2"]) == {"k1": "{}", "k2": "{}"}
        newer = {"response_cache": _cache_frame(["k2"], '{"v": 2}')}
        store.import_rows(newer, replace_on={"response_cache": ["cache_key"]})
        assert store.query("SELECT count(*) AS n FROM response_cache")["n"][0] == 2
        assert store.cache_get(["k2"]) == {"k2": '{"v": 2}'}  # the newer copy replaced it
    with (
        open_store(tmp_path / "a.duckdb", read_only=True) as store,
        pytest.raises(StoreError, match="read-only"),
    ):
        store.import_rows({"response_cache": _cache_frame(["k3"])})

"""``evalkit run --shard K/N`` + ``evalkit runs merge`` (evalkit.run.sharded, evalkit.run.merging):
the same outputs, scores and gate decision as one local run; a killed shard run again stores
every (case, replay) exactly once; replicas share the load. No Ray here."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from distributed_support import (
    CANDIDATE_PROMPT,
    CONFIG,
    demo_args,
    exactly_once,
    gate_signature,
    run_local,
    stored,
)

from evalkit.cli import main
from evalkit.demo.server import DemoServer, start_demo_server
from evalkit.store import open_store
from evalkit.store.parts import PartsRoot


@pytest.fixture(scope="module")
def noisy_server() -> Iterator[DemoServer]:
    """The demo simulator with its seeded noise on (so runs could differ if they were wrong)."""
    with start_demo_server(noise=True, in_thread=True) as server:
        yield server


def test_three_shards_and_a_merge_equal_one_local_run(
    noisy_server: DemoServer, tmp_path: Path
) -> None:
    db = tmp_path / "parity.duckdb"
    base = run_local(noisy_server, db, "base")
    local = run_local(noisy_server, db, "cand-local", "--prompt", CANDIDATE_PROMPT)
    noisy_server.reset_stats()
    parts = str(tmp_path / "parts")
    for k in (1, 2, 3):
        args = demo_args(noisy_server, "--prompt", CANDIDATE_PROMPT, "--shard", f"{k}/3")
        common = ["--run-id", "cand-sharded", "--parts", parts, "--label", "cand-sharded"]
        assert main(["run", *args, *common, "--no-cache", "--chunk-size", "7"]) == 0
    for _ in range(2):  # the merge, twice: the second adds nothing
        assert main(["runs", "merge", "cand-sharded", "--parts", parts, "--db", str(db)]) == 0
    local_outputs, local_scores = stored(db, local)
    shard_outputs, shard_scores = stored(db, "cand-sharded")
    assert local_outputs.height == 91 and local_outputs.equals(shard_outputs)
    assert local_scores.equals(shard_scores)
    decision = gate_signature(db, base, local)
    assert decision[0] is True  # the demo's v2 prompt regresses: a decision worth comparing
    assert gate_signature(db, base, "cand-sharded") == decision
    with open_store(db, read_only=True) as store:
        assert store.run_status("cand-sharded") == "complete"
        merged = store.query("SELECT count(*) AS n FROM merged_parts WHERE part LIKE 'outputs/%'")[
            "n"
        ][0]
        shards_manifests = PartsRoot(parts).manifests("cand-sharded")
        assert {m.config_hash for m in shards_manifests} == {store.manifest(local).config_hash}
    assert merged == len(PartsRoot(parts).parts("cand-sharded", "outputs")) == 15  # 3 × ⌈30/7⌉


def test_a_shard_needs_a_run_id_and_the_same_configuration(
    noisy_server: DemoServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parts = ["--parts", str(tmp_path / "parts"), "--tier", "smoke"]
    assert main(["run", *demo_args(noisy_server, "--shard", "1/2"), *parts]) == 2
    assert "needs --run-id" in capsys.readouterr().err
    assert main(["run", *demo_args(noisy_server, "--shard", "1/2", "--run-id", "r"), *parts]) == 0
    other = demo_args(noisy_server, "--shard", "2/2", "--run-id", "r", "--prompt", CANDIDATE_PROMPT)
    assert main(["run", *other, *parts]) == 2
    assert "another configuration" in capsys.readouterr().err


def test_a_killed_shard_run_again_stores_each_case_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kill a shard mid-run (SIGKILL), run it again with the same run id, merge twice: every
    (case, replay) is stored once, and the server was asked again only for the chunk that was
    in flight."""
    chunk = 10
    with start_demo_server(noise=False, latency_ms=60, in_thread=True) as server:
        parts = tmp_path / "parts"
        command = [
            sys.executable, "-m", "evalkit.cli", "run", *demo_args(server), "--shard", "1/1",
            "--run-id", "killed", "--parts", str(parts), "--chunk-size", str(chunk),
            "--no-cache", "--set", "concurrency=4",
        ]  # fmt: skip
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        root = PartsRoot(parts)
        deadline = time.monotonic() + 60
        while len(root.parts("killed", "outputs")) < 2 and time.monotonic() < deadline:
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            time.sleep(0.02)
        os.kill(process.pid, signal.SIGKILL)
        process.wait(10)
        done_before = len(root.completed_keys("killed"))
        assert 0 < done_before < 91
        first_requests = server.stats()["requests"]
        monkeypatch.chdir(tmp_path)  # run again in this process: the kill was the other's
        assert main([str(word) for word in command[3:]]) == 0
        counts = server.stats()["by_content"]
        db = tmp_path / "k.duckdb"
        for _ in range(2):
            assert main(["runs", "merge", "killed", "--parts", str(parts), "--db", str(db)]) == 0
    outputs, distinct, scores, distinct_scores = exactly_once(db, "killed")
    assert outputs == distinct == 91 and scores == distinct_scores
    asked_twice = sum(n - 1 for n in counts.values() if n > 1)
    # at most one chunk's requests (a case takes up to 3 turns + judge calls here) again
    assert asked_twice <= 4 * chunk and first_requests > 0


def test_a_shards_second_job_asks_nothing_the_first_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two CI jobs each run the demo as one shard with the team's shared store configured; the
    first publishes what it asked as it ends (no `evalkit push`), in one commit for its five
    chunks; the second asks the endpoint nothing the first asked, and its merged run is all
    served from the cache."""
    uri = f"sqlite:///{tmp_path / 'team' / 'catalog.db'}?warehouse={tmp_path / 'team' / 'wh'}"
    with start_demo_server(noise=False, in_thread=True) as server:

        def job(run_id: str) -> int:
            server.reset_stats()
            args = demo_args(server, "--set", f"store.shared={uri}", "--shard", "1/1")
            parts = str(tmp_path / run_id / "parts")
            assert main(["run", *args, "--run-id", run_id, "--parts", parts,
                         "--chunk-size", "20"]) == 0  # fmt: skip
            asked = int(server.stats()["requests"])
            db = str(tmp_path / run_id / "store.duckdb")
            assert main(["runs", "merge", run_id, "--parts", parts, "--db", db]) == 0
            return asked

        capsys.readouterr()
        first = job("job-1")
        assert first > 91  # the demo's tool loops and judge calls: more than one per case
        published = [line for line in capsys.readouterr().err.splitlines() if "published" in line]
        assert len(published) == 1 and "(1 commit," in published[0], published
        second = job("job-2")
        assert "answered by the team's shared cache" in capsys.readouterr().out
    assert second == 0
    with open_store(tmp_path / "job-2" / "store.duckdb", read_only=True) as store:
        outputs = store.outputs("job-2")
        kept = store.query("SELECT count(*) AS n FROM response_cache")["n"][0]
    assert outputs.height == 91 and outputs["cached"].all()
    assert kept >= 91  # the entries the team's cache served are kept in the local store too


def test_run_id_alone_is_refused(
    noisy_server: DemoServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(["run", *demo_args(noisy_server), "--run-id", "x", "--db", str(tmp_path / "d")]) == 2
    )
    assert "--run-id names a run whose work is split" in capsys.readouterr().err


def test_replicas_share_the_requests_of_a_run(tmp_path: Path) -> None:
    """``system.base_urls``: two simulators serve one run, each taking part of the requests,
    and the outputs are those of a run against one of them."""
    with (
        start_demo_server(noise=False, in_thread=True) as one,
        start_demo_server(noise=False, in_thread=True) as two,
    ):
        db = tmp_path / "r.duckdb"
        single = run_local(one, db, "single", "--tier", "smoke")
        one.reset_stats()
        fleet = f"system.base_urls=[{one.base_url}, {{url: {two.base_url}, max_in_flight: 2}}]"
        args = [*demo_args(one, "--tier", "smoke"), "--set", fleet]
        assert main(["run", *args, "--db", str(db), "--label", "fleet", "--no-cache",
                     "--no-progress"]) == 0  # fmt: skip
        served = one.stats()["requests"], two.stats()["requests"]
    assert min(served) > 0 and sum(served) >= 16
    single_outputs, _ = stored(db, single)
    with open_store(db, read_only=True) as store:
        fleet_id = store.resolve_run("fleet")
        assert store.manifest(fleet_id).requests["replicas"][1]["max_in_flight"] == 2
        assert store.manifest(fleet_id).config_hash == store.manifest(single).config_hash
    fleet_outputs, _ = stored(db, fleet_id)
    assert single_outputs.equals(fleet_outputs)


def test_a_shard_run_again_sets_bad_parts_aside_and_redoes_their_chunks(
    noisy_server: DemoServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A shard resuming over its parts trusts them no more than the merge: a truncated scores
    part, an outputs part of random bytes and a part of ghost cases are each set aside with
    one line naming it, their chunks run again, and the merge then takes every part left."""
    parts = tmp_path / "parts"
    shard = [*demo_args(noisy_server, "--tier", "smoke"), "--shard", "1/1", "--run-id", "bad"]
    shard += ["--parts", str(parts), "--chunk-size", "4", "--no-cache"]
    assert main(["run", *shard]) == 0
    root = PartsRoot(parts)
    first, second, *_ = root.parts("bad", "outputs")
    truncated = next(p for p in root.parts("bad", "scores") if p.chunk_id == first.chunk_id)
    data = Path(truncated.path).read_bytes()
    Path(truncated.path).write_bytes(data[: len(data) // 2])
    Path(second.path).write_bytes(os.urandom(2048))
    ghost = pl.read_parquet(first.path).with_columns(pl.lit("ghost-1").alias("case_id"))
    root.write_part("bad", "outputs", "ghost", ghost.to_arrow(), 1)
    capsys.readouterr()
    noisy_server.reset_stats()

    assert main(["run", *shard]) == 0
    captured = capsys.readouterr()
    aside = [line for line in captured.err.splitlines() if "set aside" in line]
    for part in (first, truncated, second):  # a bad attempt goes aside whole
        assert sum(line.startswith(f"evalkit: {part.path}: ") for line in aside) == 1, aside
    assert any("ghost-1.parquet" in line and "ghost-1" in line for line in aside), aside
    assert "in 2 chunks" in captured.out  # only the two chunks with a bad part ran again
    pieces = root.parts("bad", "cases")  # a piece per chunk (of 4), none written again
    assert len(pieces) == 4 and {p.attempt for p in pieces} == {1}
    assert (
        main(["runs", "merge", "bad", "--parts", str(parts), "--db", str(tmp_path / "b.duckdb")])
        == 0
    )
    outputs, distinct, scores, distinct_scores = exactly_once(tmp_path / "b.duckdb", "bad")
    assert outputs == distinct == 16 and scores == distinct_scores > 0
    with open_store(tmp_path / "b.duckdb", read_only=True) as store:
        assert store.run_status("bad") == "complete"


def _max_per_window(arrivals: list[float], window: float = 1.0) -> int:
    """The most requests that arrived within any ``window`` seconds (a closed interval)."""
    times = sorted(arrivals)
    best, start = 0, 0
    for end, t in enumerate(times):
        while t - times[start] > window:
            start += 1
        best = max(best, end - start + 1)
    return best


def _two_shards_at_once(server: DemoServer, parts: Path, rpm: int, *extra: str) -> list[float]:
    """Shards 1/2 and 2/2 of one run, at the same time (two threads), against ``server``
    with ``rate_limit.requests_per_minute = rpm``; the server's arrival times."""
    import threading

    server.reset_stats()
    codes: list[int] = []

    def shard(k: int) -> None:
        args = [*demo_args(server, "--tier", "smoke"), "--set", "replays=2", "--set",
                f"rate_limit={{requests_per_minute: {rpm}}}", "--shard", f"{k}/2", "--run-id",
                "paced", "--parts", str(parts), "--no-cache", *extra]  # fmt: skip
        codes.append(main(["run", *args]))

    threads = [threading.Thread(target=shard, args=(k,)) for k in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert codes == [0, 0]
    return server.stats()["arrivals"]


def test_two_shards_together_stay_within_the_endpoints_rate_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pacing is read where the shards apply it, the moments their limiters let a request
    go: the server's arrival times add its own scheduling, and on a loaded machine a request
    it accepted late arrives bunched with the next ones (11 in a second seen at load 11)."""
    from evalkit.retries import RateLimiter

    granted: list[float] = []
    acquire = RateLimiter.acquire

    async def timed(self: RateLimiter, tokens: int = 0) -> None:
        await acquire(self, tokens)
        granted.append(time.monotonic())

    monkeypatch.setattr(RateLimiter, "acquire", timed)
    rpm = 480  # 8 requests/s for the endpoint, whatever the number of shards
    with start_demo_server(noise=False) as server:
        arrivals = _two_shards_at_once(server, tmp_path / "split", rpm)
        assert len(arrivals) >= 32 and len(granted) == len(arrivals)  # 16 cases × 2 replays
        assert _max_per_window(granted) <= rpm / 60 + 2  # each shard's own +1 at most
        out = capsys.readouterr().out
        assert out.count("rate limit split over 2 shards: 240 requests/min in this shard") == 2
        # --shard-rate whole: each shard paces to the whole limit, twice the rate together
        granted.clear()
        alone = _two_shards_at_once(server, tmp_path / "whole", rpm, "--shard-rate", "whole")
        assert len(granted) == len(alone) and _max_per_window(granted) > rpm / 60 + 2
        assert "rate limit not split: each of 2 shards" in capsys.readouterr().out


def test_a_ray_run_that_ends_incomplete_exits_non_zero(
    noisy_server: DemoServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """The CLI's exit code, whatever made the run incomplete (no Ray needed: the engine's
    result is stood in for)."""
    from evalkit.run.engines import ray_engine
    from evalkit.run.summary import RunSummary

    def incomplete(*_: object, **__: object) -> RunSummary:
        return RunSummary(
            run_id="r1", label="half", config_hash="c" * 64, cases=0, outputs=0, passed=0,
            failed=0, errored=0, cache_hits=0, requests=0, retries=0, resumed_skipped=0,
            wall_s=1.0, prompt_tokens=0, completion_tokens=0, cost_usd=0.0,
            mean_latency_ms=0.0, expected_outputs=2730,
        )  # fmt: skip

    monkeypatch.setattr(ray_engine, "run_on_ray", incomplete)
    args = [*demo_args(noisy_server), "--engine", "ray", "--db", str(tmp_path / "d.duckdb")]
    assert main(["run", *args, "--parts", str(tmp_path / "parts")]) == 1
    assert "run r1 is incomplete: 0 of 2730 outputs stored" in capsys.readouterr().err


def _through_the_index(monkeypatch: pytest.MonkeyPatch, index: Path) -> None:
    """``evalkit run --shard`` reading the corpus through a case index of this test's own (the
    shard's loading path, ``sharding.load_run_corpus``, reads ``$EVALKIT_CASE_INDEX``)."""
    monkeypatch.setenv("EVALKIT_CASE_INDEX", str(index))


def _built(out: str) -> tuple[int, int, int]:
    """(cases in the share, cases built, cases read to make the index) from a shard's summary."""
    line = next(line for line in out.splitlines() if "in this shard's share" in line)
    words = line.split()
    indexed = int(words[words.index("read") - 1]) if "read" in words else 0
    return int(words[0]), int(words[words.index("cases", 6) - 1]), indexed


def test_shards_through_the_case_index_merge_to_exactly_the_local_run(
    noisy_server: DemoServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """No index prepared: the first shard makes it (every case read once, none kept), the
    others find it warm; each shard builds only its share's cases and writes a cases part of
    those alone; merged, the run is the local run (outputs, scores, cases, gate decision)."""
    db = tmp_path / "i.duckdb"
    base = run_local(noisy_server, db, "base")
    local = run_local(noisy_server, db, "cand-local", "--prompt", CANDIDATE_PROMPT)
    noisy_server.reset_stats()
    parts = str(tmp_path / "parts")
    capsys.readouterr()
    built = []
    with monkeypatch.context() as patch:
        _through_the_index(patch, tmp_path / "index")
        for k in (1, 2, 3):
            args = demo_args(noisy_server, "--prompt", CANDIDATE_PROMPT, "--shard", f"{k}/3")
            common = ["--run-id", "indexed", "--parts", parts, "--label", "indexed"]
            assert main(["run", *args, *common, "--no-cache", "--chunk-size", "7"]) == 0
            built.append(_built(capsys.readouterr().out))
    # the index made once, cold: the 91 cases and the 7 sealed ones (the corpus summary
    # covers sealed/ too, so one summary serves a run with --sealed and one without)
    assert [indexed for *_, indexed in built] == [98, 0, 0]
    assert all(share == made < 91 for share, made, _ in built)  # the share alone, cold or warm
    root = PartsRoot(parts)
    heights = {k: 0 for k in (1, 2, 3)}  # each shard's pieces (a piece per chunk): its share
    for part in root.parts("indexed", "cases"):
        heights[int(part.chunk_id.split("-")[1])] += root.read_frame(part).height
    assert list(heights.values()) == [share for share, *_ in built] and max(heights.values()) < 91
    assert main(["runs", "merge", "indexed", "--parts", parts, "--db", str(db)]) == 0
    local_outputs, local_scores = stored(db, local)
    shard_outputs, shard_scores = stored(db, "indexed")
    assert local_outputs.height == 91 and local_outputs.equals(shard_outputs)
    assert local_scores.equals(shard_scores)
    assert gate_signature(db, base, "indexed") == gate_signature(db, base, local)
    with open_store(db, read_only=True) as store:
        assert store.run_status("indexed") == "complete"
        sql = "SELECT case_id, case_hash FROM cases WHERE run_id = ? ORDER BY case_id"
        assert store.query(sql, ["indexed"]).equals(store.query(sql, [local]))
        assert store.manifest("indexed").config_hash == store.manifest(local).config_hash


def _two_smoke_shards(server: DemoServer, parts: Path) -> None:
    for k in (1, 2):
        args = [*demo_args(server, "--tier", "smoke"), "--shard", f"{k}/2", "--run-id", "pair"]
        assert main(["run", *args, "--parts", str(parts), "--no-cache"]) == 0


def test_the_merge_takes_a_share_only_as_recorded_and_checks_the_union(
    noisy_server: DemoServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A share's cases part with one case hash changed is refused (not one of the recorded
    shares); shares that do not add up to the manifest's corpus are caught once all are in."""
    parts = tmp_path / "parts"
    _two_smoke_shards(noisy_server, parts)
    edited, unioned = tmp_path / "edited", tmp_path / "unioned"
    shutil.copytree(parts, edited)
    shutil.copytree(parts, unioned)
    part = PartsRoot(edited).parts("pair", "cases")[-1]
    frame = pl.read_parquet(part.path)
    frame.with_columns(
        pl.when(pl.int_range(pl.len()) == 0).then(pl.lit("0" * 64)).otherwise("case_hash")
        .alias("case_hash")
    ).write_parquet(part.path)  # fmt: skip
    capsys.readouterr()
    assert (
        main(["runs", "merge", "pair", "--parts", str(edited), "--db", str(tmp_path / "e.db")]) == 2
    )
    assert "nor one of its 2 shards' shares" in capsys.readouterr().err
    for path in (unioned / "runs" / "pair" / "manifest").glob(
        "*.json"
    ):  # a corpus hash the shares miss
        manifest = json.loads(path.read_text())
        manifest["corpus"]["hash"] = "1" * 64
        path.write_text(json.dumps(manifest))
    assert (
        main(["runs", "merge", "pair", "--parts", str(unioned), "--db", str(tmp_path / "u.db")])
        == 2
    )
    assert "shares do not add up" in capsys.readouterr().err
    assert (
        main(["runs", "merge", "pair", "--parts", str(parts), "--db", str(tmp_path / "p.db")]) == 0
    )


def test_the_shards_of_one_run_are_cut_alike(
    noisy_server: DemoServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    common = ["--run-id", "cut", "--parts", str(tmp_path / "parts"), "--no-cache"]
    smoke = demo_args(noisy_server, "--tier", "smoke")
    assert main(["run", *smoke, "--shard", "1/2", *common]) == 0
    capsys.readouterr()
    assert main(["run", *smoke, "--shard", "2/3", *common]) == 2
    assert "cut into 2 shards, this one into 3" in capsys.readouterr().err


def test_a_shard_reads_the_corpus_through_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What ``evalkit run`` loads: facts for ``--shard K/N`` (read through the case index; a
    warm one parses no file), every case otherwise."""
    import argparse

    from distributed_support import CONFIG

    from evalkit.cli.shard import load_run_corpus
    from evalkit.corpus.case_facts import CorpusFacts
    from evalkit.corpus.cases import Corpus, load_corpus
    from evalkit.corpus.selection import Selection
    from evalkit.corpus.suite import load_suite

    monkeypatch.setenv("EVALKIT_CASE_INDEX", str(tmp_path / "index"))
    suite = load_suite(CONFIG)
    shard, local = argparse.Namespace(shard="1/2"), argparse.Namespace(shard=None)
    cold = load_run_corpus(shard, suite, Selection())
    warm = load_run_corpus(shard, suite, Selection())
    whole = load_run_corpus(local, suite, Selection())
    assert isinstance(cold, CorpusFacts) and isinstance(warm, CorpusFacts)
    assert isinstance(whole, Corpus) and warm.hash == whole.hash
    # cold: every file's entry made, then the corpus summary; warm: the summary alone read
    assert (cold.counts.summary_written, warm.counts.summary_used) == (1, 1)
    assert cold.counts.files_parsed > 0 == warm.counts.entries_used == warm.counts.files_parsed
    with_sealed = load_corpus(suite.root, sealed=True)  # the summary covers sealed/ too
    assert cold.counts.cases_indexed == len(with_sealed.cases) and cold.counts.cases_built == 0


def test_a_warm_shard_makes_the_facts_of_its_share_alone(
    noisy_server: DemoServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """After ``evalkit cases index`` (entries and the corpus summary), a shard reads the
    summary alone (no entry, no case file parsed whole) and makes a case's facts only for the
    cases of its share, as it builds them."""
    from evalkit.cli import shard as sharding
    from evalkit.corpus.case_index import IndexCounts

    _through_the_index(monkeypatch, tmp_path / "index")
    assert main(["cases", "index", "--config", CONFIG]) == 0
    read = sharding.load_run_corpus
    counts: list[IndexCounts] = []

    def counted(*args: Any) -> Any:
        corpus = read(*args)
        counts.append(corpus.counts)
        return corpus

    monkeypatch.setattr(sharding, "load_run_corpus", counted)
    capsys.readouterr()
    args = demo_args(noisy_server, "--shard", "2/3")
    common = ["--run-id", "warm", "--parts", str(tmp_path / "parts"), "--label", "warm"]
    assert main(["run", *args, *common, "--no-cache", "--chunk-size", "7"]) == 0
    share, built, indexed = _built(capsys.readouterr().out)
    (made,) = counts
    assert (made.summary_used, made.summary_written, made.entries_used) == (1, 0, 0)
    assert made.files_parsed == 0 and indexed == 0
    assert made.facts_made == built == share < 91

"""Reliability: provider faults, Retry-After, rate limits, resume after SIGKILL, one writer.

Every test talks to loopback servers it starts itself: the demo simulator (with its seeded fault
injection) or a tiny scripted aiohttp endpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import email.utils
import importlib.util
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import combinations, pairwise
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from aiohttp import web

from evalkit.cli import main
from evalkit.cli.run import print_run_summary
from evalkit.corpus.cases import Corpus, load_corpus
from evalkit.corpus.messages import render_messages
from evalkit.corpus.suite import Suite, load_suite
from evalkit.demo.protocol import request_sha256, seeded_draw
from evalkit.demo.server import DemoServer, ServerOptions, create_app
from evalkit.errors import StoreError
from evalkit.records import ChatRequest, Completion, Provider
from evalkit.retries import RateLimiter
from evalkit.run.providers import make_provider
from evalkit.run.providers.openai_api import _payload  # exactly the body both transports post
from evalkit.run.runner import RunOptions, RunSummary, run_suite, run_suite_async
from evalkit.store import Store, open_store

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "corpus" / "evalkit.yaml"
BENCH_FAULTS = REPO / "bench" / "bench_faults.py"
CAUSES = ("HTTP 429", "HTTP 500", "timeout after 1s")  # what the demo server injects


def _urls(system: DemoServer, judge: DemoServer) -> list[str]:
    """``--set`` overrides pointing the demo suite at ``system`` and, if it has one, its judge at
    ``judge`` (a separate fault-free server, so judge calls do not disturb request counts)."""
    sets = [f"system.base_url={system.base_url}"]
    if load_suite(CONFIG).config.judge is not None:
        sets.append(f"judge.base_url={judge.base_url}")
    return sets


def _demo(system: DemoServer, judge: DemoServer, *sets: str) -> tuple[Suite, Corpus]:
    suite = load_suite(CONFIG, overrides=[*_urls(system, judge), *sets])
    return suite, load_corpus(suite.root, user_template=suite.config.system.user_template)


def _rows(store: Store, run_id: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """What a run produced, minus timings: outputs and scores as sorted tuples."""
    outputs = store.query(
        "SELECT case_id, replay, text, error, fail_reason FROM outputs WHERE run_id = ? "
        "ORDER BY case_id, replay",
        [run_id],
    )
    scores = store.query(
        "SELECT case_id, replay, scorer_index, scorer, score, passed, error, reason FROM scores "
        "WHERE run_id = ? ORDER BY case_id, replay, scorer_index",
        [run_id],
    )
    return outputs.rows(), scores.rows()


def _cli(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "evalkit.cli", *(str(a) for a in args)]


# --- provider faults --------------------------------------------------------------------------


def test_faults_every_output_is_scored_or_an_error_with_its_cause(
    demo_server_factory: Callable[..., DemoServer], demo_server: DemoServer, tmp_path: Path
) -> None:
    """20% 429/500 and 5% timeouts: nothing lost, nothing doubled, errors kept apart."""
    server = demo_server_factory(
        noise=False, seed=11, error_rate=0.2, timeout_rate=0.05, extra_args=["--timeout-s=3"]
    )
    suite, corpus = _demo(
        server, demo_server, "system.timeout_s=1", "system.max_retries=1", "replays=2"
    )
    with open_store(tmp_path / "e.duckdb", write=True) as store:
        summary = run_suite(suite, corpus, store, RunOptions(progress=False, use_cache=False))
        outputs = store.outputs(summary.run_id)
        scores = store.scores(summary.run_id)

    expected = {(c.id, r) for c in corpus.cases for r in range(2)}
    assert outputs.height == len(expected) == summary.outputs  # none lost
    assert set(zip(outputs["case_id"], outputs["replay"], strict=True)) == expected  # no doubles
    errored = outputs.filter(pl.col("error").is_not_null())
    assert 0 < errored.height < outputs.height, "the seeded faults must exhaust some retries"
    for cause in errored["error"]:
        assert cause.startswith(CAUSES) and cause.endswith("(after 2 attempts)"), cause
    assert errored["text"].is_null().all()
    # Errors are never scored: no score rows for them; every other output has all its scores.
    scored_keys = set(zip(scores["case_id"], scores["replay"], strict=True))
    error_keys = set(zip(errored["case_id"], errored["replay"], strict=True))
    assert not scored_keys & error_keys
    n_scorers = {c.id: len(c.scorers) for c in corpus.cases}
    per_output = Counter(zip(scores["case_id"], scores["replay"], strict=True))
    failed_outright = outputs.filter(pl.col("fail_reason").is_not_null())  # e.g. a fixture miss
    outright_keys = zip(failed_outright["case_id"], failed_outright["replay"], strict=True)
    unscored = error_keys | set(outright_keys)
    assert per_output == {k: n_scorers[k[0]] for k in expected - unscored}
    # The summary counts an output as errored when the provider or a scorer (say, a judge with
    # unparseable output) could not decide it; none of that comes from transport faults here.
    undecided = scores.filter(pl.col("error"))
    assert not any("call failed" in reason for reason in undecided["reason"])
    undecided_keys = set(zip(undecided["case_id"], undecided["replay"], strict=True))
    assert summary.errored == len(error_keys | undecided_keys)
    assert summary.passed + summary.failed + summary.errored == summary.outputs
    # Every attempt reached the server: one per step (agent cases take several) plus retries.
    steps = int(outputs["steps"].sum())
    assert server.stats()["requests"] == summary.requests == steps + summary.retries
    assert summary.retries > 0


def test_demo_server_faults_are_seeded_and_reproducible() -> None:
    """Same seed, same requests → same faults, whatever the order; another seed differs."""
    bodies = [
        {"model": "demo-support-1", "messages": [{"role": "user", "content": f"ticket {i}"}]}
        for i in range(40)
    ]

    async def statuses(seed: int, order: list[int]) -> dict[int, tuple[int, str | None]]:
        app = create_app(ServerOptions(seed=seed, noise=False, error_rate=0.5))
        runner, base = await _start(app)
        import aiohttp

        seen: dict[int, tuple[int, str | None]] = {}
        try:
            async with aiohttp.ClientSession() as session:
                for i in order:
                    async with session.post(f"{base}/chat/completions", json=bodies[i]) as r:
                        seen[i] = (r.status, r.headers.get("Retry-After"))
        finally:
            await runner.cleanup()
        return seen

    forward = asyncio.run(statuses(3, list(range(40))))
    backward = asyncio.run(statuses(3, list(range(39, -1, -1))))
    other = asyncio.run(statuses(4, list(range(40))))
    assert forward == backward
    assert forward != other
    for i, (status, retry_after) in forward.items():
        draw = seeded_draw(3, "error", request_sha256(bodies[i]), 0)
        assert status == (429 if draw < 0.25 else 500 if draw < 0.5 else 200)
        assert retry_after == ("0" if status == 429 else None)
    assert {s for s, _ in forward.values()} == {200, 429, 500}


# --- Retry-After and the rate limit, against a scripted endpoint -------------------------------

_ANSWER = {"role": "assistant", "content": '{"ok": true}'}
_COMPLETION = {
    "id": "c1",
    "object": "chat.completion",
    "created": 0,
    "model": "scripted-1",
    "choices": [{"index": 0, "message": _ANSWER, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
}


@dataclass
class _Script:
    """A loopback chat endpoint: the first ``failures`` requests get ``status`` + ``headers``."""

    failures: int = 0
    status: int = 429
    headers: Callable[[], dict[str, str]] = dict
    arrivals: list[float] = field(default_factory=list)

    def app(self) -> web.Application:
        async def chat(request: web.Request) -> web.Response:
            self.arrivals.append(time.monotonic())
            await request.read()
            if len(self.arrivals) <= self.failures:
                body = {"error": {"message": "slow down", "type": "rate_limit_error"}}
                return web.json_response(body, status=self.status, headers=self.headers())
            return web.json_response(_COMPLETION)

        app = web.Application()
        app.router.add_post("/v1/chat/completions", chat)
        return app


async def _start(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    return runner, f"http://{host}:{port}/v1"


def _run_scripted(
    tmp_path: Path, script: _Script, n_cases: int, system: str, config: str = ""
) -> tuple[RunSummary, pl.DataFrame]:
    """Run ``n_cases`` trivial cases against ``script`` in one event loop; ``system`` adds keys
    to the ``system:`` mapping (``{base_url}`` in it: the script's), ``config`` top-level
    lines."""
    root = tmp_path / "corpus"
    (root / "cases").mkdir(parents=True, exist_ok=True)
    (root / "cases" / "a.yaml").write_text(
        "".join(
            f"- id: c{i}\n  input: {{messages: [{{role: user, content: 'q{i}'}}]}}\n"
            "  expect: [json_valid]\n"
            for i in range(n_cases)
        )
    )

    async def scenario() -> tuple[RunSummary, pl.DataFrame]:
        runner, base_url = await _start(script.app())
        try:
            (root / "evalkit.yaml").write_text(
                f"suite: scripted\nsystem: {{model: scripted-1, base_url: '{base_url}', "
                f"{system.replace('{base_url}', base_url)}}}\ncache: false\n{config}\n"
            )
            suite = load_suite(root / "evalkit.yaml")
            corpus = load_corpus(suite.root)
            with open_store(tmp_path / "e.duckdb", write=True) as store:
                summary = await run_suite_async(suite, corpus, store, RunOptions(progress=False))
                return summary, store.outputs(summary.run_id)
        finally:
            await runner.cleanup()

    return asyncio.run(scenario())


def _http_date_in(seconds: float) -> Callable[[], dict[str, str]]:
    return lambda: {"Retry-After": email.utils.formatdate(time.time() + seconds, usegmt=True)}


@pytest.mark.parametrize(
    ("transport", "headers"),
    [
        ("openai", lambda: {"Retry-After": "1"}),
        ("lean", lambda: {"Retry-After": "1"}),
        ("openai", lambda: {"retry-after-ms": "1000"}),
        ("openai", _http_date_in(2)),
    ],
    ids=["seconds-openai", "seconds-lean", "ms", "http-date"],
)
def test_retry_after_is_honoured(
    tmp_path: Path, transport: str, headers: Callable[[], dict[str, str]]
) -> None:
    """A 429 saying "Retry-After: 1" is retried no sooner than a second later (backoff alone
    would retry within 0.25 s)."""
    script = _Script(failures=1, headers=headers)
    summary, outputs = _run_scripted(tmp_path, script, 1, f"transport: {transport}, max_retries: 2")
    assert len(script.arrivals) == 2 == summary.requests
    assert script.arrivals[1] - script.arrivals[0] >= 1.0
    assert summary.retries == 1 and outputs["error"].to_list() == [None]
    assert summary.passed == 1


def test_rate_limit_spaces_every_attempt_retries_included(tmp_path: Path) -> None:
    """120 requests/minute = one every 0.5 s, from the very first request (no initial burst),
    and the retry of a 429 waits its turn like any other attempt."""
    script = _Script(failures=2, headers=lambda: {"Retry-After": "0"})
    summary, outputs = _run_scripted(
        tmp_path,
        script,
        4,
        "max_retries: 3",
        "concurrency: 4\nrate_limit: {requests_per_minute: 120}",
    )
    assert summary.outputs == 4 and outputs["error"].is_null().all()
    assert len(script.arrivals) == 6 == summary.requests
    gaps = [b - a for a, b in pairwise(script.arrivals)]
    # the limiter's spacing as the server sees it: any j - i attempts span (j - i) x 0.5 s,
    # less one delivery's delay (at load 10 one request reached the server 0.31 s late, so
    # its gap to the next read 0.19 s though they were sent 0.5 s apart); a burst spans ~0
    arrivals = script.arrivals
    spans = [(arrivals[j] - arrivals[i]) - 0.5 * (j - i) for i, j in combinations(range(6), 2)]
    assert min(spans) >= -0.4, gaps
    assert script.arrivals[-1] - script.arrivals[0] < 8, gaps


def test_rate_limiter_paces_requests_and_tokens() -> None:
    """No burst at the start; a token debt is waited off at the configured rate."""

    async def stamps(limiter: RateLimiter, calls: list[int]) -> list[float]:
        times = []
        for tokens in calls:
            await limiter.acquire(tokens)
            times.append(time.monotonic())
        return times

    paced = asyncio.run(stamps(RateLimiter(600, None), [0] * 5))  # one per 0.1 s
    gaps = [b - a for a, b in pairwise(paced)]
    assert min(gaps) >= 0.09, gaps
    # 60,000 tokens/minute = 1,000/s: a 1,500-token call goes at once (the bucket holds one
    # second), leaving a 500-token debt that the next call waits off (0.5 s).
    tokens = asyncio.run(stamps(RateLimiter(None, 60_000), [1500, 10, 10]))
    assert 0.45 <= tokens[1] - tokens[0] < 1.5
    assert tokens[2] - tokens[1] < 0.2


# --- resume after SIGKILL --------------------------------------------------------------------


class _Recording:
    """The real provider, remembering every request it sends (for the wire sha per case)."""

    def __init__(self, inner: Provider) -> None:
        self.inner = inner
        self.name = inner.name
        self.sent: list[ChatRequest] = []

    async def complete(self, request: ChatRequest) -> Completion:
        self.sent.append(request)
        return await self.inner.complete(request)

    async def aclose(self) -> None:
        await self.inner.aclose()

    def first_step_sha(self, suite: Suite, case: Any) -> str:
        """sha256 of the body posted for ``case``'s first step (what the demo server counts)."""
        system = suite.config.system
        rendered = render_messages(case, suite.system_prompt, system.user_template)
        first = next(r for r in self.sent if r.messages == rendered)
        return request_sha256(_payload(first))


def _stored(db: Path) -> tuple[str, set[tuple[str, int]]] | None:
    """(run id, stored (case, replay) pairs) read while the run may still be writing."""
    if not db.exists():
        return None
    try:
        with open_store(db, read_only=True) as store:
            runs = store.runs()
            if runs.is_empty():
                return None
            run_id = runs["run_id"][0]
            return run_id, store.completed(run_id)
    except StoreError:  # created but no schema yet
        return None


def test_sigkill_mid_run_then_resume_equals_a_clean_run(
    demo_server_factory: Callable[..., DemoServer],
    demo_server: DemoServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Kill -9 a run mid-flight, ``--resume`` it: same rows as a clean run, no duplicates, and
    the server is never asked again for a (case, replay) that was stored before the kill.

    ``--no-cache`` on both legs: with the cache on, a resume bug that re-ran stored pairs would
    be answered from the response cache and hidden from the server's request counts.
    """
    server = demo_server_factory(noise=False, latency_ms=100)
    sets = [*_urls(server, demo_server), "replays=2"]
    suite, corpus = _demo(server, demo_server, "replays=2")
    replays = 2
    server.reset_stats()
    recording = _Recording(make_provider(suite.config.system))
    with open_store(tmp_path / "clean.duckdb", write=True) as store:
        options = RunOptions(progress=False, use_cache=False, concurrency=16)  # same answers
        clean = run_suite(suite, corpus, store, options, provider=recording)
        clean_rows = _rows(store, clean.run_id)
    # The content of each case's first request, as the server counts it (agent cases make more
    # requests: their later steps carry tool results and are left out of the checks below).
    sha = {c.id: recording.first_step_sha(suite, c) for c in corpus.cases}
    assert len(set(sha.values())) == len(corpus.cases), "each case must send distinct content"
    counted = server.stats()["by_content"]
    assert {s: counted.get(s) for s in sha.values()} == dict.fromkeys(sha.values(), replays)

    server.reset_stats()
    db = tmp_path / "killed.duckdb"
    run = ["run", "--config", CONFIG, "--db", db, "--no-cache", "--no-progress", "--concurrency=4"]
    sets_args = [arg for s in sets for arg in ("--set", s)]
    process = subprocess.Popen(_cli(*run, *sets_args), cwd=tmp_path, stdout=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while True:  # poll the DB itself: the writer releases it between batches
            assert process.poll() is None, "the run finished before it could be killed"
            assert time.monotonic() < deadline, "no outputs were stored within 60 s"
            seen = _stored(db)
            if seen and len(seen[1]) >= 20:
                break
            time.sleep(0.05)
        process.send_signal(signal.SIGKILL)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == -signal.SIGKILL
    at_kill = server.stats()["by_content"]
    seen = _stored(db)
    assert seen is not None
    run_id, before = seen
    total = len(corpus.cases) * replays
    assert 20 <= len(before) < total, "the kill must land mid-run"
    with open_store(db, read_only=True) as store:
        assert store.run_status(run_id) == "running"

    # the resume itself needs no process of its own: the CLI's entry point, in this one
    monkeypatch.chdir(tmp_path)
    resume = [*run, *sets_args, "--resume", run_id, "--concurrency=16", "--json", "s.json"]
    assert main([str(a) for a in resume]) == 0, capsys.readouterr().err
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["resumed_skipped"] == len(before)
    after = server.stats()["by_content"]

    with open_store(db, read_only=True) as store:
        assert _rows(store, run_id) == clean_rows  # final rows equal a clean run's
        keys = store.query(
            "SELECT count(*) AS n, count(DISTINCT (case_id, replay)) AS d FROM outputs "
            "WHERE run_id = ?",
            [run_id],
        ).row(0)
        assert keys == (total, total)  # no duplicated (case, replay)
        assert store.run_status(run_id) == "complete"
    for case in corpus.cases:
        stored_before = sum((case.id, r) in before for r in range(replays))
        # Before the kill the server saw at least the stored replays (more if some were in
        # flight or waiting for the next batch when the kill landed).
        assert at_kill.get(sha[case.id], 0) >= stored_before
        # The resume asked for exactly the replays that were not stored: never a stored one.
        asked_on_resume = after.get(sha[case.id], 0) - at_kill.get(sha[case.id], 0)
        assert asked_on_resume == replays - stored_before, case.id


# --- one writer, many readers ------------------------------------------------------------------


@contextlib.contextmanager
def _captured() -> Iterator[tuple[io.StringIO, io.StringIO]]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        yield out, err


def test_one_writer_a_clear_error_or_a_wait_and_readers_meanwhile(
    demo_server_factory: Callable[..., DemoServer], demo_server: DemoServer, tmp_path: Path
) -> None:
    """While one ``evalkit run`` writes: a second writer gets one clear line and exit 2, a
    writer given ``--wait`` waits its turn, and readers see the results grow. The file is
    intact afterwards: every table reads back in full."""
    server = demo_server_factory(noise=False, latency_ms=100)
    db = tmp_path / "shared.duckdb"
    common = ["--config", CONFIG, "--db", db, "--no-cache", "--no-progress"]
    common += [arg for s in _urls(server, demo_server) for arg in ("--set", s)]
    first = subprocess.Popen(
        _cli("run", *common, "--label", "first", "--concurrency=4", "--replays=2"),
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
    )
    waiter: subprocess.Popen[str] | None = None
    try:
        deadline = time.monotonic() + 60
        while server.stats()["requests"] == 0:  # it opened the store before its first request
            assert first.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)

        with _captured() as (_, err):
            code = main(["run", *map(str, common), "--label", "second"])
        assert code == 2
        assert err.getvalue().count("\n") == 1, err.getvalue()
        assert f"is being written by another process (PID {first.pid}: " in err.getvalue()
        with pytest.raises(StoreError, match="--wait"):
            open_store(db, write=True)

        waiter = subprocess.Popen(
            _cli("run", *common, "--label", "third", "--tag", "billing", "--wait", "120"),
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        counts = []
        held = False
        while first.poll() is None:
            with open_store(db, read_only=True) as reader:  # a notebook reading mid-run
                runs = reader.runs()
                if not runs.is_empty():
                    counts.append(reader.query("SELECT count(*) FROM outputs").item())
                if len(counts) == 3 and not held:
                    held = True
                    time.sleep(1.5)  # a slow reader: the run's next batch waits for it
            time.sleep(0.2)
        assert first.wait() == 0
        assert waiter.wait(timeout=120) == 0, waiter.stderr.read() if waiter.stderr else ""
    finally:
        for process in (first, waiter):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()

    n_cases = len(load_corpus(REPO / "corpus").cases)
    assert counts == sorted(counts), "results only ever grow"
    assert any(0 < c < 2 * n_cases for c in counts), f"no partial results seen: {counts}"
    with open_store(db, read_only=True) as store:
        tables = store.query("SELECT table_name FROM information_schema.tables")["table_name"]
        for table in tables:  # every table reads back in full
            store.query(f"SELECT * FROM {table}")
        runs = store.runs()
        assert runs["label"].to_list() == ["first", "third"]
        assert runs["status"].to_list() == ["complete", "complete"]
        first_id, third_id = runs["run_id"].to_list()
        assert store.outputs(first_id).height == 2 * n_cases
        assert store.outputs(third_id).height > 0
        # The waiting writer started only once the first had finished.
        assert runs["created_at"][1] >= runs["finished_at"][0]
    # Writers hold the file only while flushing, so the lock file is all that stays behind.
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("shared")) == [
        "shared.duckdb",
        "shared.duckdb.lock",
    ]


def test_a_reader_holding_the_file_delays_batches_but_loses_nothing(
    demo_server_factory: Callable[..., DemoServer], demo_server: DemoServer, tmp_path: Path
) -> None:
    """In one process: batches that come due while a reader holds the file stay pending (the
    reader sees no change) and are written once it lets go; nothing is lost."""
    server = demo_server_factory(noise=False, latency_ms=100)
    suite, corpus = _demo(server, demo_server, "concurrency=4")
    db = tmp_path / "e.duckdb"

    async def scenario(store: Store) -> tuple[RunSummary, int, int, int]:
        options = RunOptions(progress=False, use_cache=False, flush_interval_s=0.2)
        task = asyncio.ensure_future(run_suite_async(suite, corpus, store, options))
        while server.stats()["requests"] < 8:  # the run is under way and has released the file
            await asyncio.sleep(0.05)
        with open_store(db, read_only=True) as reader:  # a with-block holds the file open
            stored_at_start = reader.query("SELECT count(*) FROM outputs").item()
            asked_at_start = server.stats()["requests"]
            await asyncio.sleep(1.0)  # several batches come due while the reader holds the file
            asked_during = server.stats()["requests"] - asked_at_start
            stored_during = reader.query("SELECT count(*) FROM outputs").item() - stored_at_start
        return await task, asked_during, stored_during, stored_at_start

    with open_store(db, write=True) as store:
        summary, asked_during, stored_during, stored_at_start = asyncio.run(scenario(store))
        assert asked_during >= 10 and stored_during == 0  # the run went on, its writes waited
        assert summary.outputs == len(corpus.cases) > stored_at_start
        assert store.outputs(summary.run_id).height == len(corpus.cases)


def test_the_lock_file_names_the_writer_and_dies_with_it(tmp_path: Path) -> None:
    """The writer lock is an flock: released by the kernel when the holder is SIGKILLed."""
    db = tmp_path / "e.duckdb"
    code = (
        "import sys, time\nfrom evalkit.store import open_store\n"
        f"s = open_store({str(db)!r}, write=True)\nprint('ready', flush=True)\ntime.sleep(60)\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=tmp_path
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        with pytest.raises(StoreError, match=f"PID {holder.pid}"):
            open_store(db, wait_s=0.2, write=True)
        started = time.monotonic()
        os.kill(holder.pid, signal.SIGKILL)
        with open_store(db, wait_s=10, write=True) as store:  # waits for the kill, then writes
            store.save_override("a", "b", "tester", "lock test")
        assert time.monotonic() - started < 10
    finally:
        holder.kill()
        holder.wait()


def test_stored_timestamps_are_utc(tmp_path: Path) -> None:
    """Reopening after a release keeps the session in UTC."""
    with open_store(tmp_path / "e.duckdb", write=True) as store:
        store.release()
        zone = store.query("SELECT current_setting('TimeZone') AS tz").item()
        now = store.query("SELECT now() AS t")["t"][0]
    assert zone == "UTC" and now.utcoffset() == dt.timedelta(0)


# --- the fault benchmark ---------------------------------------------------------------------


def test_bench_faults_figures_add_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``bench/bench_faults.py --cases 50`` (its ``main``, in this process) prints and writes
    figures that are consistent."""
    spec = importlib.util.spec_from_file_location("evalkit_bench_faults", BENCH_FAULTS)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the script puts the checkout first
    monkeypatch.setitem(sys.modules, spec.name, bench)  # where its dataclasses look themselves up
    spec.loader.exec_module(bench)
    out = tmp_path / "figures.json"
    assert bench.main(["--cases", "50", "--json", str(out)]) == 0
    assert f"cores: {os.cpu_count()}" in capsys.readouterr().out
    figures = json.loads(out.read_text())
    clean, faults = figures["clean"], figures["faults"]
    for run in (clean, faults):
        assert run["cases"] == run["outputs"] == 50
        assert run["completed"] + run["errored"] == 50  # every case scored or an error
        assert run["lost"] == run["duplicated"] == 0
        assert run["requests"] == run["server_requests"]  # every attempt counted once
        assert run["extra_requests"] == run["requests"] - run["outputs"]
        assert sum(run["error_causes"].values()) == run["errored"]
    assert clean["errored"] == clean["extra_requests"] == clean["injected_failures"] == 0
    # Each failed attempt was retried or ended an errored output; every injected fault failed
    # its attempt (a slow machine may add a client timeout of its own, never remove one).
    assert faults["injected_failures"] > 0
    assert faults["extra_requests"] + faults["errored"] >= faults["injected_failures"]
    injected = faults["injected_429"] + faults["injected_500"] + faults["injected_timeouts"]
    assert injected >= faults["injected_failures"]
    assert set(faults["error_causes"]) <= {"HTTP 429", "HTTP 500", "timeout after 1s"}


def test_replicas_route_around_a_dead_one(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """``base_urls: [healthy, refused]``, 300 cases, two retries: a refused connection fails at
    once, so the dead replica is never busy and fewest-in-flight alone kept choosing it (91 of
    300 errored). Its breaker opens and each retry goes to the other replica: at most 2 % of
    the cases error, and the summary names each replica's requests and errors."""
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
    script = _Script()
    summary, outputs = _run_scripted(
        tmp_path, script, 300, f"base_urls: ['{{base_url}}', '{dead}'], max_retries: 2"
    )
    assert summary.outputs == 300
    assert summary.errored <= 6, outputs["error"].drop_nulls().value_counts()
    healthy, refused = summary.replicas
    assert refused.url == dead and refused.requests == refused.errors > 0
    assert refused.opened >= 1  # its breaker opened: it was skipped, not asked 300 times
    assert healthy.errors == 0 and healthy.requests == len(script.arrivals) >= 294
    assert summary.requests == healthy.requests + refused.requests
    print_run_summary(summary, "e.duckdb")
    shown = capsys.readouterr().out
    assert f"replica {dead}: {refused.requests} requests, {refused.errors} errors" in shown
    assert f"replica {healthy.url}: {healthy.requests} requests, 0 errors" in shown

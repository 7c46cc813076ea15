"""``evalkit run`` tells the person what happened: the run id at once, the top error causes, a
non-zero exit when nothing was verified, tiers, and resumes that count and retry the whole run."""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
import textwrap
from pathlib import Path

import pytest

from evalkit.cli import main
from evalkit.compare.flakes import measure_flakes
from evalkit.corpus.cases import load_corpus
from evalkit.corpus.selection import TierConfig, resolve_selection, resolve_tier
from evalkit.corpus.suite import load_suite
from evalkit.errors import ConfigError, EvalkitError, StoreError
from evalkit.records import ChatRequest, Completion
from evalkit.run import writer
from evalkit.run.runner import RunOptions, run_suite, run_suite_async
from evalkit.store import open_store

REPO = Path(__file__).resolve().parents[2]

APP = """
import json
from pathlib import Path

FAIL = Path(__file__).with_name("fail")  # while this file exists, "flaky" questions fail
HOLD = []


def answer(messages, **context):
    text = messages[-1]["content"]
    if "bad model" in text:
        raise ValueError("HTTP 400: Invalid model name 'gpt-4x'")
    if "long cause" in text:
        raise ValueError("judge: no API key: set the environment variable " + "W" * 150
                         + " LITELLM_MASTER_KEY (system.api_key_env) for the proxy")
    if "flaky" in text and FAIL.exists():
        raise ConnectionError("connection refused")
    if "hold" in text and FAIL.with_name("hold").exists():
        import time
        import duckdb  # a reader holding the file (evalkit's own read-only store lets go)
        for _ in range(400):  # as a reader does, it waits while the run holds the file
            try:
                HOLD.append(duckdb.connect(FAIL.with_name("hold").read_text(), read_only=True))
                break
            except duckdb.Error:
                time.sleep(0.05)
    return json.dumps({"answer": "fine " + text})
"""

_names = itertools.count()


def _project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, questions: list[str]) -> Path:
    """A python-system suite whose cases ask ``questions``; returns the config path (the app's
    module name is in ``tmp_path / "app" / "name"``)."""
    name = f"ek_cli_app_{next(_names)}"
    app = tmp_path / "app"
    app.mkdir()
    (app / f"{name}.py").write_text(APP)
    (app / "name").write_text(name)
    monkeypatch.syspath_prepend(str(app))
    root = tmp_path / "corpus"
    (root / "cases").mkdir(parents=True)
    cases = "".join(
        f"""\
- id: q-{i:03d}
  tags: [{"smoke, " if i < 2 else ""}general]
  input: {{messages: [{{role: user, content: "{q} {i}"}}]}}
  expect: [json_valid, {{contains: fine}}]
"""
        for i, q in enumerate(questions)
    )
    (root / "cases" / "a.yaml").write_text(cases)
    (root / "evalkit.yaml").write_text(
        textwrap.dedent(
            f"""\
            suite: py
            system: {{provider: python, model: my-app, function: "{name}:answer"}}
            concurrency: 2
            tiers:
              smoke: {{tags: [smoke], skip_scorers: [json_valid]}}
            """
        )
    )
    return root / "evalkit.yaml"


def test_a_run_where_every_output_errored_exits_1_with_its_causes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _project(tmp_path, monkeypatch, ["bad model"] * 4 + ["flaky"] * 2)
    (tmp_path / "app" / "fail").touch()
    db = tmp_path / "e.duckdb"
    args = ["run", "--config", str(config), "--db", str(db), "--no-progress"]
    code = main([*args, "--json", str(tmp_path / "s.json")])
    out, err = capsys.readouterr()
    summary = json.loads((tmp_path / "s.json").read_text())
    assert code == 1
    run_id = summary["run_id"]
    assert err.startswith(f"evalkit: run {run_id} (run) started: 6 outputs")  # at once, no TTY
    assert "4 × ValueError: HTTP 400: Invalid model name 'gpt-4x'" in out
    assert "2 × ConnectionError: connection refused" in out
    assert out.index("4 ×") < out.index("2 ×")  # most frequent first
    assert "every output errored" in out
    assert summary["error_causes"][0] == {
        "cause": "ValueError: HTTP 400: Invalid model name 'gpt-4x'",
        "count": 4,
    }

    # --resume --retry-errors asks the stored errors again: the flaky ones now pass.
    (tmp_path / "app" / "fail").unlink()
    code = main([*args, "--resume", run_id, "--retry-errors", "--json", str(tmp_path / "r.json")])
    out, err = capsys.readouterr()
    resumed = json.loads((tmp_path / "r.json").read_text())
    assert code == 0, out + err
    assert f"resuming run {run_id}" in err
    assert resumed["retried_errors"] == 6 and resumed["requests"] == 6
    # the whole run is counted: 2 passes now, 4 errors stored again
    assert (resumed["outputs"], resumed["passed"], resumed["errored"]) == (6, 2, 4)
    assert resumed["error_causes"] == [
        {"cause": "ValueError: HTTP 400: Invalid model name 'gpt-4x'", "count": 4}
    ]
    with open_store(db, read_only=True) as store:
        outputs = store.outputs(run_id)
    assert outputs.height == 6 and outputs.select("case_id", "replay").is_unique().all()


def test_resume_without_retry_errors_keeps_stored_errors_and_counts_the_whole_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _project(tmp_path, monkeypatch, ["ok"] * 3 + ["flaky"])
    (tmp_path / "app" / "fail").touch()
    suite = load_suite(config)
    corpus = load_corpus(suite.root)
    with open_store(tmp_path / "e.duckdb", write=True) as store:
        first = run_suite(suite, corpus, store, RunOptions(progress=False))
        (tmp_path / "app" / "fail").unlink()
        again = run_suite(suite, corpus, store, RunOptions(resume=first.run_id, progress=False))
    assert (first.passed, first.errored) == (3, 1)
    assert again.requests == 0 and again.resumed_skipped == 4
    assert (again.outputs, again.passed, again.errored) == (4, 3, 1)  # not "passed 0"
    with pytest.raises(EvalkitError, match="use it with --resume"):
        run_suite(suite, corpus, store, RunOptions(retry_errors=True))


def test_run_tier_smoke_selects_the_tier_and_records_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _project(tmp_path, monkeypatch, ["ok"] * 5)
    db = tmp_path / "e.duckdb"
    run = ["run", "--config", str(config), "--db", str(db), "--no-progress", "--tier", "smoke"]
    assert main([*run, "--json", str(tmp_path / "s.json")]) == 0
    assert ", tier smoke" in capsys.readouterr().err
    run_id = json.loads((tmp_path / "s.json").read_text())["run_id"]
    with open_store(db, read_only=True) as store:
        manifest = store.manifest(run_id)
        scores = store.scores(run_id)
    assert manifest.selection == {
        "tier": "smoke",
        "tags": ["smoke"],
        "exclude_tags": [],
        "skip_scorers": ["json_valid"],
        "sealed": False,
    }
    assert sorted(set(scores["case_id"])) == ["q-000", "q-001"]
    assert set(scores["scorer"]) == {"contains"}  # json_valid skipped
    assert main([*run[:-1], "smok"]) == 2
    assert "did you mean 'smoke'" in capsys.readouterr().err


def test_the_demo_corpus_smoke_tier_runs_without_judge_calls(tmp_path: Path, demo_server) -> None:
    config = REPO / "corpus" / "evalkit.yaml"
    suite = load_suite(config, overrides=[f"system.base_url={demo_server.base_url}"])
    corpus = load_corpus(suite.root, user_template=suite.config.system.user_template)
    selection = resolve_tier(suite, "smoke")  # what `evalkit gate --tier smoke` resolves too
    smoke = selection.apply(corpus)
    assert 10 <= len(smoke.cases) < len(corpus.cases) / 3
    assert all(c.must_pass for c in corpus.cases if c.must_pass and "smoke" in c.tags)
    assert {c.id for c in corpus.cases if c.must_pass} <= {c.id for c in smoke.cases}
    demo_server.reset_stats()
    judge_url = "judge.base_url=http://127.0.0.1:9/v1"  # unreachable: a judge call would error
    suite = load_suite(config, overrides=[f"system.base_url={demo_server.base_url}", judge_url])
    with open_store(tmp_path / "e.duckdb", write=True) as store:
        options = RunOptions(progress=False, selection=selection.to_manifest())
        summary = run_suite(suite, smoke, store, options)
        outputs = store.outputs(summary.run_id)
        scorers = set(store.scores(summary.run_id)["scorer"])
    assert summary.errored == 0 and summary.outputs == len(smoke.cases)
    assert demo_server.stats()["requests"] == int(outputs["steps"].sum())  # no judge requests
    assert "judge" not in scorers


def test_tier_resolution_refuses_what_it_cannot_honour() -> None:
    tiers = {"smoke": TierConfig(tags=["smoke"], skip_scorers=["judge"])}
    with pytest.raises(ConfigError, match=r"no such tier; did you mean 'smoke'\?"):
        resolve_selection(tiers, "smoek")
    with pytest.raises(ConfigError, match="a tier names its own tags"):
        resolve_selection(tiers, "smoke", tags=["billing"])
    bad = {"fast": TierConfig(skip_scorers=["judgee"])}
    with pytest.raises(ConfigError, match="did you mean 'judge'"):
        resolve_selection(bad, "fast")
    merged = resolve_selection(tiers, "smoke", exclude_tags=["agent"], sealed=True)
    assert merged.to_manifest() == {
        "tier": "smoke",
        "tags": ["smoke"],
        "exclude_tags": ["agent"],
        "skip_scorers": ["judge"],
        "sealed": True,
    }


def test_rescore_and_resume_refuse_a_path_with_no_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "typo.duckdb"
    config = str(REPO / "corpus" / "evalkit.yaml")
    assert main(["runs", "rescore", "base", "--config", config, "--db", str(missing)]) == 2
    assert "no evalkit store here" in capsys.readouterr().err
    assert main(["run", "--config", config, "--db", str(missing), "--resume", "x"]) == 2
    assert not missing.exists() and not list(tmp_path.iterdir())


class _FailsOnSecondRun:
    """A provider whose transport breaks (not a stored error: the run itself stops)."""

    name = "broken"

    def __init__(self, cases: int) -> None:
        self.cases, self.calls = cases, 0

    async def complete(self, request: ChatRequest) -> Completion:
        self.calls += 1
        if self.calls > self.cases + 1:
            raise RuntimeError("transport torn down")
        return Completion(text=json.dumps({"answer": "fine"}))

    async def aclose(self) -> None:
        return None


def test_a_failing_flakes_run_is_marked_failed_never_left_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _project(tmp_path, monkeypatch, ["ok"] * 4)
    suite = load_suite(config)
    corpus = load_corpus(suite.root)
    with open_store(tmp_path / "e.duckdb", write=True) as store:
        with pytest.raises(EvalkitError, match=r"flakes: run 2 of 3 \(\S+\) failed") as caught:
            measure_flakes(suite, corpus, store, runs=3, provider=_FailsOnSecondRun(4))
        runs = store.runs()
    assert runs["status"].to_list() == ["complete", "failed"]
    assert runs["run_id"][0] in str(caught.value)  # the completed run is named
    summary = json.loads(runs["summary"][1])
    assert "RuntimeError: transport torn down" in summary["stopped"]


def test_a_reader_that_never_lets_go_names_the_run_and_the_resume_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _project(tmp_path, monkeypatch, ["ok"] * 3 + ["hold"])
    db = tmp_path / "e.duckdb"
    (tmp_path / "app" / "hold").write_text(str(db))  # the "hold" case opens a reader, keeps it
    monkeypatch.setattr(writer, "REOPEN_WAIT_S", 0.5)
    suite = load_suite(config)
    corpus = load_corpus(suite.root)
    started: list[str] = []
    options = RunOptions(progress=False, on_start=lambda s: started.append(s.run_id))
    with open_store(db, write=True) as store:
        with pytest.raises(StoreError) as caught:
            asyncio.run(run_suite_async(suite, corpus, store, options))
        run_id = started[0]
        assert f"run {run_id} keeps every output stored so far" in str(caught.value)
        assert f"evalkit run --resume {run_id}" in str(caught.value)
        app = sys.modules[(tmp_path / "app" / "name").read_text()]
        for reader in app.HOLD:
            reader.close()
        (tmp_path / "app" / "hold").unlink()
        resumed = run_suite(suite, corpus, store, RunOptions(resume=run_id, progress=False))
    assert resumed.outputs == 4 and resumed.passed == 4


def test_an_error_cause_is_printed_whole_in_the_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    config = _project(tmp_path, monkeypatch, ["long cause"] * 2)
    db = tmp_path / "e.duckdb"
    assert main(["run", "--config", str(config), "--db", str(db), "--no-progress"]) == 1
    out = " ".join(capsys.readouterr().out.split())  # rich may wrap a long line
    assert "LITELLM_MASTER_KEY (system.api_key_env) for the proxy" in out

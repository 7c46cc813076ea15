"""The response cache: identical runs ask nothing, prompt edits re-ask only what changed."""

from __future__ import annotations

from pathlib import Path

import pytest
from projects import make_project

from evalkit.corpus.cases import load_corpus
from evalkit.corpus.suite import load_suite
from evalkit.demo.server import DemoServer
from evalkit.run.runner import RunOptions, run_suite
from evalkit.store import open_store

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def corpus_copy(tmp_path: Path) -> Path:
    root = tmp_path / "corpus"
    make_project(root, demo=True)
    return root


def _run(root: Path, server: DemoServer, db: Path, label: str, *, sets=(), **options):
    suite = load_suite(
        root / "evalkit.yaml", overrides=[f"system.base_url={server.base_url}", *sets]
    )
    corpus = load_corpus(suite.root, user_template=suite.config.system.user_template)
    # Judge calls would reach the same server and blur the request counts: leave judged cases out.
    corpus = corpus.select(ids=[c.id for c in corpus.cases if all(s.tier < 3 for s in c.scorers)])
    with open_store(db, write=True) as store:
        summary = run_suite(
            suite, corpus, store, RunOptions(label=label, progress=False, **options)
        )
        outputs = store.outputs(summary.run_id)
    return summary, outputs, corpus


def test_second_identical_run_makes_zero_requests(
    corpus_copy: Path, demo_server: DemoServer, tmp_path: Path
) -> None:
    db = tmp_path / "e.duckdb"
    demo_server.reset_stats()
    first, first_outputs, corpus = _run(corpus_copy, demo_server, db, "a")
    turns = int(first_outputs["steps"].sum())  # one request per model turn
    assert turns > len(corpus.cases)  # agent cases take several turns: all of them cached too
    assert demo_server.stats()["requests"] == turns == first.requests
    demo_server.reset_stats()
    second, second_outputs, _ = _run(corpus_copy, demo_server, db, "b")
    assert demo_server.stats()["requests"] == 0
    assert second.cache_hits == turns and second.requests == 0
    assert second_outputs["cached"].all() and not first_outputs["cached"].any()
    assert (
        second_outputs.sort("case_id")["text"].to_list()
        == first_outputs.sort("case_id")["text"].to_list()
    )
    # --no-cache asks every question again.
    demo_server.reset_stats()
    third, _, _ = _run(corpus_copy, demo_server, db, "c", use_cache=False)
    assert demo_server.stats()["requests"] == turns == third.requests


def test_template_change_rerequests_exactly_the_changed_requests(
    corpus_copy: Path, demo_server: DemoServer, tmp_path: Path
) -> None:
    db = tmp_path / "e.duckdb"
    _, _, corpus = _run(corpus_copy, demo_server, db, "a")
    vars_cases = [c for c in corpus.cases if c.vars is not None]
    assert vars_cases, "the demo corpus has input.vars cases rendered through user_template"
    demo_server.reset_stats()
    summary, outputs, _ = _run(
        corpus_copy, demo_server, db, "b", sets=["system.user_template=Ticket: {{message}}"]
    )
    # Only the vars cases render differently; every other request is served from the cache.
    assert demo_server.stats()["requests"] == len(vars_cases) == summary.requests
    fresh = set(outputs.filter(~outputs["cached"])["case_id"].to_list())
    assert fresh == {c.id for c in vars_cases}
    assert summary.cache_hits == int(outputs["steps"].sum()) - len(vars_cases)


def test_replay_index_is_part_of_the_key(
    corpus_copy: Path, demo_server: DemoServer, tmp_path: Path
) -> None:
    db = tmp_path / "e.duckdb"
    demo_server.reset_stats()
    summary, outputs, corpus = _run(corpus_copy, demo_server, db, "a", replays=2)
    assert demo_server.stats()["requests"] == int(outputs["steps"].sum())  # a request per turn
    assert sorted(set(outputs["replay"].to_list())) == [0, 1]
    assert summary.outputs == 2 * len(corpus.cases)

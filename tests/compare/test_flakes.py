"""Flake measurement finds the simulator's noisy cases, and none when its noise is off."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from evalkit.compare.flakes import flake_slices, flake_table, measure_flakes
from evalkit.corpus.cases import load_corpus
from evalkit.corpus.messages import render_messages
from evalkit.corpus.suite import load_suite
from evalkit.demo.triage import is_borderline
from evalkit.notebooks import execute_notebook
from evalkit.store import open_store

REPO = Path(__file__).resolve().parents[2]


def _suite_and_corpus(base_url: str):
    # The simulator also plays the demo suite's judge (demo-judge-1).
    overrides = [f"system.base_url={base_url}", f"judge.base_url={base_url}"]
    suite = load_suite(REPO / "corpus" / "evalkit.yaml", overrides=overrides)
    corpus = load_corpus(suite.root, user_template=suite.config.system.user_template)
    return suite, corpus


def test_flakes_found_only_among_noisy_cases(tmp_path: Path, demo_server_factory) -> None:
    server = demo_server_factory(noise=True, seed=3)
    suite, corpus = _suite_and_corpus(server.base_url)
    borderline = {
        c.id
        for c in corpus.cases
        if is_borderline(render_messages(c, suite.system_prompt, suite.config.system.user_template))
    }
    with open_store(tmp_path / "e.duckdb", write=True) as store:
        result = measure_flakes(suite, corpus, store, runs=4)
        stored = store.latest_flakes(result.config_hash)
        turns = int(store.query("SELECT sum(steps) AS n FROM outputs")["n"][0])  # agents: > 1
    flaky = set(result.flaky["case_id"].to_list())
    assert flaky, "noise on: some borderline case must change verdict across 4 runs"
    assert flaky <= borderline
    judged = sum(any(s.name == "judge" for s in c.scorers) for c in corpus.cases)
    assert server.stats()["requests"] == turns + 4 * judged  # cache bypassed
    assert stored.height == len(corpus.cases)
    assert set(stored.filter(pl.col("flips") > 0)["case_id"].to_list()) == flaky

    # notebooks/flakiness.ipynb charts the same measurement (executed through papermill)
    out = tmp_path / "nb" / "flakiness.ipynb"
    params = {"DB_PATH": str(tmp_path / "e.duckdb"), "OUTPUT_DIR": str(tmp_path / "nb")}
    path, error, message = execute_notebook("flakiness.ipynb", out, params)
    assert error is None, message
    assert (tmp_path / "nb" / "flake_rate_by_slice.png").stat().st_size > 0
    text = path.read_text()
    assert all(case_id in text for case_id in flaky)


def test_no_flakes_without_noise(tmp_path: Path, demo_server: object) -> None:
    suite, corpus = _suite_and_corpus(demo_server.base_url)  # type: ignore[attr-defined]
    with open_store(tmp_path / "e.duckdb", write=True) as store:
        result = measure_flakes(suite, corpus, store, runs=3)
        stored = store.latest_flakes(result.config_hash)
    assert result.flaky.is_empty()
    # each row names the case version it measured: only that version may be excused by it
    versions = {c.id: c.hash for c in corpus.cases}
    measured = dict(stored.select("case_id", "case_hash").iter_rows())
    assert measured and measured == {k: versions[k] for k in measured}
    assert result.per_slice["flaky"].sum() == 0


def test_flake_table_counts_disagreement_with_the_majority() -> None:
    verdicts = pl.DataFrame(
        {
            "case_id": ["a"] * 5 + ["b"] * 5 + ["c"] * 3,
            "tags": [["x"]] * 10 + [["y"]] * 3,
            "passed": [True, True, False, True, None, True] + [True] * 4 + [False, False, False],
        }
    )
    table = flake_table(verdicts)
    assert table.select("case_id", "runs", "flips").rows() == [
        ("a", 4, 1),  # the errored run is not counted as a flip
        ("b", 5, 0),
        ("c", 3, 0),
    ]
    slices = flake_slices(table)
    assert slices.select("tag", "cases", "flaky").rows() == [("x", 2, 1), ("y", 1, 0)]

"""Rescore: stored outputs scored again with zero model calls; the old scoring stays."""

from __future__ import annotations

from pathlib import Path

import pytest
from projects import make_project

from evalkit.cli import main
from evalkit.corpus.cases import load_corpus
from evalkit.corpus.suite import load_suite
from evalkit.demo.server import DemoServer
from evalkit.errors import EvalkitError
from evalkit.run.rescore import rescore_run
from evalkit.run.runner import RunOptions, run_suite
from evalkit.store import open_store

REPO = Path(__file__).resolve().parents[2]
CASE_ID = "billing-double-charge-001"
OLD = 'fields: {category: billing, order_id: "8812", refund: true}'
NEW = 'fields: {category: account, order_id: "8812", refund: true}'


def test_rescore_makes_no_requests_and_picks_up_a_changed_argument(
    tmp_path: Path, demo_server: DemoServer
) -> None:
    root = tmp_path / "corpus"
    make_project(root, demo=True)
    db = tmp_path / "e.duckdb"
    overrides = [
        f"system.base_url={demo_server.base_url}",
        f"judge.base_url={demo_server.base_url}",
    ]
    suite = load_suite(root / "evalkit.yaml", overrides=overrides)
    corpus = load_corpus(suite.root, user_template=suite.config.system.user_template)
    with open_store(db, write=True) as store:
        run = run_suite(suite, corpus, store, RunOptions(label="base", progress=False))
        before = store.scores(run.run_id)
        old_hash = store.cases(run.run_id).filter(case_id=CASE_ID)["case_hash"].item()
    target = before.filter(case_id=CASE_ID, scorer="json_fields")
    assert target["passed"].to_list() == [True]

    billing = root / "cases" / "billing.yaml"
    assert OLD in billing.read_text()
    billing.write_text(billing.read_text().replace(OLD, NEW, 1))
    demo_server.reset_stats()
    sets = [arg for item in overrides for arg in ("--set", item)]
    code = main(
        ["runs", "rescore", "base", "--config", str(root / "evalkit.yaml"), "--db", str(db), *sets]
    )
    assert code == 0
    assert demo_server.stats()["requests"] == 0

    with open_store(db, write=True) as store:
        after = store.scores(run.run_id)
        first = store.scores(run.run_id, f"{run.run_id}/s0")
        new_hash = store.cases(run.run_id).filter(case_id=CASE_ID)["case_hash"].item()
    changed = after.filter(case_id=CASE_ID, scorer="json_fields").row(0, named=True)
    assert changed["passed"] is False and "category: expected 'account'" in changed["reason"]
    assert first.equals(before)  # the old scoring is untouched
    assert after.height == before.height
    assert new_hash != old_hash  # pairs with later runs of the edited case


def test_rescore_only_named_scorers_carries_the_rest(
    tmp_path: Path, demo_server: DemoServer
) -> None:
    root = REPO / "corpus"
    overrides = [
        f"system.base_url={demo_server.base_url}",
        f"judge.base_url={demo_server.base_url}",
    ]
    suite = load_suite(root / "evalkit.yaml", overrides=overrides)
    corpus = load_corpus(suite.root, user_template=suite.config.system.user_template)
    with open_store(tmp_path / "e.duckdb", write=True) as store:
        run = run_suite(suite, corpus, store, RunOptions(label="base", progress=False))
        result = rescore_run(store, corpus, run.run_id, scorers=["json_schema"])
        assert result.carried > 0 and result.rescored == run.outputs
        assert (
            store.scores(run.run_id)
            .drop("scoring_id")
            .equals(store.scores(run.run_id, f"{run.run_id}/s0").drop("scoring_id"))
        )
        with pytest.raises(EvalkitError, match="no case in the corpus uses it"):
            rescore_run(store, corpus, run.run_id, scorers=["jsn_schema"])

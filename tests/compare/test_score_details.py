"""`score_details` and the per-scorer table read back the scoring a comparison was loaded with:
a rescore between the load and the read shows no newer reasons or counts beside the older
verdicts."""

from __future__ import annotations

from pathlib import Path

from exam_support import edit_case, run_candidate, write_project

from evalkit.cli import main
from evalkit.compare.analysis import case_details_of, load_comparison, score_details
from evalkit.compare.scorer_flips import run_scorer_flips
from evalkit.store import open_store


def test_details_are_the_loaded_scorings_after_a_rescore(tmp_path: Path, registry, monkeypatch):
    monkeypatch.chdir(tmp_path)
    project = write_project(tmp_path / "suite", "contains")
    run_candidate(project, "base", "v1")
    run_candidate(project, "cand", "v1b")
    with open_store(project.db, read_only=True) as store:
        comparison = load_comparison(store, "base", "cand", ("prompt",), thin=True)
    cand = comparison.cand
    assert cand.scoring_id is not None and "reason" not in cand.scores.columns  # a thin load
    loaded = score_details(cand, ["policy-1"])["reason"].to_list()
    loaded_hash = case_details_of(cand, ["policy-1"])["case_hash"].to_list()
    paired_ids = comparison.paired["case_id"]
    loaded_flips = run_scorer_flips(comparison.base, cand, paired_ids)
    # the pull request's next commit tightens the expectation, and the candidate is rescored
    assert edit_case(project.root, {"policy-1"}, lambda b: b.replace("refund", "zebra")) == 1
    rescore = ["runs", "rescore", "cand", "--config", project.config, "--db", project.db]
    assert main(rescore) == 0
    with open_store(project.db, read_only=True) as store:
        newest = store.scores("cand", case_ids=["policy-1"])["reason"].to_list()
        newest_hash = store.cases("cand", case_ids=["policy-1"])["case_hash"].to_list()
    assert newest != loaded and newest_hash != loaded_hash  # the store moved on
    assert score_details(cand, ["policy-1"])["reason"].to_list() == loaded
    assert case_details_of(cand, ["policy-1"])["case_hash"].to_list() == loaded_hash
    # the per-scorer table counts the loaded scoring too (the rescore failed policy-1's check)
    assert run_scorer_flips(comparison.base, cand, paired_ids).equals(loaded_flips)
    verdict = comparison.cand_verdicts.filter(comparison.cand_verdicts["case_id"] == "policy-1")
    assert verdict["passed"].to_list() == [True]  # the verdict the details now stand beside

"""Only the trusted side writes what the gate trusts. In a pull-request job (simulated by its
environment variables) an override, a flake list and a promotion written by that job are
ignored and listed; the same records written by a person outside it count. A flake list
excuses a failing must_pass case only after the gate job re-asked it."""

from __future__ import annotations

from pathlib import Path

import pytest
from synthetic_runs import MANIFEST, C, make_run, write_store

from evalkit.compare.pin import gate_pair
from evalkit.compare.reask import LABEL_PREFIX
from evalkit.compare.trust import Trust
from evalkit.provenance import Writer
from evalkit.run_manifest import RunManifest
from evalkit.store import open_store

BASE_CFG, CAND_CFG = "cfg-base", "cfg-cand"
PR_JOB = {
    "EVALKIT_CI_EVENT": "pull_request", "EVALKIT_CI_JOB": "77", "EVALKIT_CI_BASE_REF": "main",
    "EVALKIT_CI_HEAD_REF": "fix-prompt", "EVALKIT_CI_REF": "refs/pull/7/merge",
}  # fmt: skip


def _cases(mp: str) -> list[C]:
    general = [C(f"g-{i}", "p", ["general"]) for i in range(6)]
    return [C("mp-1", mp, ["policy"], "must_pass", "h1"), *general]


def _flakes(rate: float = 0.4):
    import polars as pl

    return pl.DataFrame({"case_id": ["mp-1"], "tags": [["policy"]], "runs": [5],
                         "flips": [round(5 * rate)], "flake_rate": [rate],
                         "case_hash": ["h1"]})  # fmt: skip


def _in_pr_job(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in PR_JOB.items():
        monkeypatch.setenv(name, value)


def _outside(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PR_JOB:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """main's baseline promoted by a person; a flake list of its configuration measured
    where ``flakes_in`` says; the candidate (the pull request's) failing the must_pass case."""

    def make(flakes_in: str | None = None) -> Path:
        path = tmp_path / "e.duckdb"
        base = make_run("base-run", _cases("p"), MANIFEST | {"config_hash": BASE_CFG}, "base")
        write_store(path, [base])
        with open_store(path, write=True) as store:
            store.promote_baseline("demo", "base-run", "ana", "main at 3f9a1c")
        if flakes_in is not None:
            (_in_pr_job if flakes_in == "pr" else _outside)(monkeypatch)
            with open_store(path, write=True) as store:
                store.save_flakes(BASE_CFG, _flakes())
        _outside(monkeypatch)
        cand_manifest = MANIFEST | {"config_hash": CAND_CFG, "prompt": {"version": "v2"}}
        write_store(path, [make_run("cand-run", _cases("f"), cand_manifest, "cand")])
        return path

    return make


def _gate(path: Path):
    with open_store(path, read_only=True) as store:
        return gate_pair(store, None, "cand", None, ["prompt"])[1]


def _messages(decision, kind: str) -> list[str]:
    return [f.message for f in decision.findings if f.kind == kind]


def test_an_override_written_by_the_pull_request_job_is_ignored_and_listed(
    db, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = db()
    _in_pr_job(monkeypatch)
    blocked = _gate(path)
    assert blocked.status == "BLOCKED"
    with open_store(path, write=True) as store:  # one extra command in the PR's own job
        store.save_override("base-run", "cand-run", "pr-author", "flaky", blocked.uncovered)
    decision = _gate(path)
    assert decision.status == "BLOCKED" and not decision.overrides
    (listed,) = _messages(decision, "untrusted")
    assert "override by pr-author (flaky) ignored: written by this pull-request job" in listed
    # the control: the same override by a person outside the job accepts the finding
    _outside(monkeypatch)
    with open_store(path, write=True) as store:
        store.save_override("base-run", "cand-run", "ana", "known outage", blocked.uncovered)
    _in_pr_job(monkeypatch)
    assert _gate(path).status == "PASSED WITH OVERRIDE"


def test_a_flake_list_measured_by_the_pull_request_job_excuses_nothing(
    db, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = db(flakes_in="pr")
    _in_pr_job(monkeypatch)
    decision = _gate(path)
    assert decision.status == "BLOCKED"
    shown = _messages(decision, "not-excusing")
    assert any("mp-1 excuses nothing: written by this pull-request job" in m for m in shown)


def _reasks(path: Path, answers: list[str]) -> None:
    """The gate job's targeted re-asks of mp-1 on the candidate's configuration."""
    manifest = MANIFEST | {"config_hash": CAND_CFG, "prompt": {"version": "v2"}}
    runs = [
        make_run(f"reask-{i}", [C("mp-1", a, ["policy"], "must_pass", "h1")], manifest,
                 f"{LABEL_PREFIX}cand-run")
        for i, a in enumerate(answers)
    ]  # fmt: skip
    write_store(path, runs)


@pytest.mark.parametrize(
    ("answers", "status"),
    [
        ([], "BLOCKED"),
        (["p", "p", "f", "p", "p"], "PASSED"),
        (["f", "f", "p", "f", "p"], "BLOCKED"),
    ],
    ids=["not re-asked", "fails 1 of 5 (list: 40%)", "fails 3 of 5"],
)
def test_a_trusted_flake_list_excuses_only_after_the_re_asks_bear_it_out(
    db, monkeypatch: pytest.MonkeyPatch, answers: list[str], status: str
) -> None:
    path = db(flakes_in="person")
    _reasks(path, answers)
    _in_pr_job(monkeypatch)
    decision = _gate(path)
    assert decision.status == status
    must_pass = [f for f in decision.findings if f.tier == 1 and f.case_ids == ("mp-1",)]
    assert must_pass[0].severity == ("warn" if status == "PASSED" else "block")
    if not answers:
        assert any(
            "re-asked 0 time(s), 5 are needed" in m for m in _messages(decision, "not-reasked")
        )
    elif status == "BLOCKED":
        assert any("failed 3 of 5 re-asks" in m for m in _messages(decision, "not-reasked"))
    else:
        assert any("re-asked 5 times" in m for m in _messages(decision, "reasked"))


def test_a_promotion_written_by_the_pull_request_job_is_ignored_and_listed(
    db, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = db()
    lenient = make_run("lenient-run", _cases("f"), MANIFEST | {"config_hash": BASE_CFG}, "x")
    write_store(path, [lenient])
    _in_pr_job(monkeypatch)
    # a baseline that fails the case too, promoted by the job
    with open_store(path, write=True) as store:
        store.promote_baseline("demo", "lenient-run", "pr-author", "new normal")
    decision = _gate(path)
    assert decision.policy is not None
    (listed,) = _messages(decision, "untrusted")
    assert "promotion of lenient-run by pr-author (new normal) ignored" in listed
    assert "written by this pull-request job" in listed and "judges against base-run" in listed
    _outside(monkeypatch)  # a pull-request job's promotion is trusted nowhere
    with open_store(path, read_only=True) as store:
        assert gate_pair(store, None, "cand", None, ["prompt"])[0].base.run_id == "base-run"
    # the control: the same promotion by a person counts
    with open_store(path, write=True) as store:
        store.promote_baseline("demo", "lenient-run", "ana", "new normal")
    _in_pr_job(monkeypatch)
    with open_store(path, read_only=True) as store:
        assert gate_pair(store, None, "cand", None, ["prompt"])[0].base.run_id == "lenient-run"


def test_a_promotion_the_job_made_of_the_base_branch_commit_is_trusted() -> None:
    """The CI example without a team store: the job runs the base branch in a worktree and
    promotes it. Trusted when the run is the base branch's commit with a clean tree and the
    policy it recorded; a promotion of the pull request's own run never is."""
    job = Writer(ci="github", event="pull_request", job="9/gate", base_ref="main",
                 head_ref="fix", pull_request=True)  # fmt: skip
    trust = Trust(job, ("base_branch", "person"), "b" * 40)
    row = {"written_by": job.to_json(), "policy": '{"critical_tags": [], "gate": {}}'}
    base_run = {"run": {"git_sha": "b" * 40, "git_dirty": False},
                "gate_policy": {"critical_tags": [], "gate": {}}}  # fmt: skip
    assert trust.why_not_promotion(row, RunManifest.from_stored(base_run)) is None
    own_run = base_run | {"run": {"git_sha": "c" * 40, "git_dirty": False}}
    dirty = base_run | {"run": {"git_sha": "b" * 40, "git_dirty": True}}
    looser = row | {"policy": '{"critical_tags": [], "gate": {"alpha": 0.001}}'}
    for promoted, stored in ((row, own_run), (row, dirty), (looser, base_run)):
        manifest = RunManifest.from_stored(stored)
        assert "this pull-request job" in (trust.why_not_promotion(promoted, manifest) or "")


def test_a_policy_promotion_written_by_the_pull_request_job_does_not_loosen_the_pin(
    db, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = db()
    _in_pr_job(monkeypatch)
    # `baseline promote base --policy` with alpha lowered
    with open_store(path, write=True) as store:
        loose = {"critical_tags": [], "gate": {"alpha": 0.0001, "trusted_writers": ["unknown"]}}
        store.promote_baseline("demo", "base-run", "pr-author", "looser", None, loose)
    decision = _gate(path)
    assert decision.policy.alpha == 0.05 and decision.policy.trusted_writers == (
        "base_branch",
        "person",
    )
    assert any("promotion of base-run by pr-author (looser) ignored" in m
               for m in _messages(decision, "untrusted"))  # fmt: skip


def test_a_calibration_measured_by_the_pull_request_job_lets_no_judge_gate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import polars as pl

    from evalkit.compare.trust import trusted_calibrations

    job = Writer(ci="ci", event="pull_request", job="77", pull_request=True, base_ref="main")
    person = Writer(who="ana", user="ana", host="laptop")
    calibrations = pl.DataFrame(
        {"judge_model": ["m", "m"], "kappa": [0.9, 0.95],
         "written_by": [person.to_json(), job.to_json()]}
    )  # fmt: skip
    kept = trusted_calibrations(calibrations, Trust(job, ("base_branch", "person")))
    assert kept["kappa"].to_list() == [0.9]
    outside = Writer(user="ana", host="laptop")
    assert trusted_calibrations(calibrations, Trust(outside))["kappa"].to_list() == [0.9]

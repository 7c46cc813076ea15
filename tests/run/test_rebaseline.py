"""Rebaselining: the baseline's configuration re-run on exactly the cases a pull request added
or edited, so they pair; cached and reused, and refused where the configuration cannot be
rebuilt (an old manifest without ``rerun``, a Python system whose code changed)."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import shutil
import textwrap
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pytest
from projects import make_project

from evalkit.cli import main
from evalkit.corpus.cases import load_corpus
from evalkit.corpus.suite import load_suite
from evalkit.demo.server import DemoServer
from evalkit.records import canonical_json
from evalkit.run.rebaseline import (
    IDENTITY_FIELDS,
    baseline_suite,
    delta_cases,
    find_rebaseline,
    rebaseline,
)
from evalkit.run.runner import RunOptions, run_suite
from evalkit.store import open_store

REPO = Path(__file__).resolve().parents[2]
EDITED = ("billing-double-charge-001", "billing-overcharge-002")  # provenance / wording
ADDED = "billing-new-charge-099"
NEW_CASE = f"""\
- id: {ADDED}
  tags: [billing]
  input:
    messages:
      - {{role: user, content: "Billed twice for order 7741, refund the extra charge please."}}
  expect:
    - {{scorer: json_schema, args: {{schema: schemas/support_reply.json}}}}
    - {{scorer: json_fields, args: {{fields: {{category: billing, order_id: "7741"}}}}}}
"""


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _run(config: Path, db: Path, label: str, sets: list[str], **load: Any) -> str:
    suite = load_suite(config, overrides=sets, **load)
    corpus = load_corpus(suite.root, user_template=suite.config.system.user_template)
    with open_store(db, write=True) as store:
        return run_suite(suite, corpus, store, RunOptions(label=label, progress=False)).run_id


def _runs(db: Path) -> list[str]:
    with open_store(db, read_only=True) as store:
        return store.runs()["run_id"].to_list()


@pytest.fixture(scope="module")
def pr(tmp_path_factory: pytest.TempPathFactory, demo_server: DemoServer) -> dict[str, Any]:
    """A baseline (prompt v1) on the repository's corpus; then a pull request that edits two
    cases (a provenance date, a wording) and adds one, and its candidate (prompt v2). The
    store as it is then is kept as ``pristine`` for tests that need it untouched."""
    tmp = tmp_path_factory.mktemp("pr")
    root = tmp / "corpus"
    make_project(root, demo=True)
    config, db = root / "evalkit.yaml", tmp / "e.duckdb"
    sets = [f"system.base_url={demo_server.base_url}", f"judge.base_url={demo_server.base_url}"]
    base = _run(config, db, "base", sets)
    billing = root / "cases" / "billing.yaml"
    text = billing.read_text(encoding="utf-8")
    edited = text.replace("date: 2026-03-14", "date: 2026-03-15", 1).replace(
        "but the tent was on sale", "but the tent was reduced", 1
    )
    assert edited.count("2026-03-15") == 1 and "was reduced" in edited
    billing.write_text(edited, encoding="utf-8")
    (root / "cases" / "new.yaml").write_text(NEW_CASE, encoding="utf-8")
    cand = _run(config, db, "cand", sets, prompt=root / "prompts" / "v2.md")
    shutil.copy(db, tmp / "pristine.duckdb")
    suite = load_suite(config, overrides=sets, prompt=root / "prompts" / "v2.md")
    return {"root": root, "db": db, "base": base, "cand": cand, "suite": suite, "sets": sets,
            "pristine": tmp / "pristine.duckdb"}  # fmt: skip


def test_delta_cases_are_the_candidates_added_and_edited_unsealed_cases(pr: dict) -> None:
    with open_store(pr["db"], read_only=True) as store:
        base_cases, cand_cases = store.cases(pr["base"]), store.cases(pr["cand"])
    delta = delta_cases(base_cases, cand_cases)
    assert sorted(delta) == sorted([*EDITED, ADDED])
    hashes = dict(zip(cand_cases["case_id"], cand_cases["case_hash"], strict=True))
    assert delta == {case_id: hashes[case_id] for case_id in delta}
    # a sealed case of the candidate's is never part of the delta; an unchanged one neither
    sealed = cand_cases.with_columns(sealed=pl.col("case_id") == ADDED)
    assert ADDED not in delta_cases(base_cases, sealed)
    assert delta_cases(base_cases, base_cases) == {}


def test_rebaseline_runs_the_baseline_configuration_on_exactly_the_delta(
    pr: dict, demo_server: DemoServer
) -> None:
    db, base, cand = pr["db"], pr["base"], pr["cand"]
    demo_server.reset_stats()
    with open_store(db, write=True) as store:
        result = rebaseline(store, pr["suite"], base, cand)
        assert result.run_id is not None and not result.reused and result.reason is None
        manifest = store.manifest(result.run_id)
        base_manifest, cand_manifest = store.manifest(base), store.manifest(cand)
        stored = store.cases(result.run_id)
        outputs = store.outputs(result.run_id)
        cand_cases = store.cases(cand)
    assert result.cases == 3 and outputs.height == 3 and outputs["error"].is_null().all()
    # the provenance-only edit renders the baseline's very request: served from its cache
    assert (result.requests, result.cache_hits) == (2, 1) == (demo_server.stats()["requests"], 1)
    cand_hashes = dict(zip(cand_cases["case_id"], cand_cases["case_hash"], strict=True))
    assert dict(zip(stored["case_id"], stored["case_hash"], strict=True)) == {
        case_id: cand_hashes[case_id] for case_id in [*EDITED, ADDED]
    }
    for name in IDENTITY_FIELDS:
        assert canonical_json(manifest.recorded(name)) == canonical_json(
            base_manifest.recorded(name)
        ), name
    v1 = (pr["root"] / "prompts" / "v1.md").read_text(encoding="utf-8")
    v2 = (pr["root"] / "prompts" / "v2.md").read_text(encoding="utf-8")
    assert manifest.prompt["system_prompt_hash"] == _sha(v1) != _sha(v2)
    assert cand_manifest.prompt["system_prompt_hash"] == _sha(v2)
    assert manifest.prompt["version"] == "v1" and cand_manifest.prompt["version"] == "v2"
    assert manifest.rebaseline == {"of": base, "for": cand}
    assert manifest.run.label == f"rebaseline:{base}"
    assert manifest.selection["case_ids"] == sorted([*EDITED, ADDED])

    # Again: the same run is reused, no new run and no request.
    before = _runs(db)
    demo_server.reset_stats()
    with open_store(db, write=True) as store:
        again = rebaseline(store, pr["suite"], base, cand)
        assert find_rebaseline(store, base, {ADDED: cand_hashes[ADDED]}) == result.run_id
        assert find_rebaseline(store, base, {ADDED: "another hash"}) is None
        assert find_rebaseline(store, cand, {ADDED: cand_hashes[ADDED]}) is None
    assert (again.run_id, again.reused, again.cases) == (result.run_id, True, 3)
    assert _runs(db) == before and demo_server.stats()["requests"] == 0

    # An incomplete rebaseline run is never reused: a fresh one costs nothing (all cached).
    with open_store(db, write=True) as store:
        store.finish_run(result.run_id, "failed", {"stopped": "test"})
        fresh = rebaseline(store, pr["suite"], base, cand)
    assert fresh.run_id not in (None, result.run_id) and not fresh.reused
    assert (fresh.requests, fresh.cache_hits) == (0, 3)
    assert demo_server.stats()["requests"] == 0  # the judge was not asked either


def test_a_case_edited_again_after_the_candidate_ran_is_skipped_and_counted(
    pr: dict, tmp_path: Path
) -> None:
    db = tmp_path / "e.duckdb"
    shutil.copy(pr["pristine"], db)
    root = tmp_path / "corpus"
    shutil.copytree(pr["root"], root)
    new = root / "cases" / "new.yaml"
    text = new.read_text()
    assert "Billed twice" in text
    new.write_text(text.replace("Billed twice", "Billed two times"))
    suite = load_suite(root / "evalkit.yaml", overrides=pr["sets"])
    with open_store(db, write=True) as store:
        result = rebaseline(store, suite, pr["base"], pr["cand"])
        stored = store.cases(result.run_id)["case_id"].to_list()
    assert result.cases == 2 and stored == sorted(EDITED)
    assert result.reason is not None and "1 added/edited case(s) changed" in result.reason
    assert ADDED in result.reason


def test_a_baseline_without_rerun_cannot_be_rebaselined(pr: dict, tmp_path: Path) -> None:
    db = tmp_path / "e.duckdb"
    shutil.copy(pr["pristine"], db)
    with open_store(db, read_only=True) as store:
        manifest = store.manifest(pr["base"])
    assert not isinstance(baseline_suite(pr["suite"], manifest), str)  # as recorded: rebuildable
    manifest = dataclasses.replace(manifest, rerun=None)
    reason = baseline_suite(pr["suite"], manifest)
    assert isinstance(reason, str) and "no 'rerun'" in reason and "older evalkit" in reason
    # a baseline recorded before `rerun`: the stored manifest lacks it
    with duckdb.connect(str(db)) as con:
        con.execute(
            "UPDATE runs SET manifest = ? WHERE run_id = ?",
            [canonical_json(manifest.to_dict()), pr["base"]],
        )
    before = _runs(db)
    with open_store(db, write=True) as store:
        result = rebaseline(store, pr["suite"], pr["base"], pr["cand"])
    assert (result.run_id, result.cases, result.reused) == (None, 0, False)
    assert result.reason == reason
    assert _runs(db) == before


def test_the_pinned_fields_come_from_the_baseline_whatever_the_pr_config_says(
    pr: dict, demo_server: DemoServer
) -> None:
    with open_store(pr["db"], read_only=True) as store:
        manifest = store.manifest(pr["base"])
    sets = [*pr["sets"], "system.sampling.temperature=0.9", "system.max_steps=3", "replays=2",
            "system.user_template=Ticket: {{message}}", "concurrency=3"]  # fmt: skip
    suite = load_suite(pr["root"] / "evalkit.yaml", overrides=sets)
    rebuilt = baseline_suite(suite, manifest)
    assert not isinstance(rebuilt, str), rebuilt
    system = rebuilt.config.system
    assert system.sampling.temperature == 0 and system.max_steps == 8
    assert rebuilt.config.replays == 1 and system.user_template == "Customer message: {{message}}"
    assert rebuilt.config.concurrency == 3  # not pinned: the pull request's
    # another endpoint in the PR: the baseline's is put back
    moved = load_suite(pr["root"] / "evalkit.yaml", overrides=["system.base_url=http://x:1/v1"])
    rebuilt = baseline_suite(moved, manifest)
    assert not isinstance(rebuilt, str) and rebuilt.config.system.base_url == demo_server.base_url
    # a field this evalkit cannot put back is named
    versioned = load_suite(
        pr["root"] / "evalkit.yaml", overrides=[*pr["sets"], "system.version=build-2"]
    )
    reason = baseline_suite(versioned, manifest)
    assert isinstance(reason, str) and "system.version" in reason


_names = itertools.count()


def _python_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A python system (``<pkg>/app.py``) with four cases; returns (config, app file)."""
    project = tmp_path / "project"
    pkg = f"ek_rebaseline_{next(_names)}"
    (project / pkg).mkdir(parents=True)
    (project / pkg / "__init__.py").write_text("")
    app = project / pkg / "app.py"
    app.write_text(
        "def answer(messages, **context):\n    return 'fine ' + messages[-1]['content']\n"
    )
    (project / "cases").mkdir()
    (project / "cases" / "a.yaml").write_text(
        "".join(
            f"- id: case-{i}\n  input: {{messages: [{{role: user, content: 'question {i}'}}]}}\n"
            "  expect: [{contains: fine}]\n"
            for i in range(4)
        )
    )
    config = project / "evalkit.yaml"
    config.write_text(
        textwrap.dedent(
            f"""\
            suite: py
            system: {{provider: python, model: app, function: "{pkg}.app:answer"}}
            """
        )
    )
    monkeypatch.syspath_prepend(str(project))
    return config, app


def test_a_python_system_is_rebaselined_only_while_its_code_is_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config, app = _python_project(tmp_path, monkeypatch)
    db = tmp_path / "e.duckdb"
    base = _run(config, db, "base", [])
    cases = config.parent / "cases" / "a.yaml"
    cases.write_text(cases.read_text().replace("question 0", "question zero"))
    cand = _run(config, db, "cand", [])
    with open_store(db, write=True) as store:
        same = rebaseline(store, load_suite(config), base, cand)
    assert same.run_id is not None and same.cases == 1 and same.reason is None

    app.write_text(app.read_text() + "\n# reworded\n")  # the pull request changes the code
    cases.write_text(cases.read_text().replace("question 1", "question one"))
    cand = _run(config, db, "cand-2", [])
    before = _runs(db)
    with open_store(db, write=True) as store:
        result = rebaseline(store, load_suite(config), base, cand)
    assert (result.run_id, result.cases, result.reused) == (None, 0, False)
    assert result.reason is not None and "Python system's code changed" in result.reason
    assert _runs(db) == before


def test_nothing_added_or_edited_makes_no_run(pr: dict, tmp_path: Path) -> None:
    db = tmp_path / "e.duckdb"
    shutil.copy(pr["pristine"], db)
    with open_store(db, write=True) as store:
        result = rebaseline(store, pr["suite"], pr["base"], pr["base"])
    assert (result.run_id, result.cases, result.reason) == (None, 0, "nothing added or edited")


def test_gate_rebaseline_prints_what_it_ran(
    pr: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "e.duckdb"
    shutil.copy(pr["pristine"], db)
    monkeypatch.chdir(pr["root"].parent)  # corpus/evalkit.yaml: the pull request's config
    sets = [arg for item in pr["sets"] for arg in ("--set", item)]
    args = ["gate", pr["base"], pr["cand"], "--db", str(db), "--out", str(tmp_path / "reports"),
            "--rebaseline", "--allow-diff", "prompt", *sets]  # fmt: skip
    main(args)
    err = capsys.readouterr().err
    with open_store(db, read_only=True) as store:
        runs = store.runs().filter(pl.col("label") == f"rebaseline:{pr['base']}")
    assert runs.height == 1
    run_id = runs["run_id"][0]
    assert (
        f"evalkit: rebaselined 3 added/edited case(s) on the baseline configuration of "
        f"{pr['base']}: run {run_id} (2 requests, 1 cache hits)"
    ) in err
    main(args)
    assert f"{pr['base']}: reused run {run_id}" in capsys.readouterr().err

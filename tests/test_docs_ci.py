"""The docs' GitHub Actions example (examples/github-actions/evalkit.yml) is the file the CI
page includes, and its shell step runs: in a scratch git repository whose ``origin/main`` holds
the baseline prompt, with or without a team store, and refusing a pull request that loosens its
policy. (Apart from ``tests/test_docs_examples.py`` so the workers share these sessions.)"""

from __future__ import annotations

import os
import re
import subprocess
import textwrap
from pathlib import Path

import pytest
import yaml
from docs_support import REPO, WORKFLOW, blocks, free_port, page, run_bash, user_env
from projects import make_project


def test_the_ci_example_is_the_file_and_references_what_exists() -> None:
    text = WORKFLOW.read_text()
    include = f'--8<-- "{WORKFLOW.relative_to(REPO).as_posix()}"\n'
    ci_page = page("getting-started/ci.md")
    assert any(body == include for _, body in blocks(ci_page, "yaml")), "the page quotes no file"
    flow = yaml.safe_load(text)
    steps = flow["jobs"]["gate"]["steps"]
    checkout = next(s for s in steps if s.get("uses", "").startswith("actions/checkout"))
    assert checkout["with"]["fetch-depth"] == 0  # history for the base branch
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact"))
    assert upload["if"] == "always()" and upload["with"]["path"] == "reports/"
    script = next(s["run"] for s in steps if "evalkit gate" in s.get("run", ""))
    paths = re.findall(r"(?<![\w$])[\w.-]+/[\w./-]+\.(?:md|yaml|json)\b", script)
    # the base branch's config, found in its worktree as the CLI finds it (evalkit.yaml at the
    # root, as `evalkit init` writes it, else corpus/evalkit.yaml, as here): never hard-coded
    assert '--config "$RUNNER_TEMP/base" ' in script
    assert not [p for p in paths if p.endswith("evalkit.yaml")], paths
    # The pin: the base branch is promoted, the gate names only the candidate (so it judges it
    # against the promotion) and rebaselines the corpus delta; never the PR's own baseline.
    assert "evalkit baseline promote base" in script
    assert re.search(r"evalkit gate candidate --rebaseline", script)
    # The split: main's store is only pulled from, the job's own runs go to a store of its own.
    assert 'DB="--db $RUNNER_TEMP/' in script and "evalkit push" not in script
    evalkit_lines = [line for line in script.splitlines() if line.strip().startswith("evalkit ")]
    assert all("$DB" in line for line in evalkit_lines), evalkit_lines
    assert 'evalkit pull baseline --store "$EVALKIT_STORE" $DB' in script
    for path in paths:  # the base branch's files are the repository's, in a worktree
        assert (REPO / path.removeprefix("base/")).is_file(), path
    for tag in re.findall(r"--tag (\S+)", script):
        assert f"[{tag}" in (REPO / "corpus" / "cases").joinpath(f"{tag}.yaml").read_text()
    assert flow["jobs"]["gate"]["permissions"]["pull-requests"] == "write"  # the PR comment
    post = _posting_step(steps)
    assert post["if"] == "always()" and "GITHUB_STEP_SUMMARY" in post["run"]
    assert '--markdown "$RUNNER_TEMP/gate.md"' in script and "gate.md" in post["run"]


#: A pull_request job's environment as GitHub Actions sets it (evalkit.provenance reads it): the
#: job's own records excuse nothing; its promotion of the base branch's clean commit does.
PR_JOB = {"GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": "pull_request", "GITHUB_RUN_ID": "1234",
          "GITHUB_JOB": "gate", "GITHUB_REF": "refs/pull/7/merge", "GITHUB_HEAD_REF": "fix",
          "GITHUB_BASE_REF": "main"}  # fmt: skip
#: main's job (a person starting the nightly's promotion by hand).
MAIN_JOB = {"GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": "workflow_dispatch",
            "GITHUB_RUN_ID": "1200", "GITHUB_JOB": "promote",
            "GITHUB_REF": "refs/heads/main"}  # fmt: skip


def _posting_step(steps: list[dict]) -> dict:
    return next(s for s in steps if "gh pr comment" in s.get("run", ""))


def _ci_checkout(
    tmp_path: Path, port: int, init: bool = False
) -> tuple[list[dict], str, Path, dict[str, str]]:
    """The workflow's steps and gate script, and a git checkout of the corpus whose HEAD is
    also ``origin/main`` (the base branch the workflow promotes): this repository's layout
    (corpus/evalkit.yaml), or with ``init`` a project made by ``evalkit init`` (evalkit.yaml at
    its root) with the demo's judge switched on, as the workflow's ``--set judge.base_url``
    expects. The script's fixed port is ``port``: another test may hold the workflow's own (a
    test that publishes a baseline first must serve it on the same port, as the pin compares
    endpoints)."""
    steps = yaml.safe_load(WORKFLOW.read_text())["jobs"]["gate"]["steps"]
    script = next(s["run"] for s in steps if "evalkit gate" in s.get("run", ""))
    assert "--port 18080 " in script
    script = script.replace("--port 18080 ", f"--port {port} ")
    work = tmp_path / "checkout"
    if init:
        make_project(work, config=INIT_JUDGE)
    else:
        make_project(work / "corpus", demo=True)
    env = user_env(tmp_path) | PR_JOB | {"RUNNER_TEMP": str(tmp_path)}
    git = ["git", "-c", "user.name=ci", "-c", "user.email=ci@example.com"]
    for command in (
        ["init", "-q"],
        ["add", "."],
        ["commit", "-q", "-m", "base"],
        ["update-ref", "refs/remotes/origin/main", "HEAD"],
    ):
        subprocess.run([*git, *command], cwd=work, env=env, check=True, capture_output=True)
    return steps, script, work, env


#: The judge `evalkit init` leaves commented out, switched on (the demo's).
INIT_JUDGE = """
judge:
  model: demo-judge-1
  base_url: http://127.0.0.1:8765/v1
  api_key_env: OPENAI_API_KEY
"""


@pytest.mark.timeout(480)
def test_the_ci_example_runs_in_a_project_made_by_evalkit_init(tmp_path: Path) -> None:
    _, script, work, env = _ci_checkout(tmp_path, free_port(), init=True)
    assert (work / "evalkit.yaml").is_file() and not (work / "corpus").exists()
    result = run_bash(script, work, env)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    assert "suite config not found" not in out
    assert "baseline of suite 'my-assistant' is now" in out  # the init project's, promoted
    assert "PASSED" in (tmp_path / "gate.md").read_text().splitlines()[0]


@pytest.mark.timeout(480)
def test_the_ci_example_runs(tmp_path: Path) -> None:
    steps, script, work, env = _ci_checkout(tmp_path, free_port())
    result = run_bash(script, work, env)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    assert "baseline of suite" in out and "rebaselin" in out  # promoted, then the delta (none)
    assert list((work / "reports").glob("*/gate.html")), out[-2000:]
    # the posting step, with a stand-in gh that records its arguments and has no last comment
    bin_dir, calls, summary = tmp_path / "bin", tmp_path / "gh-calls", tmp_path / "summary.md"
    bin_dir.mkdir()
    (bin_dir / "gh").write_text(
        f'#!/bin/sh\necho "$*" >> {calls}\ncase "$*" in *--edit-last*) exit 1;; esac\n'
    )
    (bin_dir / "gh").chmod(0o755)
    env |= {"GITHUB_STEP_SUMMARY": str(summary), "PR": "7", "GH_TOKEN": "t",
            "PATH": os.pathsep.join([str(bin_dir), env["PATH"]])}  # fmt: skip
    posted = run_bash(_posting_step(steps)["run"], work, env)
    assert posted.returncode == 0, posted.stdout + posted.stderr
    report = (tmp_path / "gate.md").read_text()
    assert report.startswith("## ") and "evalkit gate: PASSED" in report.splitlines()[0]
    assert summary.read_text() == report
    body = f"--body-file {tmp_path / 'gate.md'}"
    assert calls.read_text().splitlines() == [
        f"pr comment 7 {body} --edit-last",
        f"pr comment 7 {body}",
    ]


@pytest.mark.timeout(480)
def test_the_ci_example_with_a_team_store_runs_only_the_candidate(tmp_path: Path) -> None:
    """main's promoted baseline published to the team store; the pull-request job pulls it and
    gates with one run: no base-branch run, no promotion of its own, the same PASSED."""
    port = free_port()
    _, script, work, env = _ci_checkout(tmp_path, port)
    store = f"sqlite:///{tmp_path / 'team' / 'catalog.db'}"
    main_job = f"""
        eval "$(evalkit demo serve --port {port} --detach)"
        URL="--set system.base_url=$EVALKIT_DEMO_URL --set judge.base_url=$EVALKIT_DEMO_URL"
        evalkit run --label nightly --no-progress $URL --db {tmp_path}/main.duckdb
        evalkit baseline promote nightly --who ana --reason "night 41" --db {tmp_path}/main.duckdb
        evalkit push nightly --store {store} --db {tmp_path}/main.duckdb
        kill $EVALKIT_DEMO_PID
    """
    main_env = {k: v for k, v in env.items() if k not in PR_JOB} | MAIN_JOB
    published = run_bash(textwrap.dedent(main_job), work, main_env)
    assert published.returncode == 0, (published.stdout + published.stderr)[-3000:]
    result = run_bash(script, work, env | {"EVALKIT_STORE": store})
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    assert "PASSED" in (tmp_path / "gate.md").read_text().splitlines()[0]
    job_db = str(tmp_path / "evalkit.duckdb")  # the job's own store ($DB)
    from evalkit.store import open_store

    with open_store(job_db, read_only=True) as local:
        labels = sorted(local.runs()["label"].to_list())
        assert labels == ["candidate", "nightly"]  # the pulled baseline and the job's one run
        assert local.exam(local.resolve_run("nightly")) is not None  # main's exam came along
    assert not (tmp_path / "base").exists()  # the base branch was never checked out
    from evalkit.store.shared import open_shared_store

    assert open_shared_store(store).runs()["label"].to_list() == ["nightly"]  # only read


@pytest.mark.timeout(480)
def test_the_ci_example_does_not_let_the_pull_request_loosen_its_policy(tmp_path: Path) -> None:
    """The same workflow on a pull request whose only change is a looser evalkit.yaml (alpha
    lowered, so nothing could block): UNVERIFIED, exit 1, the change named in the report."""
    _, script, work, env = _ci_checkout(tmp_path, free_port())
    config = work / "corpus" / "evalkit.yaml"
    text = config.read_text()
    assert "gate: {alpha: 0.05," in text
    config.write_text(text.replace("gate: {alpha: 0.05,", "gate: {alpha: 0.01,"))
    result = run_bash(script, work, env)
    out = result.stdout + result.stderr
    assert result.returncode == 1, out[-4000:]
    report = (tmp_path / "gate.md").read_text()
    assert "evalkit gate: UNVERIFIED" in report.splitlines()[0], report[:2000]
    assert "alpha" in report and "--policy" in report


@pytest.mark.timeout(480)
def test_the_ci_example_ignores_a_promotion_the_pull_request_job_makes_of_its_own_run(
    tmp_path: Path,
) -> None:
    """One extra command in the pull request's job — promoting its own candidate — changes
    nothing: the gate judges against the base branch's promotion and lists the other."""
    _, script, work, env = _ci_checkout(tmp_path, free_port())
    git = ["git", "-c", "user.name=dev", "-c", "user.email=dev@example.com"]
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "the pull request"], cwd=work,
                   env=env, check=True, capture_output=True)  # fmt: skip
    own = "evalkit run --label candidate --no-progress $URL $DB\n"
    assert script.count(own) == 1
    script = script.replace(
        own, own + 'evalkit baseline promote candidate --who me --reason "mine" $DB\n'
    )
    result = run_bash(script, work, env)
    out = result.stdout + result.stderr
    assert "baseline of suite" in out and "is now" in out, out[-3000:]  # the promotion ran
    assert (tmp_path / "gate.md").is_file(), out[-3000:]
    report = (tmp_path / "gate.md").read_text()
    assert "PASSED" in report.splitlines()[0]  # judged against the base branch's promotion
    assert "(mine) ignored\\: written by this pull-request job" in report, report[:3000]
    assert "refusing to compare run" not in out  # not gated against itself

"""The pin end to end against the demo simulator: a pull request that rewords the cases its
candidate broke is UNVERIFIED, and BLOCKED once the baseline configuration ran the new wording
(`evalkit gate --rebaseline`); an identical configuration re-run three times, demo noise on,
PASSES every time (the false-block direction)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from projects import make_project

from evalkit.cli import main
from evalkit.compare.pin import gate_pair
from evalkit.demo.server import DemoServer
from evalkit.store import open_store

REPO = Path(__file__).resolve().parents[2]


def _reword(root: Path, ids: set[str]) -> int:
    """Edit each case's provenance (its wording for the gate: a new case hash)."""
    done = 0
    for path in (root / "cases").glob("*.yaml"):
        blocks = re.split(r"(?m)^(?=- id: )", path.read_text(encoding="utf-8"))
        for i, block in enumerate(blocks):
            match = re.match(r"- id: (\S+)", block)
            if match and match[1] in ids:
                blocks[i] = block.replace("reviewer: ", "reviewer: pr-author-", 1)
                done += blocks[i] != block
        path.write_text("".join(blocks), encoding="utf-8")
    return done


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, demo_server: DemoServer):
    tmp = tmp_path_factory.mktemp("pin")
    make_project(tmp / "corpus", demo=True)
    url = demo_server.base_url
    sets = ["--set", f"system.base_url={url}", "--set", f"judge.base_url={url}"]
    return tmp, str(tmp / "e.duckdb"), str(tmp / "corpus" / "evalkit.yaml"), sets


def _run(project, label: str, *extra: str) -> None:
    _, db, config, sets = project
    args = ["run", "--db", db, "--config", config, "--label", label, "--no-progress"]
    assert main([*args, *sets, *extra]) == 0


@pytest.mark.timeout(600)
def test_reworded_regressions_are_unverified_then_blocked_after_rebaselining(project, capsys):
    tmp, db, config, sets = project
    _run(project, "base")
    assert main(["baseline", "promote", "base", "--db", db, "--who", "ana", "--reason", "v1"]) == 0
    _run(project, "v2", "--prompt", str(tmp / "corpus" / "prompts" / "v2.md"))
    with open_store(db, read_only=True) as store:
        _, first = gate_pair(store, None, "v2", config, ["prompt"])
    regressed = [s for s in first.critical if s.state == "regressed"]
    assert first.status == "BLOCKED" and regressed, first.summary()
    tag = regressed[0].tag
    broken = {c for f in first.blocking() if f.slice == tag for c in f.case_ids}
    assert broken
    # The pull request rewords exactly the broken cases of that tag, and runs v2 again.
    assert _reword(tmp / "corpus", broken) == len(broken)
    _run(project, "v2-reworded", "--prompt", str(tmp / "corpus" / "prompts" / "v2.md"))
    with open_store(db, read_only=True) as store:
        _, hidden = gate_pair(store, None, "v2-reworded", config, ["prompt"])
    # Judged on the pinned exam (issue 42): the reworded cases are still there, in their pinned
    # version, and the tag regresses before anything is rebaselined.
    (state,) = [s for s in hidden.critical if s.tag == tag]
    assert hidden.status == "BLOCKED" and state.state == "regressed" and state.broken >= len(broken)
    assert f"edits {len(broken)}" in (hidden.exam_line or "")
    # Rebaselined through the CLI: the reworded versions are compared too, and it still blocks.
    gate = ["gate", "v2-reworded", "--db", db, "--config", config, "--allow-diff", "prompt",
            "--out", str(tmp / "reports"), "--rebaseline", *sets]  # fmt: skip
    assert main(gate) == 1
    out = capsys.readouterr()
    assert "rebaselined" in out.err and "gate BLOCKED" in out.out
    with open_store(db, read_only=True) as store:
        comparison, again = gate_pair(store, None, "v2-reworded", config, ["prompt"])
    (state,) = [s for s in again.critical if s.tag == tag]
    assert state.state == "regressed" and state.broken >= len(broken)
    assert comparison.additions["rebaselined"].sum() == len(broken)
    assert comparison.rebaseline is not None
    # A second rebaseline reuses the run: nothing is asked again.
    assert main(gate) == 1
    assert "reused run" in capsys.readouterr().err


@pytest.mark.timeout(600)
def test_an_identical_configuration_rerun_three_times_passes_every_time(project):
    _, db, config, _ = project
    _run(project, "same-base")
    for i in range(3):
        _run(project, f"same-{i}", "--no-cache")  # demo noise on: asked again every time
        with open_store(db, read_only=True) as store:
            _, decision = gate_pair(store, "same-base", f"same-{i}", config)
        assert decision.status == "PASSED", decision.summary()
    # Cherry-picking is visible: the other runs of this configuration (whatever corpus they
    # ran), with their decisions.
    (siblings,) = [f for f in decision.findings if f.kind == "siblings"]
    shown = dict(map(tuple, siblings.statistic["siblings"]))
    with open_store(db, read_only=True) as store:
        reruns = {store.resolve_run(f"same-{i}") for i in range(2)}
    assert {shown[r] for r in reruns} == {"PASSED"}
    assert siblings.severity != "block"


@pytest.mark.timeout(600)
def test_a_candidate_that_excluded_a_tag_is_refused_with_the_flags_that_match(project, capsys):
    tmp, db, config, _ = project
    _run(project, "full")
    _run(project, "narrow", "--exclude-tag", "agent")
    gate = ["gate", "full", "narrow", "--db", db, "--config", config, "--out", str(tmp / "r")]
    assert main(gate) == 2
    err = capsys.readouterr().err
    assert "ran --exclude-tag agent but the baseline" in err and "the full suite" in err


@pytest.mark.timeout(600)
def test_a_pull_request_that_drops_a_critical_tag_is_unverified_under_the_pinned_policy(project):
    tmp, db, config, _ = project
    _run(project, "pinned")
    assert (
        main(["baseline", "promote", "pinned", "--db", db, "--who", "ana", "--reason", "v1"]) == 0
    )
    _run(project, "pr")
    text = Path(config).read_text(encoding="utf-8")
    loose = tmp / "corpus" / "loose.yaml"
    loose.write_text(text.replace("critical_tags: [billing, injection, policy]",
                                  "critical_tags: [billing, injection]"))  # fmt: skip
    strict = tmp / "corpus" / "strict.yaml"
    strict.write_text(text.replace("gate: {alpha: 0.05,", "gate: {alpha: 0.1,"))
    with open_store(db, read_only=True) as store:
        _, dropped = gate_pair(store, None, "pr", str(loose))
        _, tightened = gate_pair(store, None, "pr", str(strict))
    assert dropped.status == "UNVERIFIED"
    (finding,) = [f for f in dropped.blocking() if f.kind == "loosened"]
    assert "'policy' dropped" in finding.message and "--policy" in finding.message
    assert dropped.policy.critical_tags == ("billing", "injection", "policy")  # the pin decides
    assert tightened.policy.alpha == 0.1 and not any(
        f.kind == "loosened" for f in tightened.findings
    )  # a stricter policy applies at once


@pytest.mark.timeout(600)
def test_five_identical_reruns_through_the_ci_flow_pass_every_time(
    tmp_path: Path, demo_server: DemoServer, capsys
):
    """The false-block direction of the pinned exam and of blocking siblings: the CI example's
    flow (run, promote the base, run the candidate, `evalkit gate --rebaseline`), five times on
    one store with the demo's noise on (nothing cached), passes every time."""
    from types import SimpleNamespace

    from evalkit.cli.rebaseline import maybe_rebaseline

    make_project(tmp_path / "corpus", demo=True)
    db, config = str(tmp_path / "e.duckdb"), str(tmp_path / "corpus" / "evalkit.yaml")
    url = demo_server.base_url
    sets = ["--set", f"system.base_url={url}", "--set", f"judge.base_url={url}"]
    run = ["run", "--db", db, "--config", config, "--no-progress", *sets]
    assert main([*run, "--label", "base"]) == 0
    assert main(["baseline", "promote", "base", "--db", db, "--who", "ci", "--reason", "main"]) == 0
    assert "exam pinned" in capsys.readouterr().out
    for i in range(5):
        assert main([*run, "--label", f"candidate-{i}", "--no-cache"]) == 0
        gate = ["gate", f"candidate-{i}", "--db", db, "--config", config, "--rebaseline", *sets,
                "--out", str(tmp_path / "reports")]  # fmt: skip
        if i == 4:  # the last one through the whole command, notebook and all
            assert main(gate) == 0, capsys.readouterr().out
            continue
        # What `evalkit gate --rebaseline` does before its notebook, then the decision it makes.
        args = SimpleNamespace(rebaseline=True, config=config, overrides=sets[1::2], db=db,
                               wait=30.0)  # fmt: skip
        with open_store(db, read_only=True) as store:
            base, cand = (
                store.current_baseline("support-triage"),
                store.resolve_run(f"candidate-{i}"),
            )
        maybe_rebaseline(args, base, cand)
        with open_store(db, read_only=True) as store:
            _, decision = gate_pair(store, None, f"candidate-{i}", config)
        assert decision.status == "PASSED", decision.summary()
        assert decision.exam_line and "by ci" in decision.exam_line

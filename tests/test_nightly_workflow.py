"""The nightly CI example (examples/github-actions/evalkit-nightly.yml): its shape, and its
scripts run for two nights against the demo simulator with a person's promotion between them:
each night the case-index job, every shard of the matrix (one after another, in one checkout:
what the Actions cache and the artifacts carry between machines is there already) and the
nightly job that merges them."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest
import yaml
from docs_support import free_port, run_bash, user_env
from projects import make_project

REPO = Path(__file__).resolve().parents[1]
NIGHTLY = REPO / "examples" / "github-actions" / "evalkit-nightly.yml"
INDEX_PATH = "corpus/.evalkit/case-index"


def _flow() -> dict:
    return yaml.safe_load(NIGHTLY.read_text())


def _steps(job: str) -> list[dict]:
    return _flow()["jobs"][job]["steps"]


def _script(job: str, word: str) -> str:
    return next(s["run"] for s in _steps(job) if word in s.get("run", ""))


def _uses(job: str, action: str) -> list[dict]:
    return [s for s in _steps(job) if s.get("uses", "").split("@")[0] == action]


def test_the_nightly_is_scheduled_and_never_promotes_by_itself() -> None:
    flow = _flow()
    on = flow[True]  # YAML 1.1 reads the key `on` as true
    assert on["schedule"][0]["cron"] and "promote" in on["workflow_dispatch"]["inputs"]
    shard = _script("shard", "evalkit run")
    assert "--sealed" in shard and "--no-cache" in shard and "--set replays=" in shard
    nightly = _script("nightly", "evalkit runs merge")
    assert "evalkit flakes measure" in nightly and "evalkit gate" in nightly
    runs = [s.get("run", "") for job in flow["jobs"] for s in _steps(job)]
    assert sum("baseline promote" in run for run in runs) == 1  # only the dispatched job's
    promote = flow["jobs"]["promote"]
    assert "workflow_dispatch" in promote["if"] and "inputs.promote != ''" in promote["if"]
    step = next(s for s in promote["steps"] if "baseline promote" in s.get("run", ""))
    assert "github.actor" in step["env"]["WHO"]
    assert "inputs.promote == ''" in flow["jobs"]["case-index"]["if"]  # a promotion runs nothing
    assert "concurrency" in flow  # one writer of the store at a time
    for job in ("promote", "nightly"):
        cached = [s for s in _steps(job) if s.get("uses", "").startswith("actions/cache")]
        assert [s["with"]["path"] for s in cached] == ["data/evalkit.duckdb"] * 2, job


def test_every_shard_restores_the_index_the_index_job_warms() -> None:
    """The matrix: N shards of one run id, each restoring the case index under the key the
    case-index job saves it (the corpus's hash; an older index by prefix), then the merge job
    taking every shard's parts. Only inputs actions/cache documents: path, key, restore-keys."""
    flow = _flow()
    jobs = flow["jobs"]
    assert jobs["shard"]["needs"] == "case-index" and jobs["nightly"]["needs"] == "shard"
    shards = jobs["shard"]["strategy"]["matrix"]["shard"]
    assert shards == list(range(1, len(shards) + 1)) and len(shards) > 1
    env = jobs["shard"]["env"]
    assert env["SHARD"] == "${{ matrix.shard }}" and env["SHARDS"] == "${{ strategy.job-total }}"
    assert "github.run_id" in env["RUN_ID"] and env["RUN_ID"] == jobs["nightly"]["env"]["RUN_ID"]
    caches = [_uses(job, "actions/cache") for job in ("case-index", "shard")]
    assert [len(c) for c in caches] == [1, 1]
    (warm,), (restored,) = caches
    assert warm["with"] == restored["with"]  # the same key: the shard finds what was saved
    assert set(warm["with"]) == {"path", "key", "restore-keys"}
    assert warm["with"]["path"] == INDEX_PATH
    key, prefix = warm["with"]["key"], warm["with"]["restore-keys"]
    assert key == prefix + "${{ hashFiles('corpus/**') }}" and prefix.endswith("-")
    steps = _steps("case-index")
    assert steps.index(warm) < next(i for i, s in enumerate(steps) if "run" in s and
                                    "evalkit cases index" in s["run"])  # fmt: skip
    shard_steps = _steps("shard")
    assert shard_steps.index(restored) < next(
        i for i, s in enumerate(shard_steps) if "evalkit run" in s.get("run", "")
    )
    shard = _script("shard", "evalkit run")
    assert '--shard "$SHARD/$SHARDS" --run-id "$RUN_ID" --parts data/parts' in shard
    (upload,) = _uses("shard", "actions/upload-artifact")
    (download,) = _uses("nightly", "actions/download-artifact")
    assert upload["with"]["path"] == "data/parts/" and download["with"]["path"] == "data/parts"
    assert re.fullmatch(download["with"]["pattern"].replace("*", ".*"), upload["with"]["name"])
    assert download["with"]["merge-multiple"] is True  # one parts root, as the merge reads it
    assert 'evalkit runs merge "$RUN_ID" --parts data/parts' in _script(
        "nightly", "evalkit runs merge"
    )


def test_the_workflows_commands_take_those_flags() -> None:
    """Every ``evalkit`` command a step runs exists and takes the flags the step gives it
    (a variable stands for one word, here 1; ``$SUITE`` and ``$URL`` for ``--set`` flags)."""
    from evalkit.cli import _parser
    from evalkit.demo.server import _parser as serve_parser

    scripts = [s["run"] for job in _flow()["jobs"] for s in _steps(job) if "run" in s]
    lines = [line for script in scripts for line in script.replace("\\\n", " ").splitlines()]
    commands = [line.split("evalkit ", 1)[1] for line in lines if re.search(
        r"^\s*(\w+=\$\(|if |eval \"\$\()?evalkit ", line)]  # fmt: skip
    assert {c.split()[0] for c in commands} >= {"cases", "run", "runs", "flakes", "gate"}
    for command in commands:
        words = shlex.split(re.split(r"\s[|>]|;|\)", command)[0])
        words = [w if not w.startswith("$") else "1" for w in words if w not in ("$SUITE", "$URL")]
        try:
            if words[:2] == ["demo", "serve"]:  # main hands these to the simulator's parser
                serve_parser().parse_args([w for w in words[2:] if w != "--detach"])
            else:
                _parser(words[0]).parse_args(words)  # as `evalkit` builds it for the command
        except SystemExit as exc:  # argparse refuses an unknown command or flag
            raise AssertionError(f"evalkit {command!r}: not a command with those flags") from exc


def _night(work: Path, env: dict[str, str], port: int, night: int) -> list[tuple[int, int]]:
    """One night's jobs in order; (cases in the share, cases built) of each shard."""
    index = run_bash(_script("case-index", "evalkit cases index"), work, env)
    assert index.returncode == 0, index.stderr[-3000:]
    assert f"→ {work / INDEX_PATH}" in index.stdout
    shards = _flow()["jobs"]["shard"]["strategy"]["matrix"]["shard"]
    run_id = f"nightly-{night}"
    built = []
    for shard in shards:
        script = _script("shard", "evalkit run").replace("--port 18080", f"--port {port}")
        got = run_bash(script, work, env | {"SHARD": str(shard), "SHARDS": str(len(shards)),
                                          "RUN_ID": run_id, "REPLAYS": env["REPLAYS"]})  # fmt: skip
        assert got.returncode == 0, (got.stdout + got.stderr)[-3000:]
        line = next(x for x in got.stdout.splitlines() if "in this shard's share" in x)
        words = line.split()
        built.append((int(words[0]), int(words[words.index("cases", 6) - 1])))
    script = _script("nightly", "evalkit runs merge").replace("--port 18080", f"--port {port}")
    summary = str(work.parent / f"s{night}.md")
    merged = run_bash(script, work, env | {"RUN_ID": run_id, "GITHUB_STEP_SUMMARY": summary})
    assert merged.returncode == 0, (merged.stdout + merged.stderr)[-3000:]
    return built


@pytest.mark.timeout(600)
def test_two_nights_with_a_promotion_between(tmp_path: Path) -> None:
    work = tmp_path / "checkout"
    make_project(work / "corpus", demo=True)
    shutil.copytree(REPO / "notebooks", work / "notebooks")
    env = user_env(tmp_path) | {"RUNNER_TEMP": str(tmp_path), "REPLAYS": "2", "FLAKE_RUNS": "2"}
    port = free_port()  # the workflow's fixed port may be taken here: another, every job
    first = _night(work, env, port, 1)
    # warmed by the case-index job: each shard builds its share's cases alone, none read cold
    assert all(0 < made == share for share, made in first), first
    corpus = sum(share for share, _ in first)
    summary = (tmp_path / "s1.md").read_text()
    assert "not passed (exit 2)" in summary  # no promoted baseline yet: nothing to gate against
    assert "Promotion candidate" in summary and "label nightly:" in summary
    promoted = run_bash(_script("promote", "baseline promote"), work,
                     env | {"RUN": "nightly@latest", "WHO": "ana", "WHY": "night one"})  # fmt: skip
    assert promoted.returncode == 0, promoted.stderr
    case = next((work / "corpus" / "cases").glob("*.yaml"))
    case.write_text(case.read_text() + "\n# edited between the nights\n")  # one file read again
    second = _night(work, env, port, 2)
    assert [s for s, _ in second] == [s for s, _ in first] and sum(s for s, _ in second) == corpus
    summary = (tmp_path / "s2.md").read_text()
    assert (
        "evalkit gate: PASSED" in summary
        and "gate against the promoted baseline: passed" in summary
    )
    history = json.loads((work / "reports" / "history" / "history.json").read_text())
    assert [p["label"] for p in history["points"]] == ["nightly", "nightly"]
    assert all(p["flaky"] is not None for p in history["points"])  # flakes of that config
    assert (work / "reports" / "history" / "pass_rates.svg").is_file()

"""A Python system's identity covers what it can read: every tracked file of its repository
outside the corpus (a prompt file it loads, a module it imports through importlib) and the
environment variables it declares (``system.env``). Changing any of them re-asks every case
(0 cached answers served); an undeclared variable is not seen."""

from __future__ import annotations

import itertools
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from evalkit.corpus.cases import load_corpus
from evalkit.corpus.suite import load_suite
from evalkit.run.runner import RunOptions, run_suite
from evalkit.store import open_store

_names = itertools.count()

APP = """
import importlib
import os
from pathlib import Path

HERE = Path(__file__).parent


def answer(messages, **context):
    prompt = (HERE / "prompts" / "system.txt").read_text().strip()
    style = importlib.import_module("{pkg}_style").STYLE  # by name: no import statement
    flag = os.environ.get("EK_FEATURE", "off") + "/" + os.environ.get("EK_UNDECLARED", "-")
    return {{"text": f"fine {{prompt}} {{style}} {{flag}}"}}
"""

CASES = "".join(
    f"- id: case-{i}\n  input: {{messages: [{{role: user, content: 'question {i}'}}]}}\n"
    "  expect: [{contains: fine}]\n"
    for i in range(4)
)


def _git(where: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=where, check=True, capture_output=True,
    )  # fmt: skip


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """A git repository: ``app/`` (the system, its prompt file and a module it imports by
    name) and ``corpus/`` (the suite, declaring EK_FEATURE), all committed."""
    pkg = f"ek_repo_{next(_names)}"
    app = tmp_path / "app"
    (app / "prompts").mkdir(parents=True)
    (app / f"{pkg}.py").write_text(APP.format(pkg=pkg))
    (app / f"{pkg}_style.py").write_text('STYLE = "plain"\n')
    (app / "prompts" / "system.txt").write_text("be brief\n")
    corpus = tmp_path / "corpus"
    (corpus / "cases").mkdir(parents=True)
    (corpus / "cases" / "a.yaml").write_text(CASES)
    (corpus / "evalkit.yaml").write_text(
        textwrap.dedent(
            f"""\
            suite: repo
            system: {{provider: python, model: my-app, function: "{pkg}:answer",
                      env: [EK_FEATURE]}}
            """
        )
    )
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "app")
    monkeypatch.syspath_prepend(str(app))
    monkeypatch.delenv("EK_FEATURE", raising=False)
    monkeypatch.delenv("EK_UNDECLARED", raising=False)
    return tmp_path, pkg


def _run(root: Path, store_path: Path, label: str) -> tuple[int, int, list[str]]:
    """(requests, cache hits, output texts) of one run of the suite."""
    suite = load_suite(root / "corpus" / "evalkit.yaml")
    corpus = load_corpus(suite.root)
    with open_store(store_path, write=True) as store:
        done = run_suite(suite, corpus, store, RunOptions(label=label, progress=False))
        texts = store.outputs(done.run_id)["text"].to_list()
    return done.requests, done.cache_hits, texts


@pytest.mark.parametrize(
    "change",
    ["prompt file", "importlib module", "declared variable"],
)
def test_changing_what_the_system_reads_re_asks_every_case(
    project: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    root, pkg = project
    db = tmp_path / "e.duckdb"
    first = _run(root, db, "a")
    again = _run(root, db, "b")
    assert first[:2] == (4, 0) and again[:2] == (0, 4)  # unchanged: all cached
    if change == "prompt file":
        (root / "app" / "prompts" / "system.txt").write_text("be verbose\n")  # not committed
        expect = "be verbose"
    elif change == "importlib module":
        # another size than the original's: a .pyc written in the same second is checked by
        # its source's mtime and size, and this process must import the new source
        (root / "app" / f"{pkg}_style.py").write_text('STYLE = "fancy"  # restyled\n')
        _git(root, "commit", "-qam", "style")  # committed: the tree's object ids move
        monkeypatch.delitem(sys.modules, f"{pkg}_style")  # as a fresh CI process would
        expect = "fancy"
    else:
        monkeypatch.setenv("EK_FEATURE", "on")
        expect = "on/"
    requests, hits, texts = _run(root, db, "c")
    assert (requests, hits) == (4, 0)  # 0 cached answers served
    assert all(expect in text for text in texts)


def test_an_undeclared_variable_is_not_seen(
    project: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, _ = project
    db = tmp_path / "e.duckdb"
    _run(root, db, "a")
    monkeypatch.setenv("EK_UNDECLARED", "on")  # the system reads it, the suite never named it
    requests, hits, texts = _run(root, db, "b")
    assert (requests, hits) == (0, 4)  # served the old answers: the README says so
    assert not any("/on" in text for text in texts)


def test_the_declared_value_is_hashed_never_stored(
    project: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, _ = project
    monkeypatch.setenv("EK_FEATURE", "s3cret-flag-value")
    _run(root, tmp_path / "e.duckdb", "a")
    with open_store(tmp_path / "e.duckdb", read_only=True) as store:
        run_id = store.runs()["run_id"][0]
        manifest = store.manifest(run_id)
        dump = store.query("SELECT manifest FROM runs")["manifest"][0]
    assert "s3cret-flag-value" not in dump
    assert len(manifest.system["env"]["EK_FEATURE"]) == 64
    assert manifest.system["repo"]["digest"] is not None


def test_a_corpus_edit_is_not_a_system_change(project: tuple[Path, str], tmp_path: Path) -> None:
    root, _ = project
    db = tmp_path / "e.duckdb"
    _run(root, db, "a")
    cases = root / "corpus" / "cases" / "a.yaml"
    cases.write_text(cases.read_text() + "# a reviewer's note\n")
    assert _run(root, db, "b")[:2] == (0, 4)


def _outside_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The suite and its app in a folder git cannot read (no repository above it): its store."""
    pkg = f"ek_repo_{next(_names)}"
    app = tmp_path / "app"
    (app / "prompts").mkdir(parents=True)
    (app / f"{pkg}.py").write_text(APP.format(pkg=pkg))
    (app / f"{pkg}_style.py").write_text('STYLE = "plain"\n')
    (app / "prompts" / "system.txt").write_text("be brief\n")
    (tmp_path / "corpus" / "cases").mkdir(parents=True)
    (tmp_path / "corpus" / "cases" / "a.yaml").write_text(CASES)
    (tmp_path / "corpus" / "evalkit.yaml").write_text(
        f'suite: repo\nsystem: {{provider: python, model: my-app, function: "{pkg}:answer"}}\n'
    )
    monkeypatch.syspath_prepend(str(app))
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    for name in ("EVALKIT_CI_EVENT", "EVALKIT_CI_JOB"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "e.duckdb"


def test_an_unreadable_tree_serves_no_cache_in_ci(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outside a git repository a Python system's identity cannot cover what it reads: in a
    CI job its candidate is asked again, never served cached answers."""
    db = _outside_git(tmp_path, monkeypatch)
    assert _run(tmp_path, db, "a")[:2] == (4, 0)
    assert _run(tmp_path, db, "b")[:2] == (0, 4)  # a laptop keeps its cache
    monkeypatch.setenv("EVALKIT_CI_EVENT", "pull_request")
    monkeypatch.setenv("EVALKIT_CI_JOB", "41")
    assert _run(tmp_path, db, "c")[:2] == (4, 0)


def test_cached_answers_of_an_unreadable_tree_leave_the_gate_unverified(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Served cached answers anyway (outside CI), such a candidate is no evidence of what ran:
    the gate is UNVERIFIED, naming the command that verifies it; asked again, it passes."""
    from evalkit.compare.pin import gate_pair

    db = _outside_git(tmp_path, monkeypatch)
    config = str(tmp_path / "corpus" / "evalkit.yaml")
    assert _run(tmp_path, db, "a")[:2] == (4, 0)
    assert _run(tmp_path, db, "b")[:2] == (0, 4)
    with open_store(db, read_only=True) as store:
        _, decision = gate_pair(store, "a", "b", config)
    assert decision.status == "UNVERIFIED", decision.summary()
    (found,) = [f for f in decision.blocking() if f.kind == "unreadable-tree"]
    assert found.severity == "unverified" and len(found.case_ids) == 4
    assert "evalkit run --no-cache" in found.message
    suite = load_suite(config)
    with open_store(db, write=True) as store:  # what `evalkit run --no-cache` does
        options = RunOptions(label="c", progress=False, use_cache=False)
        assert run_suite(suite, load_corpus(suite.root), store, options).cache_hits == 0
    with open_store(db, read_only=True) as store:
        _, decision = gate_pair(store, "a", "c", config)
    assert decision.status == "PASSED", decision.summary()

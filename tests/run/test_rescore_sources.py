"""A rescore records the scorer sources it scored with; a pair scored with different sources is
refused unless declared (``--allow-diff scorers``), and an unchanged rescore still compares."""

from __future__ import annotations

import hashlib
import itertools
import json
import textwrap
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from synthetic_runs import C, make_run, write_store

from evalkit.cli import main
from evalkit.compare.analysis import load_comparison, load_run
from evalkit.compare.comparability import check_comparable
from evalkit.compare.pin import gate_pair
from evalkit.errors import ComparabilityError
from evalkit.scorers.registry import SCORERS
from evalkit.store import open_store
from evalkit.version import __version__

STRICT = '''
from evalkit.scorers.registry import check, scorer


@scorer("polite", primary="word")
def polite(word: str = "please"):
    """Pass when the reply says the polite word."""
    def score(output, case):
        ok = word in (output.text or "").lower()
        return check(ok, f"{word!r} {'said' if ok else 'missing'}")
    return score
'''
#: The same scorer, made to pass everything: what a pull request must not slip in by rescoring.
LENIENT = STRICT.replace("ok = word in", "ok = True or word in")

APP = """
def answer(messages, **context):
    return "Send the order number."
"""

_names = itertools.count()


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Path]]:
    """A suite with a custom scorer module whose one must_pass case fails; (config, module)."""
    before = dict(SCORERS)
    package = f"ekrescore_{next(_names)}_{abs(hash(str(tmp_path))) % 10**8}"
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / package / "checks.py").write_text(STRICT)
    (tmp_path / package / "app.py").write_text(APP)
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "a.yaml").write_text(
        "- id: asks-politely\n  criticality: must_pass\n"
        "  input: {messages: [{role: user, content: hi}]}\n"
        "  expect: [{polite: please}, {contains: order}]\n"
    )
    (tmp_path / "evalkit.yaml").write_text(
        textwrap.dedent(f"""\
            suite: rescore-sources
            system: {{provider: python, model: app, function: "{package}.app:answer"}}
            scorers: [{package}.checks]
            """)
    )
    monkeypatch.chdir(tmp_path)
    yield tmp_path / "evalkit.yaml", tmp_path / package / "checks.py"
    SCORERS.clear()
    SCORERS.update(before)


def _run(label: str) -> None:
    assert main(["run", "--label", label, "--no-progress"]) == 0


def test_a_lenient_rescore_of_the_candidate_is_refused_unless_declared(
    project: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    config, module = project
    _run("base")
    _run("cand")
    module.write_text(LENIENT)
    assert main(["runs", "rescore", "cand"]) == 0
    with open_store("data/evalkit.duckdb", read_only=True) as store:
        cand = store.resolve_run("cand")
        scoring = store.scorings(cand).row(-1, named=True)
        assert store.scores(cand).filter(scorer="polite")["passed"].to_list() == [True]
        run_sources = store.manifest(cand).scorer_files
    key = next(k for k in run_sources if k.startswith("module:"))
    lenient_sha = hashlib.sha256(LENIENT.encode()).hexdigest()
    assert json.loads(scoring["scorer_files"]) == {key: lenient_sha}
    assert scoring["harness"] == __version__
    assert run_sources[key] == hashlib.sha256(STRICT.encode()).hexdigest()  # the run's, kept

    capsys.readouterr()
    assert main(["compare", "base", "cand"]) == 2
    err = capsys.readouterr().err
    assert f"the candidate was rescored with other scorer sources (scoring {cand}/s1)" in err
    assert "rescore both runs with the same scorers, or declare --allow-diff scorers" in err
    assert f"scorer_files.{key}" in err and len(err.strip().splitlines()) == 1
    with open_store("data/evalkit.duckdb", read_only=True) as store:
        with pytest.raises(ComparabilityError, match="candidate was rescored"):
            gate_pair(store, "base", "cand", str(config))
        comparison, decision = gate_pair(store, "base", "cand", str(config), ["scorers"])
        assert comparison.cand.manifest.scorer_files == {key: lenient_sha}
        assert comparison.cand.manifest.run_scorer_files == run_sources
        assert comparison.cand.manifest.rescoring["scoring_id"] == f"{cand}/s1"
        assert load_comparison(store, "base", "cand", ["scorer_files"]).manifest_diff == (
            "scorer_files",
        )
    # declared, the difference is shown, but the run's own (strict) scorers still decide: a
    # rescore under a lenient scorer never turns a failing must_pass case into a pass
    assert decision.status != "PASSED", decision.summary()
    capsys.readouterr()
    assert main(["compare", "base", "cand", "--allow-diff", "scorers"]) == 0  # compared


def test_an_unchanged_rescore_still_compares_and_both_rescored_alike_compare(
    project: tuple[Path, Path],
) -> None:
    config, module = project
    _run("base")
    _run("cand")
    assert main(["runs", "rescore", "cand"]) == 0  # nothing changed: the same sources
    with open_store("data/evalkit.duckdb", read_only=True) as store:
        comparison, decision = gate_pair(store, "base", "cand", str(config))
        assert comparison.manifest_diff == ()
        assert decision.status == "BLOCKED"  # the must_pass case still fails, as it did
    module.write_text(LENIENT)
    assert main(["runs", "rescore", "base"]) == 0
    assert main(["runs", "rescore", "cand"]) == 0
    with open_store("data/evalkit.duckdb", read_only=True) as store:
        comparison, _ = gate_pair(store, "base", "cand", str(config))
        assert comparison.manifest_diff == ()  # scored alike: comparable


def test_edited_scorer_sources_need_declaring_a_one_sided_source_does_not() -> None:
    base = {"model": "m", "scorer_files": {"schemas/a.json": "1", "module:x": "m1"}}
    edited = base | {"scorer_files": {"schemas/a.json": "2", "module:x": "m1"}}
    with pytest.raises(ComparabilityError, match=r"other scorer sources: scorer_files\.schemas"):
        check_comparable(base, edited)
    assert check_comparable(base, edited, ["scorers"]) == ["scorer_files"]
    assert check_comparable(base, edited, ["scorer_files"]) == ["scorer_files"]
    # a new case's schema file (the corpus delta): one difference, taken as before
    added = base | {"scorer_files": {**base["scorer_files"], "schemas/b.json": "3"}}
    assert check_comparable(base, added) == ["scorer_files"]
    # with another difference the suggested flag is the declared name
    with pytest.raises(ComparabilityError, match="--allow-diff scorers"):
        check_comparable(base, added | {"model": "n"})


def test_an_older_store_without_recorded_sources_reads_read_only(tmp_path: Path) -> None:
    db = tmp_path / "old.duckdb"
    write_store(db, [make_run("r1", [C("a", "p")])])
    con = duckdb.connect(str(db))  # as written before scorings recorded their sources
    con.execute("ALTER TABLE scorings DROP COLUMN scorer_files")
    con.execute("ALTER TABLE scorings DROP COLUMN harness")
    con.close()
    with open_store(db, read_only=True) as store:
        run = load_run(store, "r1")
    assert run.manifest.scorer_files == {} and run.manifest.run_scorer_files is None

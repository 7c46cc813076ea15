"""Cases retire with their history (``evalkit cases retire``), and ``evalkit cases coverage``
lists saturated cases that others cover as the candidates."""

from __future__ import annotations

from types import SimpleNamespace

import polars as pl
import pytest

from evalkit.cli import main
from evalkit.corpus.cases import load_corpus
from evalkit.store import open_store

MISC = """\
# always-JSON checks, three alike
- id: misc-a
  tags: [misc]
  input:
    vars: {message: "Hello there"}
  expect: [json_valid]

- id: misc-b
  tags: [misc]
  input:
    vars: {message: "Good morning"}
  expect: [json_valid]   # the same check

- id: misc-c
  tags: [misc]
  input:
    vars: {message: "Hi again"}
  expect: [json_valid]

- id: lonely-d
  tags: [lonely]
  input:
    vars: {message: "Anyone?"}
  expect: [json_valid]
"""


@pytest.fixture
def project(project_factory) -> SimpleNamespace:
    """An ``evalkit init`` project with four more cases, run twice against the demo."""
    made = project_factory(server=True, cases={"misc.yaml": MISC}, runs=["one", "two"])
    config, db = ["--config", str(made.config)], ["--db", str(made.db)]
    run = ["run", "--no-progress", *made.args]
    return SimpleNamespace(root=made.root, config=config, db=db, run=run)


def test_coverage_lists_saturated_cases_others_cover(project, capsys) -> None:
    assert main(["cases", "coverage", "--runs", "2", *project.config, *project.db]) == 0
    out = capsys.readouterr().out
    assert "covered by others:" in out
    assert "  misc-b [misc] covered by misc-a\n  misc-c [misc] covered by misc-a\n" in out
    assert "lonely-d" not in out  # nothing else covers its slice
    assert "billing-double-charge-001" not in out  # must_pass never retires this way
    assert "evalkit cases retire misc-b misc-c --reason 'saturated'" in out
    assert main(["cases", "coverage", "--runs", "3", *project.config, *project.db]) == 2
    assert "2 complete runs of suite 'my-assistant'" in capsys.readouterr().err


def test_an_edited_case_is_not_saturated(project, capsys) -> None:
    path = project.root / "cases" / "misc.yaml"
    path.write_text(MISC.replace("Hello there", "Hello there, edited"))
    assert main(["cases", "coverage", "--runs", "2", *project.config, *project.db]) == 0
    out = capsys.readouterr().out
    # misc-a changed since the runs: no evidence for it, so both others retire, covered by it
    assert "  misc-b [misc] covered by misc-a\n  misc-c [misc] covered by misc-a\n" in out
    assert "misc-a [misc] covered" not in out


def test_retire_moves_the_case_and_keeps_its_results(project, capsys) -> None:
    args = ["cases", "retire", "misc-b", "--reason", "covered by misc-a", "--who", "ana"]
    assert main([*args, *project.config]) == 0
    assert "retired misc-b: cases/misc.yaml → retired/misc.yaml" in capsys.readouterr().out
    left = (project.root / "cases" / "misc.yaml").read_text()
    assert left == MISC.replace(MISC[MISC.index("- id: misc-b") : MISC.index("- id: misc-c")], "")
    retired = load_corpus(project.root, case_dirs=("retired",)).cases
    assert [c.id for c in retired] == ["misc-b"]
    note = retired[0].provenance["note"]
    assert note.endswith("by ana: covered by misc-a") and note.startswith("retired 20")
    assert "# the same check" in (project.root / "retired" / "misc.yaml").read_text()
    assert "misc-b" not in {c.id for c in load_corpus(project.root).cases}
    assert main(["cases", "lint", *project.config]) == 0
    with open_store(project.db[1], read_only=True) as store:  # its history stays queryable
        assert store.scores("one").filter(pl.col("case_id") == "misc-b").height == 1
    assert main([*project.run, "--label", "three"]) == 0
    with open_store(project.db[1], read_only=True) as store:
        assert "misc-b" not in store.cases("three")["case_id"].to_list()
    assert main([*args, *project.config]) == 2  # retired already: not in the corpus
    assert "case misc-b: no case with this id" in capsys.readouterr().err

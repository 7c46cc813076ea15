"""`evalkit baseline promote` pins the exam only when the custom scorer modules on disk are the
source the run scored with (issue 42)."""

from __future__ import annotations

import json
import uuid

import duckdb

MODULE = '''
from evalkit.scorers.registry import check, scorer


@scorer("{name}")
def {name}():
    """Pass when the reply is not empty."""
    def score(output, case):
        return check(bool(output.text), "{verdict}")
    return score
'''


def test_a_scorer_module_edited_since_the_run_pins_no_exam(project_factory, registry, capsys):
    name = f"ekcli_{uuid.uuid4().hex[:12]}"
    project = project_factory(server=True, config=f"scorers: [{name}]\n")
    module = project.root / f"{name}.py"
    module.write_text(MODULE.format(name=name, verdict="not empty"))
    assert project.run("v1") == 0
    module.write_text(MODULE.format(name=name, verdict="edited"))  # the checkout moved on
    capsys.readouterr()

    promote = ["baseline", "promote", "v1", "--db", project.db, "--config", project.config]
    assert project.cli(*promote, "--who", "ana", "--reason", "first") == 0

    out = capsys.readouterr().out
    assert f"no exam pinned: the scorer modules at {project.root}" in out, out
    assert f"module:{name}" in out, out


def test_a_run_that_recorded_no_config_pins_the_exam_of_config(project_factory, capsys):
    project = project_factory(server=True)
    assert project.run("v1") == 0
    with duckdb.connect(str(project.db)) as con:  # as a run from before run.config was kept
        (stored,) = con.execute("SELECT manifest FROM runs").fetchone()
        manifest = json.loads(stored)
        del manifest["run"]["config"]
        con.execute("UPDATE runs SET manifest = ?", [json.dumps(manifest)])
    capsys.readouterr()

    promote = ["baseline", "promote", "v1", "--db", project.db, "--config", project.config]
    assert project.cli(*promote, "--who", "ana", "--reason", "first") == 0

    assert "  exam pinned: 4 cases and" in capsys.readouterr().out

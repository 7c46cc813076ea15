"""What the command line imports before it has anything to do: ``evalkit --version`` and the
help of ``gate``, ``compare`` and ``run`` load no frame, model, statistics, store or notebook
library (each a fresh interpreter, its ``sys.modules`` read at the end; no timing)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: Libraries none of these invocations needs (each costs a noticeable share of a CLI start).
HEAVY = (
    "polars", "pydantic", "numpy", "scipy", "duckdb", "pyarrow", "yaml", "altair", "papermill",
    "nbconvert", "nbformat", "great_tables", "openai", "httpx", "jinja2", "rich",
)  # fmt: skip

PROBE = """
import contextlib, io, json, sys
from evalkit.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
    code = main(sys.argv[1:])
heavy = sorted({m.split(".")[0] for m in sys.modules} & set(json.loads(HEAVY)))
print(json.dumps({"heavy": heavy, "out": out.getvalue()}))
"""


def loaded(*args: str) -> dict:
    """What ``evalkit ARGS`` printed and which `HEAVY` libraries its process had imported."""
    code = f"HEAVY = {json.dumps(json.dumps(HEAVY))}\n{PROBE}"
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_version_imports_nothing_heavy() -> None:
    from evalkit.version import __version__

    seen = loaded("--version")
    assert seen["out"].strip() == f"evalkit {__version__}"
    assert seen["heavy"] == []


@pytest.mark.parametrize("command", ["gate", "compare", "run"])
def test_a_commands_help_imports_nothing_heavy(command: str) -> None:
    seen = loaded(command, "--help")
    assert f"usage: evalkit {command}" in seen["out"]
    assert seen["heavy"] == []


def test_the_probe_sees_a_heavy_import() -> None:
    """The check can fail: a command that loads a store imports DuckDB and Polars."""
    seen = loaded("runs", "--db", "/nonexistent/evalkit.duckdb")
    assert "duckdb" in seen["heavy"]


def test_the_reask_default_in_the_help_is_the_rule(capsys: pytest.CaptureFixture[str]) -> None:
    """The help's text alone: read in this process (what it imports is the tests above)."""
    from evalkit.cli import main
    from evalkit.compare.reask import REASKS

    with pytest.raises(SystemExit) as stop:
        main(["gate", "--help"])
    assert stop.value.code == 0
    assert f"fewer than {REASKS} re-asks" in " ".join(capsys.readouterr().out.split())


def test_the_gate_runner_leaves_out_what_a_local_gate_never_uses() -> None:
    """`evalkit.notebooks` (what ``evalkit gate`` runs) imports papermill without its S3 and HDFS
    handlers' libraries, and no nbconvert (the report page is its own); pyarrow.fs, hidden
    only while papermill imports, works afterwards."""
    code = (
        "import json, sys\nimport evalkit.notebooks as n\n"
        "before = sorted({m.split('.')[0] for m in sys.modules} & "
        "{'boto3', 'botocore', 'pyarrow', 'nbconvert', 'bs4'})\n"
        "import pyarrow.fs\n"
        "print(json.dumps([before, callable(n.pm.execute_notebook), "
        "pyarrow.fs.LocalFileSystem.__name__]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [[], True, "LocalFileSystem"]

"""A plain ``evalkit run`` on the command line ends at ``os._exit`` once the store is closed
and the summary written (the interpreter's shutdown is skipped), with its exit code, its
output, its ``--json`` and a complete, checkpointed store; a run that fails, and a caller of
``main(argv)``, go through the interpreter's shutdown as before."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import duckdb

from evalkit.demo.server import DemoServer

REPO = Path(__file__).resolve().parents[2]

#: ``evalkit`` as the console script runs it (``main()`` reads ``sys.argv``), with an exit
#: handler that says whether the interpreter's shutdown ran.
_COMMAND_LINE = """
import atexit, sys
atexit.register(lambda: print("interpreter shutdown", file=sys.stderr, flush=True))
from evalkit.cli import main
sys.exit(main())
"""


def _project(root: Path, expect: str = "[json_valid]") -> Path:
    (root / "cases").mkdir()
    (root / "cases" / "orders.yaml").write_text(
        "".join(
            f"- id: order-{i}\n"
            f"  input: {{messages: [{{role: user, content: 'Where is order {i}?'}}]}}\n"
            f"  expect: {expect}\n"
            for i in range(5)
        ),
        encoding="utf-8",
    )
    config = root / "evalkit.yaml"
    config.write_text(
        "suite: fixed-cost-exit\n"
        "system: {model: demo-support-1, base_url: 'http://127.0.0.1:9/v1'}\n"
        "cache: false\n",
        encoding="utf-8",
    )
    return config


def _evalkit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _COMMAND_LINE, *args],
        capture_output=True, text=True, cwd=REPO, check=False, timeout=120,
    )  # fmt: skip


def test_a_finished_run_skips_the_shutdown_and_leaves_everything_written(
    tmp_path: Path, demo_server: DemoServer
) -> None:
    config, db, summary = _project(tmp_path), tmp_path / "e.duckdb", tmp_path / "s.json"
    done = _evalkit(
        "run", "--config", str(config), "--db", str(db), "--no-progress", "--json", str(summary),
        "--set", f"system.base_url={demo_server.base_url}",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "interpreter shutdown" not in done.stderr
    assert done.stdout.rstrip().endswith(f"stored in {db} (config {_config(db)[:12]})")
    assert json.loads(summary.read_text())["outputs"] == 5
    assert not db.with_name(db.name + ".wal").exists()  # closed: checkpointed into the file
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT status FROM runs").fetchall() == [("complete",)]
        assert con.execute("SELECT count(*) FROM outputs").fetchone() == (5,)


def test_a_refused_run_and_other_commands_shut_down_as_before(tmp_path: Path) -> None:
    config = _project(tmp_path, expect="[contans]")
    refused = _evalkit("run", "--config", str(config), "--db", str(tmp_path / "e.duckdb"))
    assert refused.returncode == 2
    assert "unknown scorer 'contans'" in refused.stderr
    assert "interpreter shutdown" in refused.stderr
    listed = _evalkit("scorers", "list", "--json")
    assert listed.returncode == 0 and "interpreter shutdown" in listed.stderr


def _config(db: Path) -> str:
    with duckdb.connect(str(db), read_only=True) as con:
        return str(con.execute("SELECT config_hash FROM runs").fetchone()[0])

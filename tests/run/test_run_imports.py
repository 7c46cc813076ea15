"""``evalkit run`` imports only what a run needs: no Polars, pyarrow, numpy, scipy, pandas,
altair or Jupyter on the way from the command line to stored verdicts (Polars alone is about
35 MiB of resident memory and 0.1 s of start-up), no Rich for the summary, none of the other
commands' modules, and no ``openai`` when the lean transport makes the requests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import duckdb

from evalkit.demo.server import DemoServer

REPO = Path(__file__).resolve().parents[2]

#: Modules a plain run must not load; ``openai`` too when the lean transport is used.
HEAVY = (
    "polars", "pyarrow", "numpy", "scipy", "pandas", "altair", "jupyter_client", "nbformat",
    "papermill", "openai", "rich", "evalkit.cli.gate", "evalkit.cli.notebook",
    "evalkit.cli.demo", "evalkit.compare.analysis",
)  # fmt: skip

_RUN_AND_LIST = f"""
import json, sys
from evalkit.cli import main
code = main(sys.argv[1:])
heavy = {HEAVY!r}
print(json.dumps({{"code": code, "loaded": sorted(m for m in heavy if m in sys.modules)}}))
"""


def _project(root: Path, cases: int) -> Path:
    (root / "cases").mkdir()
    (root / "system.md").write_text("Respond only with a JSON object.\n", encoding="utf-8")
    (root / "cases" / "orders.yaml").write_text(
        "".join(
            f"- id: order-{i:03d}\n"
            f"  input: {{messages: [{{role: user, content: 'Where is my order {i}?'}}]}}\n"
            "  expect: [json_valid, {max_words: 200}]\n"
            for i in range(cases)
        ),
        encoding="utf-8",
    )
    config = root / "evalkit.yaml"
    config.write_text(
        "suite: imports\n"
        "system:\n"
        "  model: demo-support-1\n"
        "  base_url: http://127.0.0.1:9/v1\n"
        "  prompt: system.md\n"
        "cache: false\n",
        encoding="utf-8",
    )
    return config


def _run(config: Path, db: Path, server: DemoServer, *extra: str) -> dict[str, object]:
    args = [
        "run", "--config", str(config), "--db", str(db), "--no-progress", "--label", "imports",
        "--set", f"system.base_url={server.base_url}", *extra,
    ]  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", _RUN_AND_LIST, *args],
        capture_output=True, text=True, cwd=REPO, check=False, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_lean_run_stores_every_verdict_without_the_heavy_libraries(
    tmp_path: Path, demo_server: DemoServer
) -> None:
    config, db = _project(tmp_path, 12), tmp_path / "e.duckdb"
    demo_server.reset_stats()
    result = _run(config, db, demo_server, "--set", "system.transport=lean")
    assert result == {"code": 0, "loaded": []}
    assert demo_server.stats()["requests"] == 12
    with duckdb.connect(str(db), read_only=True) as con:
        outputs = con.execute("SELECT count(*) FROM outputs WHERE error IS NULL").fetchone()
        scores = con.execute("SELECT count(*), count(*) FILTER (passed) FROM scores").fetchone()
        tags = con.execute("SELECT count(*) FROM cases WHERE tags = []::VARCHAR[]").fetchone()
    assert outputs == (12,) and scores == (24, 24) and tags == (12,)


def test_the_official_client_is_imported_only_when_it_makes_the_requests(
    tmp_path: Path, demo_server: DemoServer
) -> None:
    config, db = _project(tmp_path, 3), tmp_path / "e.duckdb"
    result = _run(config, db, demo_server, "--set", "system.transport=openai")
    assert result == {"code": 0, "loaded": ["openai"]}


def test_every_module_heavy_names_exists() -> None:
    """HEAVY is kept by hand: a module renamed or split away would never be in sys.modules, and
    the run-path test above would pass without watching anything."""
    import importlib.util

    gone = [name for name in HEAVY if importlib.util.find_spec(name) is None]
    assert gone == [], f"HEAVY names modules that do not exist: {gone}; write their new names"

"""What ``evalkit run`` imports, and which thread imports it: a run of ``json_valid`` and
``max_words`` cases never imports the scorer modules it does not use (nor the case index's
reader, nor the judge's client), and the lean transport's client (aiohttp) is imported by the
prefetch thread while the corpus loads and the run is recorded, not by the first request; the
prefetch asks the server nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from evalkit.corpus.suite import SystemConfig
from evalkit.demo.server import DemoServer
from evalkit.run.providers import prefetch_transport, transport_module

REPO = Path(__file__).resolve().parents[2]

#: Modules a run of these cases must not import: the scorer registry loads a module when a
#: case names one of its scorers (evalkit.scorers.registry.BUILTIN_MODULES), and the regex
#: engine is imported when a ``regex`` or ``forbidden_regex`` scorer is built.
NOT_ON_THE_RUN_PATH = (
    "evalkit.scorers.similarity", "rapidfuzz", "evalkit.scorers.executable",
    "evalkit.scorers.sandbox", "evalkit.scorers.judge", "evalkit.scorers.trajectory",
    "regex",  # the regex engine: imported by the first regex scorer built, not before
    "multiprocessing",  # only a corpus scan in several processes (evalkit.corpus.case_facts)
    # the case index's reader: a sharded or Ray run reads the corpus through it, a plain run
    # loads its cases
    "evalkit.corpus.case_facts", "evalkit.corpus.case_index", "evalkit.corpus.index_trust",
    "evalkit.scorers.judge_client",  # a judged run's judge: built only when a case has one
)  # fmt: skip

#: Runs ``evalkit run`` in this interpreter and reports the modules loaded and which thread
#: first imported ``aiohttp`` (a finder ahead of the others that only looks).
_RUN = f"""
import json, sys, threading
importers = {{}}

class Watch:
    @staticmethod
    def find_spec(name, path=None, target=None):
        importers.setdefault(name, threading.current_thread().name)
        return None

sys.meta_path.insert(0, Watch)
from evalkit.cli import main
code = main(sys.argv[1:])
watched = {NOT_ON_THE_RUN_PATH!r} + ("evalkit.scorers.structured",)
print(json.dumps({{
    "code": code,
    "loaded": sorted(m for m in watched if m in sys.modules),
    "aiohttp_by": importers.get("aiohttp"),
}}))
"""


def _project(root: Path, cases: str) -> Path:
    (root / "cases").mkdir()
    (root / "cases" / "orders.yaml").write_text(cases, encoding="utf-8")
    config = root / "evalkit.yaml"
    config.write_text(
        "suite: fixed-cost-imports\n"
        "system: {model: demo-support-1, base_url: 'http://127.0.0.1:9/v1'}\n"
        "cache: false\n",
        encoding="utf-8",
    )
    return config


def _run(config: Path, db: Path, server: DemoServer) -> tuple[int, dict[str, object], str]:
    args = [
        "run", "--config", str(config), "--db", str(db), "--no-progress",
        "--set", f"system.base_url={server.base_url}",
    ]  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", _RUN, *args],
        capture_output=True, text=True, cwd=REPO, check=False, timeout=120,
    )  # fmt: skip
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "{}"
    report = json.loads(last) if last.startswith("{") else {}
    return done.returncode, report, done.stderr


def test_a_run_imports_only_its_scorers_modules_and_prefetches_its_client(
    tmp_path: Path, demo_server: DemoServer
) -> None:
    cases = "".join(
        f"- id: order-{i}\n"
        f"  input: {{messages: [{{role: user, content: 'Where is order {i}?'}}]}}\n"
        "  expect: [json_valid, {max_words: 200}]\n"
        for i in range(6)
    )
    config = _project(tmp_path, cases)
    demo_server.reset_stats()
    code, report, stderr = _run(config, tmp_path / "e.duckdb", demo_server)
    assert code == 0, stderr
    assert report == {
        "code": 0,
        "loaded": ["evalkit.scorers.structured"],  # the one it scores with, and nothing else
        "aiohttp_by": "evalkit-prefetch",
    }
    assert demo_server.stats()["requests"] == 6


def test_the_prefetch_asks_nothing_when_the_corpus_is_refused(
    tmp_path: Path, demo_server: DemoServer
) -> None:
    config = _project(tmp_path, "- id: bad-1\n  input: {messages: []}\n  expect: [json_valid]\n")
    demo_server.reset_stats()
    code, report, stderr = _run(config, tmp_path / "e.duckdb", demo_server)
    assert code == 0 and report["code"] == 2 and "orders.yaml" in stderr  # refused, one line
    assert demo_server.stats()["requests"] == 0
    assert not (tmp_path / "e.duckdb").exists()  # nothing recorded either


def test_the_prefetched_module_is_the_one_the_transport_imports() -> None:
    loopback = SystemConfig(model="m", base_url="http://127.0.0.1:8000/v1")
    assert transport_module(loopback) == "aiohttp"
    assert transport_module(SystemConfig(model="gpt-4.1-mini")) == "openai"
    python = SystemConfig(provider="python", model="m", function="os:getcwd")
    assert transport_module(python) is None
    assert prefetch_transport(python) is None
    import aiohttp  # noqa: F401  (imported already: nothing to prefetch)

    assert prefetch_transport(loopback) is None


def test_every_module_the_run_path_must_not_import_exists() -> None:
    """NOT_ON_THE_RUN_PATH is kept by hand: a module renamed or split away would never be in
    sys.modules, and the tests above would pass without watching anything."""
    import importlib.util

    gone = [name for name in NOT_ON_THE_RUN_PATH if importlib.util.find_spec(name) is None]
    assert gone == [], (
        f"NOT_ON_THE_RUN_PATH names modules that do not exist: {gone}; write their new names"
    )

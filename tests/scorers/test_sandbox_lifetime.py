"""A sandbox never outlives its run: ``kill -9`` of ``evalkit run`` while python_tests cases
sleep leaves no sandbox process behind within the cases' ``timeout_s`` (the launcher dies with
the run and takes its PID namespace with it), and the next process to start a sandbox removes
the killed run's cgroups and temp dirs. Asserted from outside: the processes by pid, the
cgroup directories and temp dirs by name."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil
import pytest

from evalkit.scorers import sandbox, sandbox_budget

pytestmark = pytest.mark.skipif(
    sandbox.isolation_problem() is not None, reason=f"no isolation: {sandbox.isolation_problem()}"
)

TIMEOUT_S = 20
CASES = 3
SLEEPER = "```python\nimport time\ntime.sleep(300)\ndef add(a, b):\n    return a + b\n```"


class _Model(BaseHTTPRequestHandler):
    """A chat endpoint whose every answer is code that sleeps far past ``timeout_s``."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = json.dumps(
            {"model": "m", "choices": [{"message": {"content": SLEEPER}}], "usage": {}}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def model_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Model)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def _launchers(marker: str) -> list[psutil.Process]:
    """The sandbox launchers (``unshare``) whose arguments name ``marker`` (the run's temp dir)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        line = process.info["cmdline"] or []
        if line and "unshare" in line[0] and any(marker in part for part in line):
            found.append(process)
    return found


def _leftover_cgroups(owner: str) -> list[Path]:
    if sandbox_budget.mechanism() not in (sandbox_budget.CGROUP2, sandbox_budget.CGROUP1):
        return []
    prefix = f"evalkit-sandbox-{owner}-"
    return [d for p in sandbox_budget._parents() for d in p.iterdir() if d.name.startswith(prefix)]


def test_kill_9_of_a_run_leaves_no_sandbox_and_the_next_start_sweeps_its_leftovers(
    tmp_path: Path, model_url: str
) -> None:
    root, scratch = tmp_path / "corpus", tmp_path / "tmp"
    (root / "cases").mkdir(parents=True)
    scratch.mkdir()
    check = "{python_tests: {tests_inline: 'def test_add(): assert add(1, 2) == 3', timeout_s: %d}}"
    (root / "cases" / "code.yaml").write_text(
        "".join(
            f"- id: code-{i}\n  input: {{messages: [{{role: user, content: 'write add {i}'}}]}}\n"
            f"  expect: [{check % TIMEOUT_S}]\n"
            for i in range(CASES)
        )
    )
    (root / "evalkit.yaml").write_text(
        f"suite: lifetime\nsystem: {{model: m, base_url: '{model_url}', max_retries: 0}}\n"
        "cache: false\n"
    )
    env = {**os.environ, "TMPDIR": str(scratch), "OPENAI_API_KEY": "unused"}
    args = ["run", "--config", str(root / "evalkit.yaml"), "--db", str(tmp_path / "e.duckdb")]
    run = subprocess.Popen(
        [sys.executable, "-m", "evalkit.cli", *args, "--no-progress"], env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while len(launchers := _launchers(str(scratch))) < CASES:
            assert run.poll() is None, "the run ended before its sandboxes started"
            assert time.monotonic() < deadline, f"{len(launchers)} sandboxes started"
            time.sleep(0.1)
        sandboxes = {p.pid: p for p in launchers}
        for launcher in launchers:  # the harness in each namespace, and anything it started
            sandboxes |= {c.pid: c for c in launcher.children(recursive=True)}
        owner = sandbox_budget.owner(run.pid)
        assert _leftover_cgroups(owner) or sandbox_budget.mechanism() == sandbox_budget.UID
        run.send_signal(signal.SIGKILL)
        run.wait()
        killed_at = time.monotonic()
        while alive := [p for p in sandboxes.values() if p.is_running()]:
            if time.monotonic() - killed_at > TIMEOUT_S:
                break
            time.sleep(0.1)
        assert alive == [], f"{len(alive)} of {len(sandboxes)} sandbox processes outlived the run"
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    left = sorted(p.name for p in scratch.iterdir())
    assert left and all(name.startswith(("evalkit-sandbox-", "evalkit-io-")) for name in left)

    # The next process to start a sandbox removes what the killed run left.
    subprocess.run(
        [sys.executable, "-c", "from evalkit.scorers import sandbox; sandbox.run_python("
         "'def add(a, b):\\n    return a + b\\n', 'def test_a():\\n    assert add(1, 2) == 3\\n')"],
        env=env, check=True, timeout=60,
    )  # fmt: skip
    assert sorted(p.name for p in scratch.iterdir()) == []
    assert _leftover_cgroups(owner) == []

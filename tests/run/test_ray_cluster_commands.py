"""The README's ``ray start`` commands build a 2-node cluster on one Linux machine, on a
loopback address, and ``evalkit run --engine ray`` with the default (relative) ``--parts``
stores every output on it.

Ray rewrites 127.0.0.1 and ``localhost`` to the machine's network address (and its
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` refuses a second node on Linux), but no other loopback
address: Linux routes all of 127.0.0.0/8 to ``lo``, so 127.0.0.2 keeps both nodes on it.
The commands are the README's with a free port and a temp dir of this test's own (so that
its processes, and only they, are found and stopped by the test; ``ray stop`` would stop
every Ray on the machine).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from distributed_support import demo_args, exactly_once

from evalkit.demo.server import start_demo_server

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="127.0.0.2: Linux")

LOOPBACK = "127.0.0.2"
RAY = str(Path(sys.executable).with_name("ray"))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


def _processes_of(temp_dir: str) -> set[int]:
    """Every process whose command line names ``temp_dir``, and all their descendants."""
    parents: dict[int, int] = {}
    found: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            parents[int(entry.name)] = int((entry / "stat").read_text().split(")")[-1].split()[1])
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            continue
        if temp_dir in cmdline and int(entry.name) != os.getpid():
            found.add(int(entry.name))
    grew = True
    while grew:
        children = {pid for pid, ppid in parents.items() if ppid in found} - found
        found |= children
        grew = bool(children)
    return found


#: How long the cluster's processes get to exit on SIGTERM before SIGKILL: the raylets and
#: workers go within a second; gcs_server and the autoscaler monitor sit out any grace.
TERM_GRACE_S = 2.0


def _stop(temp_dir: str) -> None:
    for sig, grace_s in ((signal.SIGTERM, TERM_GRACE_S), (signal.SIGKILL, 15.0)):
        for pid in _processes_of(temp_dir):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace_s
        while _processes_of(temp_dir) and time.monotonic() < deadline:
            time.sleep(0.2)
    assert not _processes_of(temp_dir), "Ray processes of the test still running"


@pytest.fixture
def loopback_cluster(tmp_path: Path) -> Iterator[str]:
    """The README's two ``ray start`` lines (head, then a second node), run where a user
    would run them; the cluster's address. Ray's socket paths must stay short: a /tmp dir."""
    temp_dir = tempfile.mkdtemp(prefix="ek-ray-", dir="/tmp")
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    started = tmp_path / "nodes"  # where the nodes start: their workers' working directory
    started.mkdir()
    head = [RAY, "start", "--head", f"--node-ip-address={LOOPBACK}", f"--port={port}",
            "--num-cpus=1", "--include-dashboard=false", f"--temp-dir={temp_dir}"]  # fmt: skip
    second = [RAY, "start", f"--address={LOOPBACK}:{port}", f"--node-ip-address={LOOPBACK}",
              "--num-cpus=1"]  # fmt: skip
    try:
        for command in (head, second):
            done = subprocess.run(
                command, cwd=started, env=env, capture_output=True, text=True, timeout=180
            )
            assert done.returncode == 0, done.stdout[-1500:] + done.stderr[-1500:]
        yield f"{LOOPBACK}:{port}"
    finally:
        _stop(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)


def test_the_readme_ray_start_lines_make_two_loopback_nodes_that_run_a_suite(
    loopback_cluster: str, tmp_path: Path
) -> None:
    driver = tmp_path / "project"
    driver.mkdir()
    probe = (
        f"import ray, json; ray.init(address={loopback_cluster!r}, log_to_driver=False); "
        "print(json.dumps([[n['NodeManagerAddress'], n['Alive']] for n in ray.nodes()]))"
    )
    nodes = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert nodes.stdout.strip().splitlines()[-1] == f'[["{LOOPBACK}", true], ["{LOOPBACK}", true]]'
    with start_demo_server(noise=False, in_thread=True) as server:
        run = subprocess.run(
            [sys.executable, "-m", "evalkit.cli", "run", *demo_args(server, "--tier", "smoke"),
             "--engine", "ray", "--address", loopback_cluster, "--chunk-size", "4",
             "--no-progress", "--run-id", "on-loopback"],  # default --parts data/parts, --db
            cwd=driver, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    outputs, distinct, _, _ = exactly_once(driver / "data" / "evalkit.duckdb", "on-loopback")
    assert outputs == distinct == 16
    assert not (tmp_path / "nodes" / "data").exists()  # nothing written where the nodes began


DOCS = Path(__file__).resolve().parents[2] / "docs" / "guides" / "distributed.md"


def _docs_block() -> list[str]:
    """The guide's two-node block, its lines joined where they continue (``\\``)."""
    text = DOCS.read_text(encoding="utf-8")
    block = text.split("## Two nodes on one Linux machine", 1)[1].split("```bash\n", 1)[1]
    block = block.split("```", 1)[0].replace("\\\n", " ")
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()]


def test_the_guide_block_is_what_the_cluster_test_runs() -> None:
    """The two ``ray start`` lines are the fixture's (its port and temp dir aside), the run
    names the endpoint as ``demo_args`` does, and the stop names the cluster's temp dir, never
    a bare ``ray stop`` (which stops every Ray process of the user)."""
    import shlex

    lines = _docs_block()
    starts = [shlex.split(line) for line in lines if line.startswith("ray start")]
    head = "--head --node-ip-address=127.0.0.2 --port=6390 --num-cpus=1 --include-dashboard=false"
    assert starts[0] == ["ray", "start", *head.split(), "--temp-dir=$RAY_TMP"]
    assert starts[1] == ["ray", "start", "--address=127.0.0.2:6390",
                         "--node-ip-address=127.0.0.2", "--num-cpus=1"]  # fmt: skip
    (run,) = [shlex.split(line) for line in lines if line.startswith("evalkit run")]
    for option in ("system.base_url=$EVALKIT_DEMO_URL", "judge.base_url=$EVALKIT_DEMO_URL"):
        assert run[run.index(option) - 1] == "--set"
    assert "--engine" in run and run[run.index("--address") + 1] == "127.0.0.2:6390"
    assert not any(line.startswith("ray stop") for line in lines)
    assert any("$RAY_TMP" in line and "ray start" not in line and "mktemp" not in line
               for line in lines)  # fmt: skip

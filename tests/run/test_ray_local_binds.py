"""What evalkit's own Ray instance binds (issue 46, item 9): ``--engine ray`` without
``--address`` starts Ray on this machine with every listening socket of its processes on
127.0.0.1, no dashboard and so no job API, and leaves no token under ``~/.ray`` (one there
turns on token authentication for every later ``ray start`` of the user, and the README's
second-node ``ray start`` then fails with InvalidAuthToken)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc: Linux")

_DRIVER = r"""
import json, os
from pathlib import Path
from evalkit.run.engines.ray_engine import connect

ray = connect(None)

@ray.remote
def one():
    return 1

assert ray.get(one.remote()) == 1


def family(root):
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, grew = {root}, True
    while grew:
        new = {p for p, pp in parents.items() if pp in found} - found
        found |= new
        grew = bool(new)
    return found


def inodes(pids):
    owned = {}
    for pid in pids:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    owned[target[8:-1]] = pid
        except OSError:
            continue
    return owned


def listening(owned):
    found = []
    for table in ("tcp", "tcp6", "udp", "udp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            cols = line.split()
            state, inode = cols[3], cols[9]
            if inode in owned and (state == "0A" or table.startswith("udp")):
                address, port = cols[1].rsplit(":", 1)
                found.append([table, address, int(port, 16)])
    return found


print(json.dumps(listening(inodes(family(os.getpid())))))
ray.shutdown()
"""

#: 127.0.0.1 as /proc/net/tcp writes it, and as an IPv4-mapped address in /proc/net/tcp6.
_LOOPBACK = {"0100007F", "0000000000000000FFFF00000100007F"}


def test_evalkits_own_ray_binds_only_loopback_runs_no_dashboard_and_writes_no_token(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env |= {"HOME": str(tmp_path), "RAY_USAGE_STATS_ENABLED": "0"}
    done = subprocess.run(
        [sys.executable, "-c", _DRIVER], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    sockets = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(sockets) >= 3  # its own GCS, raylet and workers listen: not another's cluster
    assert [s for s in sockets if s[1] not in _LOOPBACK] == []
    assert 8265 not in {port for _, _, port in sockets}  # the dashboard / job API
    assert not (tmp_path / ".ray" / "auth_token").exists()

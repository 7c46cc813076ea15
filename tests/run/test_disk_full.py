"""A full disk loses nothing answered (issue 46, item 6): ``evalkit run`` with its store on a
small tmpfs (mounted inside a user and mount namespace, ``unshare -rm``) that fills up mid-run
stops with one line naming the store and the cause, exits non-zero, keeps what it stored, and
``--resume`` finishes the run asking again no more than the documented loss bound."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from evalkit.run.runner import RunOptions

REPLAYS = 300
CONCURRENCY = 8  # the init project's

_SCRIPT = r"""
set -u
[ -n "${INJECT:-}" ] || mount -t tmpfs -o size=48m tmpfs "$MNT" || exit 97
cd "$PROJ"
"$PY" -m evalkit.cli run --label full --replays $REPLAYS --no-progress --db "$MNT/s.duckdb" \
    --set "system.base_url=$URL" > "$OUT/run1.out" 2> "$OUT/run1.err" &
pid=$!
# fill the disk once a third of the run is answered (a batch is written every 0.5 s)
for i in $(seq 1 600); do
    asked=$("$PY" -c "$ASKED")
    [ "$asked" -ge $((REPLAYS * 4 / 3)) ] && sleep 1 && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
done
if [ -n "${INJECT:-}" ]; then touch "$MNT/full"
else dd if=/dev/zero of="$MNT/filler" bs=64k 2>/dev/null; fi
wait $pid; echo $? > "$OUT/run1.rc"
"$PY" -c "$COUNT" "$MNT/s.duckdb" > "$OUT/kept.json"
rm -f "$MNT/filler" "$MNT/full"
"$PY" -m evalkit.cli run --resume full --replays $REPLAYS --no-progress --db "$MNT/s.duckdb" \
    --set "system.base_url=$URL" > "$OUT/run2.out" 2> "$OUT/run2.err"
echo $? > "$OUT/run2.rc"
"$PY" -c "$COUNT" "$MNT/s.duckdb" > "$OUT/final.json"
"""

_COUNT = (
    "import duckdb, json, sys; c = duckdb.connect(sys.argv[1], read_only=True); "
    "print(json.dumps({'outputs': c.execute('SELECT count(*) FROM outputs').fetchone()[0], "
    "'status': c.execute('SELECT status FROM runs').fetchone()[0]}))"
)


#: The fallback where no mount namespace can be made: every commit refused the way DuckDB
#: refuses one on a full disk, at the store's write seam, while ``$MNT/full`` exists.
_INJECT = """
import os
from pathlib import Path

import duckdb

from evalkit.store import transaction

_full = Path(os.environ["MNT"]) / "full"
_exit = transaction.Transaction.__exit__


def _refused(self, exc_type, exc, tb):
    if exc is None and _full.exists():
        exc = duckdb.TransactionException(
            f'TransactionContext Error: Failed to commit: Could not write file "{self._path}'
            '.wal": No space left on device'
        )
        exc_type = type(exc)
    return _exit(self, exc_type, exc, tb)


transaction.Transaction.__exit__ = _refused
"""


def _namespaces_work(tmp_path: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = tmp_path / "probe"
    probe.mkdir()
    done = subprocess.run(
        ["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=1m tmpfs {probe}"],
        capture_output=True, timeout=30,
    )  # fmt: skip
    return done.returncode == 0


@pytest.fixture
def project(project_factory) -> Path:
    return project_factory().root


def test_a_disk_that_fills_mid_run_keeps_what_was_stored_and_the_run_resumes(
    project: Path, tmp_path: Path, demo_server_factory
) -> None:
    server = demo_server_factory(noise=False, latency_ms=20)
    mnt, out = tmp_path / "mnt", tmp_path / "out"
    mnt.mkdir()
    out.mkdir()
    env = {
        "MNT": str(mnt), "OUT": str(out), "PROJ": str(project), "PY": sys.executable,
        "URL": server.base_url, "REPLAYS": str(REPLAYS), "COUNT": _COUNT,
        "ASKED": f"import json, urllib.request; print(json.load(urllib.request.urlopen("
                 f"'{server.base_url.removesuffix('/v1')}/stats'))['requests'])",
        "PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "TMPDIR": str(tmp_path),
    }  # fmt: skip
    command = ["unshare", "-rm", "sh", "-c", _SCRIPT]
    # the fallback, where no namespace can be made: ENOSPC injected at the write seam
    if not _namespaces_work(tmp_path) or os.environ.get("EVALKIT_TEST_INJECT_ENOSPC"):
        (tmp_path / "inject").mkdir()
        (tmp_path / "inject" / "sitecustomize.py").write_text(_INJECT)
        env |= {"INJECT": "1", "PYTHONPATH": str(tmp_path / "inject")}
        command = ["sh", "-c", _SCRIPT]
    server.reset_stats()
    done = subprocess.run(command, env=env, timeout=600)
    assert done.returncode == 0
    err = (out / "run1.err").read_text()
    errors = [line for line in err.splitlines() if line.startswith("evalkit: error:")]
    assert int((out / "run1.rc").read_text()) != 0
    assert len(errors) == 1, err
    assert f"{mnt}/s.duckdb" in errors[0] and "disk full (No space left on device)" in errors[0]
    assert "evalkit run --resume" in errors[0]
    assert "Traceback" not in err and "Unclosed" not in err, err
    kept = json.loads((out / "kept.json").read_text())
    assert kept["outputs"] > 0  # batches committed before the disk filled are still there
    outputs = int(err.split(") started: ")[1].split()[0])  # "run ID (full) started: N outputs"
    assert kept["outputs"] < outputs
    # the resume finishes the run and asks again at most the documented loss bound
    assert int((out / "run2.rc").read_text()) == 0, (out / "run2.err").read_text()
    assert "Unclosed" not in (out / "run2.err").read_text()
    final = json.loads((out / "final.json").read_text())
    assert final == {"outputs": outputs, "status": "complete"}
    asked = int(server.stats()["requests"])
    reasked = asked - outputs
    bound = RunOptions().flush_rows + 2 * CONCURRENCY
    assert 0 <= reasked <= bound

"""Ray is optional: ``import evalkit``, the CLI, sharding, parts and the merge never import it;
``--engine ray`` without it says how to install it, in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

_NO_RAY = """
import sys
import evalkit, evalkit.cli
from evalkit.cli import _parser
_parser().parse_args(["run", "--engine", "ray", "--shard", "1/2"])
import evalkit.run.sharded, evalkit.run.merging, evalkit.run.engines, evalkit.run.engines.budget
import evalkit.store.merge, evalkit.store.parts, evalkit.run.replicas, evalkit.cli.runs
import evalkit.run.engines.ray_engine, evalkit.cli.shard
loaded = sorted(m for m in sys.modules if m == "ray" or m.startswith("ray."))
assert not loaded, loaded
print("ok")
"""

_BLOCKED = """
import sys

class NoRay:
    def find_spec(self, name, path=None, target=None):
        if name == "ray" or name.startswith("ray."):
            raise ImportError("No module named 'ray'")
        return None

sys.meta_path.insert(0, NoRay())
from evalkit.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_nothing_but_the_ray_engine_imports_ray() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _NO_RAY], capture_output=True, text=True, cwd=REPO, check=False
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_the_ray_engine_without_ray_says_how_to_install_it(tmp_path: Path) -> None:
    config = str(REPO / "corpus" / "evalkit.yaml")
    db = str(tmp_path / "x.duckdb")
    args = ["run", "--config", config, "--tier", "smoke", "--engine", "ray", "--db", db]
    done = subprocess.run(
        [sys.executable, "-c", _BLOCKED, *args], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "evalkit: error: --engine ray needs Ray: install the optional extra with "
        "pip install 'evalkit-gate[ray]'"
    )

"""mypy as `make lint` and CI run it: pyproject.toml's [tool.mypy] on small files placed where
the package's modules are, so the per-module settings apply to them as they do to the package."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

UNTYPED = "def half(x):\n    return x / 2\n"
WRONG = "def half(x: int) -> str:\n    return x / 2\n"


def _mypy(tmp_path: Path, files: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """mypy with the project's config on ``files`` (paths under a scratch ``evalkit/``)."""
    if shutil.which("mypy", path=str(Path(sys.executable).parent)) is None:
        pytest.fail("mypy is not installed: it is in the test extra (make install)")
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        for folder in [path.parent, *path.parent.parents]:
            if folder == tmp_path:
                break
            (folder / "__init__.py").touch()
        path.write_text(text)
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
         "--cache-dir", str(tmp_path / ".mypy_cache"), "--no-incremental", *files],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def _flagged(result: subprocess.CompletedProcess[str]) -> set[str]:
    return set(re.findall(r"^(evalkit/\S+\.py):\d+: error", result.stdout, re.MULTILINE))


def test_strict_on_stats_and_compare_defaults_elsewhere(tmp_path: Path) -> None:
    # An untyped function is an error only under strict: in stats/ and compare/, not in
    # corpus/ (a `strict = true` in an override would turn it on everywhere: mypy#11401).
    files = {
        "evalkit/stats/probe.py": UNTYPED,
        "evalkit/compare/probe.py": UNTYPED,
        "evalkit/corpus/probe.py": UNTYPED,
    }
    result = _mypy(tmp_path, files)
    assert result.returncode == 1, result.stdout + result.stderr
    assert _flagged(result) == {"evalkit/stats/probe.py", "evalkit/compare/probe.py"}
    assert "[no-untyped-def]" in result.stdout


def test_a_type_error_fails_under_defaults(tmp_path: Path) -> None:
    result = _mypy(tmp_path, {"evalkit/corpus/probe.py": WRONG})
    assert result.returncode == 1, result.stdout + result.stderr
    assert _flagged(result) == {"evalkit/corpus/probe.py"}
    assert "[return-value]" in result.stdout


def test_lint_runs_mypy_and_ci_runs_lint() -> None:
    makefile = (ROOT / "Makefile").read_text()
    lint = re.search(r"^lint:.*?(?=^\S)", makefile, re.MULTILINE | re.DOTALL)
    typecheck = re.search(r"^typecheck:.*?(?=^\S|\Z)", makefile, re.MULTILINE | re.DOTALL)
    assert lint is not None and "$(MAKE) typecheck" in lint.group(0)
    assert typecheck is not None and "$(BIN)/mypy" in typecheck.group(0)
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^make lint$", ci, re.MULTILINE), "CI must run make lint (mypy)"

"""The repository is self-contained: nothing a test, notebook or benchmark reads lives beside it.

Two checks. A grep over every tracked test, notebook, benchmark and build file for paths that
leave the repository (the workplace's sibling data folder, its environment variable, absolute
workplace paths). And a
clone of this repository into a temporary directory with no sibling folders, where the tests
that read shipped data run against the clone's own code and files (``.ci/run`` runs the whole
suite the same way).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: Paths that point outside the repository. ``../x`` inside a notebook parameter such as
#: ``../corpus`` is fine (notebooks run from notebooks/); climbing out of the repo is not.
# Assembled from pieces, so this file holds none of the paths it looks for.
_SIBLING, _WORKPLACE = "".join(("sh", "ared")), "".join(("/wo", "rk/"))
_ENV = "EVALKIT_" + _SIBLING.upper() + "_DATA"
OUTSIDE = re.compile(
    rf"""\.\./+{_SIBLING}|{_SIBLING}[\\/]+data|{_ENV}|{_WORKPLACE}|["']{_SIBLING}["']\s*/|"""
    rf"""\.parent\s*/\s*["']{_SIBLING}"""
)
CHECKED = ("tests/", "notebooks/", "bench/", "evalkit/", "Makefile", ".ci/", "pyproject.toml")


def _tracked() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    files = [REPO / f for f in out.split("\0") if f.startswith(CHECKED)]
    return [f for f in files if f.is_file() and f.suffix not in (".png", ".duckdb")]


def _offending(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8", errors="replace")
    return [
        f"{path.relative_to(REPO)}:{n}: {line.strip()[:120]}"
        for n, line in enumerate(text.splitlines(), 1)
        if OUTSIDE.search(line)
    ]


def test_no_test_notebook_or_bench_refers_outside_the_repository() -> None:
    files = [f for f in _tracked() if f != Path(__file__).resolve()]
    assert len(files) > 50 and any(f.suffix == ".ipynb" for f in files)
    bad = [hit for f in files for hit in _offending(f)]
    assert not bad, "these lines read outside the repository:\n" + "\n".join(bad)


@pytest.mark.parametrize(
    ("line", "caught"),
    [
        (f'root = REPO.parent / "{_SIBLING}" / "data"', True),
        (f"path = '../{_SIBLING}/data/judge_agreement/llmbar'", True),
        (f'os.environ.get("{_ENV}")', True),
        (f'LLMBAR_DIR = "{_WORKPLACE}{_SIBLING}/data"', True),
        ('CORPUS_ROOT = "../corpus"', False),
        (f'db = tmp_path / "{_SIBLING}.duckdb"', False),
        ("{json_schema: ../../../../etc/passwd}", False),  # a hostile-input fixture, not a read
    ],
)
def test_the_grep_catches_what_it_should(line: str, caught: bool) -> None:
    assert bool(OUTSIDE.search(line)) is caught


# The tests that read the shipped data sets (and the notebook that does), run in the clone.
IN_CLONE = [
    "tests/judges/test_published.py",
    "tests/judges/test_agreement.py::test_notebook_runs_and_reproduces",
    "tests/test_self_contained.py::test_no_test_notebook_or_bench_refers_outside_the_repository",
]


def test_a_fresh_clone_with_no_siblings_passes_the_data_tests(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Clone the committed HEAD into an empty temporary directory and run the tests that read
    data there, importing the clone's evalkit (PYTHONPATH first, ahead of the editable install)."""
    parent = tmp_path_factory.mktemp("fresh")
    clone = parent / "evalkit"
    subprocess.run(
        ["git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(clone)],
        check=True,
        capture_output=True,
    )
    assert [p.name for p in parent.iterdir()] == ["evalkit"]  # nothing beside it
    assert (clone / "data" / "llmbar" / "items.jsonl").is_file(), "data/llmbar is not committed"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVALKIT_", "PYTEST_"))}
    env["PYTHONPATH"] = str(clone)
    where = subprocess.run(
        [sys.executable, "-c", "import evalkit; print(evalkit.__file__)"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(where.stdout.strip()).is_relative_to(clone), where.stdout
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *IN_CLONE],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=480,
    )
    tail = result.stdout[-3000:] + result.stderr[-2000:]
    assert result.returncode == 0, tail
    assert " passed" in tail and "skipped" not in tail and "error" not in tail.lower(), tail

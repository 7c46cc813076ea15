"""tests/conftest.py's ``SLOWEST_FILES`` is a hand-kept list of test files (the ones ``make
test`` hands to its workers first); a file moved or renamed would silently fall back to
collection order. This names any entry that no longer exists, and the fix."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def listed_files(conftest: Path = REPO / "tests" / "conftest.py") -> list[str]:
    """The paths of ``SLOWEST_FILES`` as the conftest's source writes them."""
    for node in ast.parse(conftest.read_text()).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "SLOWEST_FILES":
            return [ast.literal_eval(item) for item in node.value.elts]  # type: ignore[attr-defined]
    raise AssertionError(f"{conftest}: no SLOWEST_FILES")


def missing_files(root: Path = REPO, conftest: Path = REPO / "tests" / "conftest.py") -> list[str]:
    return [
        f"tests/conftest.py SLOWEST_FILES lists {path}, which does not exist: write the path the "
        "file moved to, or drop the entry"
        for path in listed_files(conftest)
        if not (root / path).is_file()
    ]


def test_every_file_the_slowest_first_order_names_exists() -> None:
    assert listed_files()  # the list is read, not empty
    assert missing_files() == []


def test_a_moved_file_is_named(tmp_path: Path) -> None:
    conftest = tmp_path / "conftest.py"
    conftest.write_text('SLOWEST_FILES = ("tests/gone/test_moved.py", "tests/test_here.py")\n')
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_here.py").write_text("")
    found = missing_files(tmp_path, conftest)
    assert len(found) == 1 and "tests/gone/test_moved.py" in found[0]

"""What a user copies uses only the public API: no shipped notebook, README block or docs page
imports from ``evalkit.<subpackage>``, and every ``evalkit.NAME`` they call is in
``evalkit.__all__`` (pinned by tests/test_public_api.py), so a refactor of the stages never
breaks a copied cell."""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

import nbformat
import pytest

import evalkit

REPO = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^( *)```(?:python|py)\n(.*?)^\1```$", re.S | re.M)


def notebook_sources() -> list[tuple[str, str]]:
    """(where, code) of every code cell of every shipped notebook."""
    out = []
    for path in sorted((REPO / "notebooks").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        for i, cell in enumerate(nb.cells):
            if cell.cell_type == "code":
                out.append((f"{path.name} cell {i}", cell.source))
    return out


def markdown_sources() -> list[tuple[str, str]]:
    """(where, code) of every Python block of the README and of docs/**/*.md."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    out = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            line = text[: m.start()].count("\n") + 1
            out.append((f"{page.relative_to(REPO)}:{line}", textwrap.dedent(m[2])))
    return out


#: Public namespaces (``evalkit.stats``): their own ``__all__`` names are public too.
PUBLIC_MODULES = {"evalkit.stats": set(evalkit.stats.__all__)}


def private_uses(code: str) -> list[str]:
    """Imports of ``evalkit.<anything>`` and ``evalkit.NAME`` uses not in ``__all__``
    (``evalkit.stats`` and the names of its ``__all__`` are public).

    Examples:
        >>> private_uses("from evalkit.compare import charts")
        ['from evalkit.compare import charts']
        >>> private_uses("import evalkit\\nevalkit.Project('.')")
        []
        >>> private_uses("from evalkit.stats import mcnemar_exact, _bootstrap")
        ['from evalkit.stats import _bootstrap']
    """
    tree = ast.parse(code)
    found = []
    for node in ast.walk(tree):
        public = PUBLIC_MODULES.get(node.module or "") if isinstance(node, ast.ImportFrom) else None
        if public is not None:
            hidden = [a.name for a in node.names if a.name not in public]
            found += [f"from {node.module} import {name}" for name in hidden]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("evalkit."):
            names = ", ".join(a.name for a in node.names)
            found.append(f"from {node.module} import {names}")
        elif isinstance(node, ast.ImportFrom) and node.module == "evalkit":
            found += [f"evalkit.{a.name}" for a in node.names if a.name not in evalkit.__all__]
        elif isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if a.name.startswith("evalkit.")]
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "evalkit"
            and node.attr not in evalkit.__all__
        ):
            found.append(f"evalkit.{node.attr}")
    return found


@pytest.mark.parametrize(
    "where,code", notebook_sources() + markdown_sources(), ids=lambda v: str(v)[:60]
)
def test_only_public_names(where: str, code: str) -> None:
    assert private_uses(code) == [], where


def test_the_check_sees_every_way_in() -> None:
    code = (
        "import evalkit.report.charts\nfrom evalkit.store import open_store\n"
        "from evalkit import _EXPORTS\nimport evalkit\nevalkit.notebooks.execute_gate()\n"
    )
    assert sorted(private_uses(code)) == [
        "evalkit._EXPORTS",
        "evalkit.notebooks",
        "from evalkit.store import open_store",
        "import evalkit.report.charts",
    ]


def test_there_is_something_to_check() -> None:
    assert len(notebook_sources()) > 40  # seven notebooks' code cells
    assert sum("import evalkit" in code for _, code in notebook_sources()) >= 7
    assert any("README.md" in where for where, _ in markdown_sources())

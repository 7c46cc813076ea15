"""The package's shape: no import circles, and each stage imports only the stages below it.

The import graph is built from the source with ``ast`` (every ``import`` counts: top-level,
inside functions and under ``TYPE_CHECKING``), so a lazy import cannot hide a circle.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "evalkit"

#: The stages, bottom first. A module may import its own stage and any stage below it.
LAYERS: tuple[tuple[str, ...], ...] = (
    (
        "version",
        "errors",
        "redact",
        "records",
        "run_manifest",
        "replay_rules",
        "provenance",
        "fixtures",
        "retries",
        "stats",
        "display",
        "renderers",
        "kernel",
    ),
    ("store",),
    ("scorers",),
    ("corpus",),
    ("run",),
    ("judges",),
    ("compare",),
    ("trends",),
    ("report",),
    ("notebooks",),
    ("project",),
    ("demo",),
    ("cli",),
)
#: The store is the ground floor of the data: nothing of analysis, judges or reports above it.
STORE_MAY_IMPORT = {
    "version",
    "errors",
    "redact",
    "records",
    "run_manifest",
    "replay_rules",
    "provenance",
    "store",
}


def module_names(root: Path = PACKAGE) -> dict[str, Path]:
    """``evalkit.a.b`` -> its file, for every module and package under ``root``."""
    names = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def _imported(tree: ast.AST, module: str, is_package: bool) -> Iterator[tuple[str, str | None]]:
    """(module, name or None) for each import statement, relative imports resolved."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".") if is_package else module.split(".")[:-1]
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                yield base, alias.name


def _parse(path: Path, source: str) -> ast.Module:
    """``ast.parse`` of ``source`` (``path``'s text), again if CPython 3.11 mixed up its recursion
    count.

    3.11's AST builder keeps one count in module state and resets it at every parse, so a
    parse nested inside another corrupts the outer one's: a garbage collection during the
    build can finalize an object an earlier test leaked (seen once: an event loop whose
    ``__del__`` raised), pytest's unraisable-exception hook formats that traceback, and 3.11's
    traceback module parses the failing line to place its carets. The outer parse then fails
    with "AST constructor recursion depth mismatch" (cpython gh-106905); the file is fine.
    """
    try:
        return ast.parse(source, filename=str(path))
    except SystemError as exc:
        if "recursion depth mismatch" not in str(exc):
            raise
        return ast.parse(source, filename=str(path))


#: (source, module) -> its imports. The tests here build the graph several times, of the
#: package or of a copy with one line added; parsing every file each time was most of the
#: file's CPU, so each distinct source is parsed once.
_IMPORTS: dict[tuple[str, str], tuple[tuple[str, str | None], ...]] = {}


def _imports_of(path: Path, module: str) -> tuple[tuple[str, str | None], ...]:
    """`_imported` of the file at ``path``, parsed once per distinct source text."""
    source = path.read_text()
    key = (source, module)
    if key not in _IMPORTS:
        tree = _parse(path, source)
        _IMPORTS[key] = tuple(_imported(tree, module, path.name == "__init__.py"))
    return _IMPORTS[key]


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Edges from each evalkit module to the evalkit modules it imports.

    ``from a.b import c`` is an edge to ``a.b.c`` when that is a module, else to ``a.b``.
    Importing a module of another subpackage also runs that subpackage's ``__init__``, so that
    is an edge too. The root ``evalkit/__init__`` (the lazy public facade) is left out as a
    target: every import passes through it, and it imports nothing at load time.
    """
    names = module_names(root)
    graph: dict[str, set[str]] = {}
    for module, path in names.items():
        targets: set[str] = set()
        for base, name in _imports_of(path, module):
            if not base.startswith("evalkit"):
                continue
            target = f"{base}.{name}" if name and f"{base}.{name}" in names else base
            while target not in names:
                target = target.rpartition(".")[0]
            targets.add(target)
            parts = target.split(".")
            for depth in range(2, len(parts)):
                package = ".".join(parts[:depth])
                if not module.startswith(package + ".") and module != package:
                    targets.add(package)
        targets.discard(module)
        targets.discard("evalkit")
        graph[module] = targets
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's strongly connected components of ``graph``."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def stage(module: str) -> str:
    """``evalkit.compare.gate`` -> ``compare``; ``evalkit`` itself -> ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def rank(module: str) -> int:
    for position, members in enumerate(LAYERS):
        if stage(module) in members:
            return position
    raise AssertionError(f"{module} belongs to no stage in LAYERS: add it where it belongs")


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    return [sorted(c) for c in strongly_connected(graph) if len(c) > 1]


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for module, targets in sorted(graph.items()):
        if module == "evalkit":
            continue
        for target in sorted(targets):
            if rank(target) > rank(module):
                bad.append(f"{module} -> {target}")
    return bad


def store_imports(graph: dict[str, set[str]]) -> list[str]:
    return [
        f"{module} -> {target}"
        for module, targets in sorted(graph.items())
        if stage(module) == "store"
        for target in sorted(targets)
        if stage(target) not in STORE_MAY_IMPORT
    ]


def presentation_imports(graph: dict[str, set[str]]) -> list[str]:
    """Imports of presentation (`evalkit.report`) from the decision (`evalkit.compare`): the
    decision must read the same whether or not anything draws it."""
    return [
        f"{module} -> {target}"
        for module, targets in sorted(graph.items())
        if stage(module) == "compare"
        for target in sorted(targets)
        if stage(target) == "report"
    ]


def test_no_import_circles() -> None:
    assert circles(import_graph()) == []


def test_each_stage_imports_only_stages_below_it() -> None:
    assert upward_imports(import_graph()) == []


def test_store_imports_nothing_above_it() -> None:
    assert store_imports(import_graph()) == []


def test_the_decision_never_imports_its_presentation() -> None:
    assert presentation_imports(import_graph()) == []


def test_every_module_belongs_to_a_stage() -> None:
    for module in import_graph():
        if module != "evalkit":
            rank(module)


# The checks themselves must be able to fail: a throwaway copy of the package with one
# back-import added has to trip each of them.


def _copy_with(tmp_path: Path, relative: str, line: str) -> Path:
    import shutil

    root = tmp_path / "evalkit"
    shutil.copytree(PACKAGE, root, ignore=shutil.ignore_patterns("__pycache__"))
    target = root / relative
    target.write_text(target.read_text() + f"\n{line}\n")
    return root


def test_a_back_import_makes_a_circle(tmp_path: Path) -> None:
    root = _copy_with(tmp_path, "scorers/registry.py", "from evalkit.scorers import judge")
    found = circles(import_graph(root))
    assert any("evalkit.scorers.registry" in c for c in found)


def test_a_lazy_back_import_still_counts(tmp_path: Path) -> None:
    root = _copy_with(
        tmp_path,
        "corpus/cases.py",
        "def _late():\n    from evalkit.run.runner import run_suite  # noqa: F401",
    )
    assert "evalkit.corpus.cases -> evalkit.run.runner" in upward_imports(import_graph(root))


@pytest.mark.parametrize(
    "line",
    [
        "from evalkit.compare.verdicts import verdicts",
        "from evalkit.judges.calibration import Calibration",
        "from evalkit.report import build",
    ],
)
def test_the_store_importing_analysis_judges_or_reports_is_caught(
    tmp_path: Path, line: str
) -> None:
    root = _copy_with(tmp_path, "store/db.py", f"if False:\n    {line}")
    assert store_imports(import_graph(root)) != []


def test_the_decision_importing_presentation_is_caught(tmp_path: Path) -> None:
    root = _copy_with(
        tmp_path, "compare/gate.py", "def _late():\n    from evalkit.report import tables  # noqa"
    )
    assert "evalkit.compare.gate -> evalkit.report.tables" in presentation_imports(
        import_graph(root)
    )


# -- module size: a module over MAX_MODULE_LINES says why it stays one module ----------------

MAX_MODULE_LINES = 600
#: The docstring line a longer module carries: ``Over 600 lines: <why it is one module>``.
_SIZE_REASON = re.compile(rf"^Over {MAX_MODULE_LINES} lines: *(?P<reason>.*)$", re.MULTILINE)
#: A reason that points at a split to come is a to-do, not a reason.
_TODO = re.compile(r"\bissue \d+|\bTODO\b|seam to split|\buntil\b", re.IGNORECASE)


def oversized_modules(root: Path = PACKAGE, limit: int = MAX_MODULE_LINES) -> list[str]:
    """``path: n lines, ...`` for each module under ``root`` longer than ``limit`` lines whose
    docstring has no ``Over 600 lines: <reason>`` line (or only a to-do there)."""
    bad = []
    for path in sorted(module_names(root).values()):
        source = path.read_text()
        lines = len(source.splitlines())
        if lines <= limit:
            continue
        found = _SIZE_REASON.search(ast.get_docstring(_parse(path, source)) or "")
        reason = found["reason"].strip() if found else ""
        if len(reason.split()) >= 3 and not _TODO.search(reason):
            continue
        problem = f"its reason {reason!r} is a to-do" if reason else "its docstring gives no reason"
        bad.append(
            f"{path.relative_to(root.parent)}: {lines} lines and {problem}; split it along its "
            f"seams, or add a docstring line 'Over {limit} lines: <why it stays one module>'"
        )
    return bad


def test_a_module_over_600_lines_says_why() -> None:
    assert oversized_modules() == []


@pytest.mark.parametrize(
    ("docstring", "caught"),
    [
        ("A long module.", True),
        (f"A long module.\n\nOver {MAX_MODULE_LINES} lines: (issue 47)", True),
        (
            f"A long module.\n\nOver {MAX_MODULE_LINES} lines: one until the move, a seam to split",
            True,
        ),
        (
            f"A long module.\n\nOver {MAX_MODULE_LINES} lines: one parser's states share a table",
            False,
        ),
    ],
)
def test_the_size_rule_catches_a_long_module_without_a_reason(
    tmp_path: Path, docstring: str, caught: bool
) -> None:
    root = tmp_path / "evalkit"
    root.mkdir()
    (root / "__init__.py").write_text("")
    body = "".join(f"x{i} = {i}\n" for i in range(MAX_MODULE_LINES))
    (root / "short.py").write_text(body)  # exactly at the limit: fine without a reason
    (root / "long.py").write_text(f'"""{docstring}"""\n' + body)
    found = oversized_modules(root)
    assert [line.split(":")[0] for line in found] == (["evalkit/long.py"] if caught else [])


# -- CONTRIBUTING.md draws LAYERS by hand -----------------------------------------------------


def drawn_layers(text: str) -> tuple[tuple[str, ...], ...]:
    """The stages as the ``text`` block under "The layering rule" draws them: the ground floor
    on its first line, then ``→ stage → stage ...``."""
    section = text.split("## The layering rule", 1)[1]
    block = section.split("```text\n", 1)[1].split("```", 1)[0]
    ground, chain = block.strip().split("\n", 1)
    floor = tuple(ground.split("(ground floor)")[0].split())
    return (floor, *((stage.strip(),) for stage in chain.split("→") if stage.strip()))


def test_contributing_draws_the_layers_the_test_enforces() -> None:
    drawn = drawn_layers((PACKAGE.parent / "CONTRIBUTING.md").read_text())
    assert drawn == LAYERS, (
        "CONTRIBUTING.md's layering picture differs from LAYERS in tests/test_architecture.py: "
        "redraw it from LAYERS (the ground floor on the first line, then → each stage)"
    )


def test_a_stage_missing_from_the_drawing_is_caught() -> None:
    text = (
        "## The layering rule\n\n```text\nversion errors   (ground floor)\n  → store → cli\n```\n"
    )
    assert drawn_layers(text) == (("version", "errors"), ("store",), ("cli",)) != LAYERS

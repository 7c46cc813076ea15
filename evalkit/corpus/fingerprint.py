"""The code fingerprint of the system under test: what the cache key and the manifest carry.

For ``provider: python`` evalkit hashes the source file of the function's module and its
*import closure*: every module it imports, transitively, that lives in the project (under the
corpus root, or under the directory the function's top-level package is imported from), found
statically: imports are read with :mod:`ast` (``import x``, ``from x import y``, relative
imports, at any depth of the file) and resolved to files with importlib's path finders, so no
user module is imported or run to fingerprint it. The standard library and installed packages
(site-packages, a virtualenv) are left out: their versions are in the manifest's client
versions. Globs in ``system.code_paths`` widen that to what imports do not reach (prompts the
code reads, a local index, a module imported by name at run time). Paths are recorded relative
to the corpus root, so two checkouts of the same code produce the same fingerprint. A system
evalkit cannot hash (a deployed service) states its version instead (``system.version``).

Examples:
    >>> code_fingerprint(None, [], Path("."))
    {}
"""

from __future__ import annotations

import ast
import functools
import glob
import hashlib
import importlib.machinery
import importlib.util
import os
import sys
import sysconfig
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from evalkit.errors import ConfigError

#: Never part of a fingerprint: byte code changes on every import, not with the source.
_IGNORED_PARTS = frozenset({"__pycache__", ".git", ".venv", "node_modules"})
_IGNORED_SUFFIXES = (".pyc", ".pyo")
#: Installed code, never followed by the import closure (its version is recorded elsewhere).
_INSTALLED_PARTS = frozenset({"site-packages", "dist-packages", ".venv", ".tox", ".nox"})


def code_fingerprint(function: str | None, code_paths: Sequence[str], root: Path) -> dict[str, str]:
    """``{path relative to root: sha256}`` of the function's module, the project modules it
    imports (transitively, see :func:`import_closure`) and every ``code_paths`` file.

    Raises:
        ConfigError: the function's module cannot be located, or a glob matches no file.
    """
    files: set[Path] = set()
    if function:
        files.update(import_closure(function, root))
    for pattern in code_paths:
        matched = [
            Path(root, name).resolve()
            for name in glob.glob(pattern, root_dir=root, recursive=True)
            if Path(root, name).is_file() and _kept(Path(name))
        ]
        if not matched:
            raise ConfigError(
                f"system.code_paths {pattern!r} matches no file under {root} "
                "(globs are relative to the suite config's directory)"
            )
        files.update(matched)
    return {
        Path(os.path.relpath(path, root)).as_posix(): _file_sha256(path) for path in sorted(files)
    }


def import_closure(function: str, root: Path) -> list[Path]:
    """The files that run when ``package.module`` of ``package.module:function`` is imported
    and that belong to the project: the module, its parent packages' ``__init__.py`` and every
    module they import, transitively, that resolves to a file under ``root`` or under the
    directory the module's top-level package is found in (never site-packages or the standard
    library). Sorted; nothing is imported.

    An import that cannot be resolved (a module missing, one created at run time, a name only
    an import hook knows) is skipped: list such files in ``system.code_paths``.

    Raises:
        ConfigError: the function's module cannot be located.
    """
    module_name = function.partition(":")[0]
    _importable_cwd()
    finder = _Finder()
    chain = finder.chain(module_name, own=True)
    if chain is None or chain[-1].path is None:
        return [module_file(function)]  # found by an import hook, or not at all: as before
    own, own_path = chain[-1], chain[-1].path
    # the sys.path directory the top-level package is found in: the project's own code
    base = own_path.parents[module_name.count(".") + (1 if own.is_package else 0)]
    roots = [root.resolve()] + ([] if _installed(base) else [base])
    files: set[Path] = set()
    seen: set[str] = set()
    pending = list(chain)
    while pending:
        module = pending.pop()
        if module.name in seen:
            continue
        seen.add(module.name)
        if module.path is None:  # a namespace package: no file of its own
            continue
        if module.name != own.name and not _in_project(module.path, roots):
            continue
        files.add(module.path)
        if module.path.suffix != ".py":
            continue
        for name in _imported_names(module):
            pending.extend(m for m in finder.chain(name) or () if m.name not in seen)
    return sorted(files)


def module_file(function: str) -> Path:
    """The source file of ``package.module`` in ``package.module:function``, found as ``import``
    would find it (the current directory is importable, as for the python provider), without
    running the module or, when the path finders locate it, its parent packages.

    Raises:
        ConfigError: no module of that name, or no source file to fingerprint.
    """
    module_name = function.partition(":")[0]
    _importable_cwd()
    chain = _Finder().chain(module_name, own=True)
    if chain is not None and chain[-1].path is not None:
        return chain[-1].path
    try:  # an import hook (an editable install's finder): importlib.util asks the meta path
        spec = importlib.util.find_spec(module_name)
    except (ImportError, ValueError) as exc:
        raise ConfigError(
            f"system.function {function!r}: cannot find {module_name!r}: {exc}"
        ) from None
    if spec is None:
        raise ConfigError(f"system.function {function!r}: no module named {module_name!r}")
    origin = spec.origin
    if origin is None or not Path(origin).is_file():
        raise ConfigError(
            f"system.function {function!r}: no source file for {module_name!r} to fingerprint; "
            "list the application's files in system.code_paths or set system.version"
        )
    return Path(origin).resolve()


@dataclass(frozen=True)
class _Module:
    """A module found on disk: its dotted name, file (None: a namespace package) and where
    its submodules are searched (empty: not a package)."""

    name: str
    path: Path | None
    search: tuple[str, ...]

    @property
    def is_package(self) -> bool:
        return bool(self.search)


def _importable_cwd() -> None:
    if str(Path.cwd()) not in sys.path:  # as the python provider imports it
        sys.path.insert(0, str(Path.cwd()))


class _Finder:
    """Finds modules as ``importlib.machinery.PathFinder`` would on ``sys.path``, with its own
    directory finders (no stale listing from an earlier call, no import) and a memo per name:
    one per fingerprint."""

    def __init__(self) -> None:
        self._dirs: dict[str, importlib.machinery.FileFinder | None] = {}
        self._found: dict[str, _Module | None] = {}

    def chain(self, name: str, *, own: bool = False) -> list[_Module] | None:
        """``name`` and each of its parent packages, top first (None: not found on the path
        finders; a builtin module, or a standard-library one unless it is the function's
        ``own``, is not looked for)."""
        parts = name.split(".")
        if not all(parts) or parts[0] in sys.builtin_module_names:
            return None
        if parts[0] in sys.stdlib_module_names and not own:
            return None
        search: Sequence[str] = [entry or os.getcwd() for entry in sys.path]
        chain: list[_Module] = []
        for i in range(len(parts)):
            module = self._module(".".join(parts[: i + 1]), search)
            if module is None:
                return None
            chain.append(module)
            search = module.search
            if not search and i < len(parts) - 1:
                return None  # a plain module has no submodules
        return chain

    def _module(self, name: str, search: Sequence[str]) -> _Module | None:
        """A regular module or package in the first ``search`` directory that has one, else
        the portions of a namespace package."""
        if name in self._found:
            return self._found[name]
        found: _Module | None = None
        portions: list[str] = []
        for entry in search:
            if entry not in self._dirs:
                is_dir = os.path.isdir(entry)
                self._dirs[entry] = (
                    importlib.machinery.FileFinder(entry, *_LOADERS) if is_dir else None
                )
            finder = self._dirs[entry]
            spec = finder.find_spec(name) if finder is not None else None
            if spec is None:
                continue
            if spec.loader is not None:
                origin = spec.origin if spec.has_location else None
                path = Path(os.path.realpath(origin)) if origin else None
                found = _Module(name, path, tuple(spec.submodule_search_locations or ()))
                break
            portions.extend(spec.submodule_search_locations or ())
        if found is None and portions:
            found = _Module(name, None, tuple(portions))
        self._found[name] = found
        return found


_LOADERS = (
    (importlib.machinery.ExtensionFileLoader, importlib.machinery.EXTENSION_SUFFIXES),
    (importlib.machinery.SourceFileLoader, importlib.machinery.SOURCE_SUFFIXES),
)


def _imported_names(module: _Module) -> Iterator[str]:
    """Absolute names of what ``module``'s source imports: ``import a.b`` gives ``a.b``;
    ``from a import b`` gives ``a`` and ``a.b`` (a submodule, when there is one); relative
    imports are resolved against the module's package."""
    assert module.path is not None
    package = module.name if module.is_package else module.name.rpartition(".")[0]
    for level, base, names in _imports(module.path):
        if level:
            anchor = package.split(".") if package else []
            if level - 1 >= len(anchor):
                continue  # beyond the top-level package: an ImportError at run time
            anchor = anchor[: len(anchor) - (level - 1)]
            base = ".".join([*anchor, base] if base else anchor)
        if not base:
            continue
        yield base
        for alias in names:
            if alias != "*":
                yield f"{base}.{alias}"


#: Import statements per file content (sha256): parsed once per process.
_PARSED: dict[str, tuple[tuple[int, str, tuple[str, ...]], ...]] = {}


def _imports(path: Path) -> tuple[tuple[int, str, tuple[str, ...]], ...]:
    """``(level, module, names)`` of every import statement in the file (``names`` empty for
    ``import x``); a file that does not parse imports nothing evalkit can see."""
    try:
        source = path.read_bytes()
    except OSError:
        return ()
    digest = hashlib.sha256(source).hexdigest()
    cached = _PARSED.get(digest)
    if cached is not None:
        return cached
    try:
        tree = ast.parse(source, filename=str(path)) if b"import" in source else None
    except (SyntaxError, ValueError):
        tree = None
    found: list[tuple[int, str, tuple[str, ...]]] = []
    for node in _statements(tree.body if tree is not None else []):
        if isinstance(node, ast.Import):
            found.extend((0, alias.name, ()) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names = tuple(alias.name for alias in node.names)
            found.append((node.level, node.module or "", names))
    _PARSED[digest] = result = tuple(found)
    return result


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Every statement, at any depth (function and class bodies, ``if``, ``try``, ``with``,
    ``match`` ...), without walking expressions: an import is always a statement."""
    pending = list(reversed(body))
    while pending:
        node = pending.pop()
        yield node
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            children = getattr(node, field, None)
            if isinstance(children, list):
                for child in reversed(children):
                    if isinstance(child, ast.ExceptHandler | ast.match_case):
                        pending.extend(reversed(child.body))
                    elif isinstance(child, ast.stmt):
                        pending.append(child)


def _in_project(path: Path, roots: Sequence[Path]) -> bool:
    return not _installed(path) and any(path.is_relative_to(root) for root in roots)


def _installed(path: Path) -> bool:
    """A file of the interpreter or of installed packages (never the project's own code)."""
    if _INSTALLED_PARTS & set(path.parts) or _IGNORED_PARTS & set(path.parts):
        return True
    return any(path.is_relative_to(prefix) for prefix in _installed_prefixes())


@functools.cache
def _installed_prefixes() -> tuple[Path, ...]:
    paths = sysconfig.get_paths()
    names = ("stdlib", "platstdlib", "purelib", "platlib")
    return tuple({Path(paths[n]).resolve() for n in names if n in paths})


def fingerprint_digest(code: dict[str, str]) -> str | None:
    """One sha256 over the per-file hashes (None when there is no code to hash)."""
    if not code:
        return None
    lines = "".join(f"{path}\0{digest}\n" for path, digest in sorted(code.items()))
    return hashlib.sha256(lines.encode()).hexdigest()


def _kept(relative: Path) -> bool:
    return not (_IGNORED_PARTS & set(relative.parts)) and relative.suffix not in _IGNORED_SUFFIXES


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()

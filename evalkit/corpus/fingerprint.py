"""The code fingerprint of the system under test: what the cache key and the manifest carry.

For ``provider: python`` evalkit hashes the source file of the function's module; globs in
``system.code_paths`` widen that to the rest of the application (helpers, prompts it reads, a
local index). Paths are recorded relative to the corpus root, so two checkouts of the same code
produce the same fingerprint. A system evalkit cannot hash (a deployed service) states its
version instead (``system.version``).

Examples:
    >>> code_fingerprint(None, [], Path("."))
    {}
"""

from __future__ import annotations

import glob
import hashlib
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from evalkit.errors import ConfigError

#: Never part of a fingerprint: byte code changes on every import, not with the source.
_IGNORED_PARTS = frozenset({"__pycache__", ".git", ".venv", "node_modules"})
_IGNORED_SUFFIXES = (".pyc", ".pyo")


def code_fingerprint(function: str | None, code_paths: Sequence[str], root: Path) -> dict[str, str]:
    """``{path relative to root: sha256}`` of the function's module and every ``code_paths`` file.

    Raises:
        ConfigError: the function's module cannot be located, or a glob matches no file.
    """
    files: set[Path] = set()
    if function:
        files.add(module_file(function))
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


def module_file(function: str) -> Path:
    """The source file of ``package.module`` in ``package.module:function``, without importing
    the module itself (its parent packages are imported, as ``import`` would)."""
    module_name = function.partition(":")[0]
    if str(Path.cwd()) not in sys.path:  # as the python provider imports it
        sys.path.insert(0, str(Path.cwd()))
    try:
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

"""Your own scorers from the CLI: ``scorers: [myproject.checks]`` in ``evalkit.yaml``.

Each named module is imported when the suite loads (the config's directory and the current one
are importable), so the scorers it registers with the public decorator
(:func:`evalkit.scorers.registry.scorer`) are known before the cases are validated. The sha256 of
each module's source file enters the run manifest (``scorer_files``, as ``module:NAME``): a
changed scorer is a changed configuration. A module whose file changed since evalkit imported it
is imported again, so the code that scores is the code that was hashed.

Examples:
    >>> scorer_module_hashes([])
    {}
"""

from __future__ import annotations

import hashlib
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from evalkit.errors import ConfigError
from evalkit.scorers.registry import SCORERS

#: Prefix of a custom scorer module's entry in the manifest's ``scorer_files``.
MODULE_PREFIX = "module:"
_IMPORTED: dict[str, str] = {}  # module name -> sha256 of its source when evalkit imported it


def import_scorer_modules(
    names: Sequence[str], root: Path, source: str | Path = "evalkit.yaml"
) -> dict[str, str]:
    """Import each module in ``names``; returns ``{module name: sha256 of its source}``.

    Raises:
        ConfigError: a module that cannot be imported, has no source file, or redefines a
            scorer evalkit (or another module) already registered.
    """
    for directory in (str(Path.cwd()), str(root)):
        if directory not in sys.path:
            sys.path.insert(0, directory)
    hashes: dict[str, str] = {}
    for name in names:
        before = dict(SCORERS)
        module = _import(name, source)
        clashes = sorted(  # a re-import of the same module may re-register its own names
            n
            for n, d in SCORERS.items()
            if n in before
            and d.factory is not before[n].factory
            and before[n].factory.__module__ != module.__name__
        )
        if clashes:
            SCORERS.update({n: before[n] for n in clashes})  # keep the original scorer
            raise ConfigError(
                f"{source}: scorers module {name!r} registers {', '.join(map(repr, clashes))}, "
                "already a scorer; give yours another name"
            )
        hashes[name] = _source_sha(module, name, source)
    return hashes


def scorer_module_hashes(names: Sequence[str]) -> dict[str, str]:
    """``{"module:NAME": sha256}`` of already imported scorer modules, for the manifest."""
    out = {}
    for name in names:
        module = sys.modules.get(name)
        if module is not None:
            out[f"{MODULE_PREFIX}{name}"] = _source_sha(module, name, "evalkit.yaml")
    return dict(sorted(out.items()))


def _import(name: str, source: str | Path) -> ModuleType:
    if not isinstance(name, str) or not name or not all(p.isidentifier() for p in name.split(".")):
        raise ConfigError(f"{source}: scorers: {name!r} is not a module name like myproject.checks")
    try:
        module = importlib.import_module(name)
        path = getattr(module, "__file__", None)
        if path and Path(path).is_file():
            digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
            if _IMPORTED.get(name, digest) != digest:
                cached = getattr(module, "__cached__", None)
                if cached:
                    Path(cached).unlink(missing_ok=True)
                module = importlib.reload(module)
            _IMPORTED[name] = digest
    except ImportError as exc:
        raise ConfigError(
            f"{source}: scorers module {name!r} cannot be imported: {exc} (modules are looked "
            "for beside evalkit.yaml and in the current directory)"
        ) from None
    except Exception as exc:  # the module's own code failed while importing
        raise ConfigError(
            f"{source}: scorers module {name!r} failed to import: {type(exc).__name__}: {exc}"
        ) from None
    return module


def _source_sha(module: ModuleType, name: str, source: str | Path) -> str:
    path = getattr(module, "__file__", None)
    if not path or not Path(path).is_file():
        raise ConfigError(f"{source}: scorers module {name!r} has no source file to hash")
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()

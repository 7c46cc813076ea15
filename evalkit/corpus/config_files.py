"""Where a suite config is: ``--config`` (a file or a folder), else the working directory's,
and from a project's ``notebooks/`` the folder above. Kept light (no pydantic): the CLI
resolves ``--config`` before any command loads the suite."""

from __future__ import annotations

from pathlib import Path

from evalkit.errors import ConfigError

DEFAULT_CONFIG = Path("corpus/evalkit.yaml")
#: Where a suite config is looked for in a folder: a project made by ``evalkit init`` keeps it
#: at its root, beside its cases; this repository keeps the demo suite's in corpus/.
CONFIG_NAMES = ("evalkit.yaml", "corpus/evalkit.yaml")

__all__ = ["CONFIG_NAMES", "DEFAULT_CONFIG", "find_config", "resolve_config"]


def find_config(where: str | Path = ".", *, parents: int = 0) -> Path | None:
    """The suite config of the folder ``where`` (its `CONFIG_NAMES`, in that order), else of
    up to ``parents`` folders above it; ``where`` itself when it is a file. None if none.

    A notebook in a project's ``notebooks/`` finds the project's config with ``parents=1``.

    Examples:
        >>> find_config("/nonexistent") is None
        True
    """
    start = Path(where)
    if start.is_file():
        return start
    for folder in [start, *list(start.resolve().parents)[:parents]]:
        for name in CONFIG_NAMES:
            if (folder / name).is_file():
                return folder / name
    return None


def resolve_config(path: str | Path | None) -> Path:
    """The config file ``--config`` names: a file as given; a folder's `find_config`; None:
    the working directory's (``evalkit.yaml``, else ``corpus/evalkit.yaml``).

    Raises:
        ConfigError: a folder with neither file in it.
    """
    where = Path(path) if path is not None else Path(".")
    if path is not None and not where.is_dir():
        return where
    found = find_config(where)
    if found is not None:
        return found
    if path is None:
        return DEFAULT_CONFIG  # load_suite says "not found" naming the documented default
    names = " or ".join(CONFIG_NAMES)
    raise ConfigError(f"{where}: no suite config in this folder (looked for {names})")

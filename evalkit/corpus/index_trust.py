"""Which case index directory a scan may read: never one that git tracks files in.

An entry is trusted when it is of the case file's exact bytes and of this reader
(:mod:`evalkit.corpus.case_index`), but the list of cases it holds is not derived again: a
forged entry, consistent with itself, could leave a case out, and then no shard builds it. The
index is a cache each machine makes for itself; a pull request that commits entries (force-added
past the directory's ``.gitignore``, or with the ignore edited) would otherwise choose what a
sharded candidate run evaluates. So a directory in which git tracks any file is treated as
absent: the scan makes its entries in a private directory of this process instead (removed at
exit) and says so in one line on stderr.

git runs only when the directory is inside a git work tree (a ``.git`` above it); no git
installed, or not a repository, is nothing tracked. A repository git cannot list (an error, a
timeout) is not trusted either: a check that cannot be made does not pass.

Examples:
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:   # no repository: used as it is
    ...     root = Path(folder)
    ...     trusted_index_directory(root) == root / ".evalkit" / "case-index"
    True
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from evalkit.corpus.case_index import index_directory

#: Seconds ``git ls-files`` may take before the directory counts as not verified.
GIT_TIMEOUT_S = 30
#: The private directory used in place of each untrusted one, for the life of this process.
_PRIVATE: dict[Path, Path] = {}


def trusted_index_directory(root: Path, given: str | Path | None = None) -> Path:
    """Where a scan of the corpus at ``root`` reads and writes its entries: the index directory
    (:func:`~evalkit.corpus.case_index.index_directory`) when no file in it is tracked by git,
    else a private directory of this process (the same one for every scan of that directory),
    with one line on stderr naming the path and why, the first time."""
    directory = index_directory(root, given)
    why = untrusted_because(directory)
    if why is None:
        return directory
    key = Path(os.path.abspath(directory))
    if key not in _PRIVATE:
        private = Path(tempfile.mkdtemp(prefix="evalkit-case-index-"))
        atexit.register(shutil.rmtree, private, ignore_errors=True)
        _PRIVATE[key] = private
        shown = _shown(key)
        print(
            f"evalkit: case index under {shown} {why}; not trusted, rebuilt privately in "
            f"{private} (removed at exit; `git rm -r {shown}`, a cache, to use one again)",
            file=sys.stderr,
            flush=True,
        )
    return _PRIVATE[key]


def untrusted_because(directory: Path) -> str | None:
    """Why the entries under ``directory`` may not be read (None: they may): git tracks a file
    there, or git could not say whether it does."""
    where = _existing(Path(os.path.abspath(directory)))
    if where is None or not _in_work_tree(where):
        return None
    pathspec = os.path.relpath(os.path.abspath(directory), where)
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--", pathspec],
            cwd=where, capture_output=True, text=True, timeout=GIT_TIMEOUT_S,
        )  # fmt: skip
    except FileNotFoundError:  # no git: nothing is tracked
        return None
    except (OSError, subprocess.SubprocessError) as exc:
        return f"could not be checked with git ls-files ({exc})"
    if listed.returncode != 0:
        first = (listed.stderr.strip().splitlines() or ["no message"])[0]
        return f"could not be checked with git ls-files ({first})"
    tracked = [name for name in listed.stdout.split("\0") if name]
    if not tracked:
        return None
    return f"is tracked by git ({len(tracked)} files, e.g. {tracked[0]})"


def _existing(path: Path) -> Path | None:
    """``path`` or its nearest ancestor that is a directory (git runs there)."""
    for candidate in (path, *path.parents):
        if candidate.is_dir():
            return candidate
    return None


def _in_work_tree(path: Path) -> bool:
    """Whether a ``.git`` (a directory, or a worktree's file) is at ``path`` or above it."""
    return any((folder / ".git").exists() for folder in (path, *path.parents))


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when it is under it, else absolute."""
    try:
        return path.relative_to(Path.cwd()).as_posix()
    except ValueError:
        return str(path)

"""What a Python system can read beyond its import closure: the repository's tracked files and
the environment variables the suite declares.

A Python system loads prompt files, imports modules by name at run time (``importlib``) and
reads feature flags from the environment: none of that is an ``import`` statement the code
fingerprint (:mod:`evalkit.corpus.fingerprint`) can follow. So its identity also covers, by
default, **every tracked file of the git repository the suite lives in, outside the corpus**
(cases are what is tested, not what answers), read from git's own object ids (``git ls-files
--stage``: no file is read unless it differs from the index), and the values of the variables
listed in ``system.env`` (hashed, never stored). An undeclared variable is not seen.

Where the tree cannot be read (no git, not a repository) the digest is None, said in the
manifest: the runner then serves such a system no cached answers in a CI job (the gate flow),
and where it was served some elsewhere the gate is UNVERIFIED until a run with
``--no-cache`` (:func:`evalkit.compare.trust.unreadable_tree_finding`).

Examples:
    >>> env_digests(["EK_DOC_FLAG"], {"EK_DOC_FLAG": "on"})["EK_DOC_FLAG"][:12]
    'b8790557700e'
    >>> env_digests(["EK_DOC_UNSET"], {})
    {'EK_DOC_UNSET': None}
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

#: Seconds a git call may take before the tree counts as unreadable.
GIT_TIMEOUT_S = 30


@dataclass(frozen=True)
class RepoTree:
    """The digest of a repository's tracked files outside the corpus (None: unreadable, with
    ``why``), how many files it covers, and how many of them differ from git's index."""

    digest: str | None
    files: int
    dirty: int
    why: str | None = None

    def to_manifest(self) -> dict[str, object]:
        """The manifest's ``system.repo``: the digest and why it is missing (the counts stay
        out: a file touched but unchanged is no other system)."""
        return {"digest": self.digest, "why": self.why}


def repo_tree(root: Path) -> RepoTree:
    """The tracked files of the repository holding ``root``, minus ``root``'s own subtree (the
    corpus), as one sha256 over ``path, object id`` (a file changed in the work tree but not
    staged counts by its content, hashed as git would)."""
    top = _git(root, "rev-parse", "--show-toplevel")
    if top is None:
        return RepoTree(None, 0, 0, "not a git repository (or git is missing)")
    top_path = Path(top.strip())
    listing = _git(top_path, "ls-files", "--stage", "-z")
    changed = _git(top_path, "diff-files", "--name-only", "-z")
    if listing is None or changed is None:
        return RepoTree(None, 0, 0, "git could not list the tracked files")
    try:
        corpus = Path(os.path.relpath(root.resolve(), top_path.resolve())).as_posix()
    except ValueError:  # another drive
        corpus = ""
    skip = "" if corpus in (".", "") or corpus.startswith("..") else corpus + "/"
    dirty = set(filter(None, changed.split("\0")))
    digest = hashlib.sha256()
    files = touched = 0
    for entry in filter(None, listing.split("\0")):
        meta, _, path = entry.partition("\t")
        if skip and path.startswith(skip):
            continue
        object_id = meta.split()[1]
        if path in dirty:
            object_id = _worktree_object(top_path / path, len(object_id))
            touched += 1
        digest.update(f"{path}\0{object_id}\n".encode())
        files += 1
    return RepoTree(digest.hexdigest(), files, touched)


def env_digests(names: Sequence[str], environ: Mapping[str, str] | None = None) -> dict:
    """``{NAME: sha256 of its value}`` of each declared variable (None: unset); the values
    themselves are never returned."""
    environ = os.environ if environ is None else environ
    out: dict[str, str | None] = {}
    for name in sorted(set(names)):
        value = environ.get(name)
        out[name] = (
            None if value is None else hashlib.sha256(f"{name}\0{value}".encode()).hexdigest()
        )
    return out


def _worktree_object(path: Path, id_length: int) -> str:
    """The git object id the file's current content would have (``deleted`` when it is gone),
    so a file touched but unchanged keeps its id."""
    try:
        data = path.read_bytes()
    except OSError:
        return "deleted"
    algorithm = hashlib.sha256 if id_length == 64 else hashlib.sha1
    return algorithm(b"blob %d\0" % len(data) + data).hexdigest()


def _git(where: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args], cwd=where, capture_output=True, text=True, timeout=GIT_TIMEOUT_S
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None

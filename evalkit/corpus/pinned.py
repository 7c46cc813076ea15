"""The corpus as a promotion pinned it: its files read for pinning, and written back and loaded
for judging (issue 42, rule 1: the pinned exam decides).

`exam_files` reads what a promoted run's verdicts depend on from its corpus root: the case
files (``cases/`` and ``sealed/``), every file a case references (``Corpus.file_hashes``:
schemas, rubrics, SQL fixture databases, ``python_tests`` files) and each custom scorer
module's source (``module:NAME``). `load_pinned_corpus` writes those files under a scratch
directory and loads them, with the pinned scorer modules' code registered while the scorers
are built (and the suite's own restored after), so the pinned expectations judge — never the
pull request's files.

Examples:
    >>> from pathlib import Path
    >>> exam_files(Path("corpus"), load_corpus("corpus"), [])  # doctest: +SKIP
    {'cases/account.yaml': b'...', 'schemas/support_reply.json': b'...', ...}
"""

from __future__ import annotations

import hashlib
import sys
import types
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from evalkit.corpus.cases import CASE_GLOBS, Corpus, load_corpus
from evalkit.corpus.scorer_modules import MODULE_PREFIX
from evalkit.corpus.yaml_files import find_yaml_files
from evalkit.errors import CorpusError
from evalkit.scorers.registry import SCORERS

#: The corpus directories whose case files an exam pins.
CASE_DIRS = ("cases", "sealed")


def exam_files(root: Path, corpus: Corpus, modules: Sequence[str] = ()) -> dict[str, bytes]:
    """``{path relative to root (or module:NAME): content}`` of every file the corpus's
    verdicts depend on (see the module docstring).

    Raises:
        CorpusError: a referenced file can no longer be read.
    """
    root = Path(root).resolve()
    files: dict[str, bytes] = {}
    for directory in CASE_DIRS:
        for path in find_yaml_files(root / directory, root, CASE_GLOBS):
            files[path.relative_to(root).as_posix()] = path.read_bytes()
    for name in corpus.file_hashes:
        try:
            files[Path(name).as_posix()] = (root / name).read_bytes()
        except OSError as exc:
            raise CorpusError(f"cannot read the referenced file {name}: {exc}") from None
    for module in modules:
        loaded = sys.modules.get(module)
        source = getattr(loaded, "__file__", None)
        if source and Path(source).is_file():
            files[f"{MODULE_PREFIX}{module}"] = Path(source).read_bytes()
    return files


def file_sha256(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def load_pinned_corpus(files: Mapping[str, bytes], where: Path) -> Corpus:
    """Write the pinned ``files`` under ``where`` and load them (sealed cases included), the
    scorers built with the pinned scorer modules' code.

    Raises:
        CorpusError: the pinned corpus no longer loads (an evalkit that cannot read it).
    """
    where = Path(where)
    for name, content in files.items():
        if name.startswith(MODULE_PREFIX):
            continue
        target = (where / name).resolve()
        if where.resolve() not in target.parents:
            raise CorpusError(f"the pinned exam names a file outside its corpus: {name}")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
    modules = {n.removeprefix(MODULE_PREFIX): c for n, c in files.items()
               if n.startswith(MODULE_PREFIX)}  # fmt: skip
    with pinned_scorer_modules(modules, where):
        return load_corpus(where, sealed=True)


@contextmanager
def pinned_scorer_modules(modules: Mapping[str, bytes], where: Path) -> Iterator[None]:
    """The scorers registered by the pinned modules' source, for as long as the block runs;
    the registry as it was afterwards (the suite's own modules stay what they are)."""
    before = dict(SCORERS)
    try:
        for name, source in sorted(modules.items()):
            path = where / "_pinned_modules" / (name.replace(".", "/") + ".py")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(source)
            module = types.ModuleType(f"_evalkit_pinned_{name.replace('.', '_')}")
            module.__file__ = str(path)
            try:
                exec(compile(source, str(path), "exec"), module.__dict__)
            except Exception as exc:  # the pinned module's own code failed
                raise CorpusError(
                    f"the pinned scorer module {name} failed to load: {type(exc).__name__}: {exc}"
                ) from None
        yield
    finally:
        SCORERS.clear()
        SCORERS.update(before)

"""``evalkit cases index``: the case index of the whole corpus made current, one file's facts
held at a time (:func:`~evalkit.corpus.case_facts.scan_corpus` with ``keep_facts=False``), so
refreshing the index of a million cases holds their ids (for the duplicate check), not their
facts.

Examples:
    >>> done = refresh_index("corpus")                    # doctest: +SKIP
    >>> done.files, done.cases                            # doctest: +SKIP
    (500, 1000000)
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from evalkit.corpus.case_facts import scan_corpus
from evalkit.corpus.case_index import IndexCounts


@dataclass(frozen=True)
class IndexRefresh:
    """What :func:`refresh_index` did: what the scan counted (``counts``: entries reused and
    written), how many case files and cases the corpus has, how many stale entries were
    removed, and where the entries are."""

    counts: IndexCounts
    files: int
    cases: int
    removed: int
    directory: Path


def refresh_index(
    root: str | Path,
    *,
    case_dirs: Sequence[str] = ("cases",),
    user_template: str | None = None,
    index_dir: str | Path | None = None,
    workers: int | None = None,
) -> IndexRefresh:
    """The case index of the whole corpus (sealed cases too) made current: every file's entry
    kept when it is of the file's bytes, else made again (``workers`` None: the files without
    an entry spread over the cores, as nothing is built here), the entries of files no
    longer in the corpus removed, and the corpus summary made current
    (:mod:`evalkit.corpus.case_summary`: the columns a shard reads). What ``evalkit cases
    index`` runs.

    Raises:
        CorpusError: the first bad case, as :func:`scan_corpus` reports it (the entries made
            before it are whole: each is written to a temporary file, then renamed).
    """
    facts = scan_corpus(
        root, sealed=True, case_dirs=case_dirs, user_template=user_template,
        index_dir=index_dir, workers=workers, keep_facts=False,
    )  # fmt: skip
    builder = facts.builder
    assert builder is not None
    removed = builder.index.prune(builder.files)
    counts, files, directory = builder.counts, len(builder.files), builder.index.directory
    del facts, builder
    _give_back()  # the scan's memory returned before the summary is made: the peaks not added
    from evalkit.corpus.case_summary import refresh_summary  # the columns shards read

    summary = refresh_summary(root, case_dirs=case_dirs, index_dir=index_dir)
    for name in ("summary_used", "summary_refused", "summary_written"):
        setattr(counts, name, getattr(summary, name))
    return IndexRefresh(counts, files, counts.cases_read, removed, directory)


def _give_back() -> None:
    """Free what the scan left and return the freed heap to the system (``malloc_trim``,
    glibc only): a million entries' facts freed leave their pages held by the allocator,
    where the summary made next would add its own on top."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)

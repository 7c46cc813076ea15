"""The command line's old spellings: each still works and says its new spelling on stderr.

The commands were regrouped as nouns with verbs (``evalkit import`` became ``evalkit cases
import``, ``evalkit runs`` became ``evalkit runs list``); scripts and CI jobs written against the
old words keep working. An old spelling is rewritten to the new one before the parser sees it,
so it is never registered: ``evalkit --help`` and the generated reference list the new words
alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class OldSpelling:
    """``old`` words at the start of a command line that now read ``new``.

    When ``old`` is also the start of the new spelling (``runs`` → ``runs list``), the words in
    ``unless`` after it are the group's own subcommands, which are not old spellings.
    """

    old: tuple[str, ...]
    new: tuple[str, ...]
    unless: frozenset[str] = frozenset()


_HELP = frozenset({"-h", "--help"})

#: Every old spelling, the longer first where two start alike (tests/cli/test_aliases.py runs
#: each one and holds ``unless`` equal to the subcommands the parser registers).
OLD_SPELLINGS: tuple[OldSpelling, ...] = (
    OldSpelling(("import",), ("cases", "import")),
    OldSpelling(("sealed", "rotate"), ("cases", "seal")),
    OldSpelling(("sealed",), ("cases", "seal")),
    OldSpelling(("rescore",), ("runs", "rescore")),
    OldSpelling(("merge",), ("runs", "merge")),
    OldSpelling(("calibrate",), ("judges", "calibrate")),
    OldSpelling(("judge-pairs",), ("judges", "pairs")),
    OldSpelling(("runs",), ("runs", "list"), frozenset({"list", "show", "rescore", "merge"})),
    OldSpelling(("flakes",), ("flakes", "measure"), frozenset({"measure"})),
    OldSpelling(("scorers",), ("scorers", "list"), frozenset({"list"})),
)


def respell(args: Sequence[str]) -> tuple[list[str], str | None]:
    """``args`` in the new spelling, and the line that says so (None when already new).

    Examples:
        >>> respell(["import", "jsonl", "chats.jsonl"])[0]
        ['cases', 'import', 'jsonl', 'chats.jsonl']
        >>> print(respell(["judge-pairs", "base", "cand"])[1])
        `evalkit judge-pairs` is now `evalkit judges pairs`
        >>> respell(["runs", "--json"])[0], respell(["runs", "show", "base"])
        (['runs', 'list', '--json'], (['runs', 'show', 'base'], None))
    """
    words = list(args)
    for spelling in OLD_SPELLINGS:
        n = len(spelling.old)
        if tuple(words[:n]) != spelling.old:
            continue
        following = words[n] if len(words) > n else None
        if spelling.unless and following in spelling.unless | _HELP:
            return words, None  # the group itself: `evalkit runs show`, `evalkit runs --help`
        note = f"`evalkit {' '.join(spelling.old)}` is now `evalkit {' '.join(spelling.new)}`"
        return [*spelling.new, *words[n:]], note
    return words, None

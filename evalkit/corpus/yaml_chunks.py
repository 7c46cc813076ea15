"""Reading a long case list a few hundred items at a time, so only one chunk's node graph is
alive at once (libyaml's graph is many times its case's size: read whole, a long case file's
graph was the peak of loading it).

A chunk is read by :mod:`~evalkit.corpus.yaml_input`'s libyaml fast path and refused
(:class:`ChunkRefused`) wherever that path would leave the document to the pure-Python loader:
the caller then reads the whole document, whose result or refusal is the reference. The limits
are yaml_input's (``MAX_YAML_NODES``), read at each call, as a user may change them.
:func:`item_spans` cuts a file's text at the same places, for the case index to parse one case
again from its item alone.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import yaml

from evalkit.corpus import yaml_input as _yaml
from evalkit.corpus.yaml_nodes import self_contained


@dataclass(frozen=True, slots=True)
class ListChunk:
    """A run of items of a document's root list, parsed on their own (:func:`list_chunks`)."""

    items: list[Any]  # the items as parse_yaml builds them
    nodes: list[yaml.Node]  # their nodes, with the whole document's lines and columns
    text: str  # the text the nodes' indices point into: the chunk led by newlines
    size: int  # at least the number of nodes composed, the chunk's own root list counted


class ChunkRefused(Exception):
    """A chunk :func:`list_chunks` cannot vouch for: parse the whole document instead, whose
    result (or refusal) is the reference."""


#: A line opening an item of a root block sequence (column 0) after the first line: a pattern
#: starting with a literal, which the regex engine finds at memory speed (``^`` in multiline
#: mode would be tried at every character).
_ROOT_ITEM = re.compile(r"\n-(?=[ \r\n]|\Z)")
#: The same at the very start of the text.
_FIRST_ITEM = re.compile(r"-(?=[ \r\n]|\Z)")
_DOCUMENT_MARKERS = ("---", "...")
#: Line breaks libyaml counts that ``str.count("\n")`` does not (NEL, LS, PS).
_OTHER_BREAKS = ("\x85", "\u2028", "\u2029")


def list_chunks(text: str, max_items: int, chunk_items: int) -> Iterator[ListChunk] | None:
    """A document that is one long block list, parsed ``chunk_items`` items at a time; None
    when the document is not one :func:`parse_yaml` would read the same way chunk by chunk.

    Why: libyaml's node graph of a case is many times the case's own size, and the whole
    file's graph was alive while its cases were built. Chunk by chunk only one chunk's graph
    is.

    Each chunk is the text from one column-0 ``-`` line to another, led by as many newlines as
    there are lines before it, so its marks (line, column) are the whole document's and a
    node's source text is ``chunk.text[start.index:end.index]``. Yields a :class:`ListChunk`
    each. Taken only where that is sound: the fast path's preconditions (libyaml, no
    tab, no control character), no anchor or directive (each chunk reads from its own text, as
    :func:`self_contained` says), no document marker, ``\n`` line breaks (``\r\n`` too), no
    path resolver registered, more than ``chunk_items`` and at most ``max_items`` items. The
    whole text is not checked first: each chunk is its own syntax check and node count, and a
    chunk that fails either is refused (below), so the whole-document parse reports what is
    wrong exactly as it does for any document. The depth holds from the same root level, keys
    within their mapping (no mapping spans two items); the node limit holds for each item (a
    chunk's items have no alias: its count bounds each item's, walked only when it is over):
    one long list is not one document held in memory, and the caller bounds its size. Valid
    chunks make a valid document: each ends on a line break with every quote, bracket and
    block scalar closed, and the next starts a root item at column 0, as the document reads
    it (a chunk cut elsewhere fails to parse).

    Raises (from the iterator, before yielding the chunk):
        ChunkRefused: a chunk that is not a block list of the items it was cut at, one that
            libyaml cannot parse, or one
            that the fast path leaves to the Python loader (a key given twice, too deep, a
            tag, an alias, a value the constructor refuses): the caller discards what it
            built and parses the whole document.
        YAMLInputError: an item of more than ``MAX_YAML_NODES`` nodes, at its line.
    """
    if (
        _yaml._CLoader is None
        or _yaml._Composer.yaml_path_resolvers  # the loader then counts nothing (see _parse_chunk)
        or _yaml._lenient(text)
        or yaml.reader.Reader.NON_PRINTABLE.search(text)
        or not self_contained(text)
        or text.startswith(_DOCUMENT_MARKERS)
        or any(f"\n{marker}" in text for marker in _DOCUMENT_MARKERS)
        or any(line_break in text for line_break in _OTHER_BREAKS)
        or text.count("\r") != text.count("\r\n")
    ):
        return None
    starts = [0] if _ROOT_ITEM.match(f"\n{text[:2]}") else []
    starts += [match.start() + 1 for match in _ROOT_ITEM.finditer(text)]
    if not chunk_items < len(starts) <= max_items:
        return None
    return _chunks(text, starts, chunk_items)


def _chunks(text: str, starts: list[int], chunk_items: int) -> Iterator[ListChunk]:
    cuts = [0, *starts[chunk_items::chunk_items], len(text)]  # the first keeps leading comments
    lines = 0
    for number, (begin, end) in enumerate(pairwise(cuts)):
        items = len(starts[number * chunk_items : (number + 1) * chunk_items])
        chunk = _parse_chunk("\n" * lines + text[begin:end], items)
        if chunk.size - 1 > _yaml.MAX_YAML_NODES:  # an upper bound of the largest item's count
            _check_item_sizes(chunk.nodes)
        yield chunk
        del chunk  # one chunk's nodes alive while the next parses
        lines += text.count("\n", begin, end)


def _check_item_sizes(items: Sequence[yaml.Node]) -> None:
    """Refuse the first item of more than ``MAX_YAML_NODES`` nodes (a tree: no alias).

    Raises:
        YAMLInputError: that item, at its first line.
    """
    for item in items:
        nodes, stack = 0, [item]
        while stack:
            node = stack.pop()
            nodes += 1
            if type(node) is yaml.SequenceNode:
                stack += node.value
            elif type(node) is yaml.MappingNode:
                stack += [part for pair in node.value for part in pair]
        if nodes > _yaml.MAX_YAML_NODES:
            raise _yaml.YAMLInputError(
                f"this item has more than {_yaml.MAX_YAML_NODES:,} values (the limit for one "
                "case); split it or share less",
                item.start_mark.line + 1,
            )


def _parse_chunk(chunk_text: str, items: int) -> ListChunk:
    """One chunk's items, item nodes, text and size (see :func:`list_chunks`).

    The size bounds the nodes from above without a pass of its own: the loader counts the
    nodes it resolves a tag for (:func:`_tag_resolver`), which is every node but an alias (none
    here: no anchor) and one whose tag is written, and a written tag starts with a '!'.

    Raises:
        ChunkRefused: not YAML, not a column-0 block list of ``items`` items, or left to PyYAML.
    """
    loader = _yaml._loader(chunk_text)
    try:
        if not hasattr(loader, "composed"):  # a path resolver registered since list_chunks
            raise ChunkRefused
        node = loader.get_single_node()
        size = loader.composed() + chunk_text.count("!")
        if (
            type(node) is not yaml.SequenceNode
            or node.tag != _yaml._SEQ
            or node.flow_style
            or node.start_mark.column != 0
            or len(node.value) != items
        ):
            raise ChunkRefused
        return ListChunk(_yaml._build_tree(node, loader, 1, False), node.value, chunk_text, size)
    except (yaml.YAMLError, _yaml._Fallback, RecursionError, ValueError, OverflowError) as exc:
        raise ChunkRefused from exc
    finally:
        loader.dispose()


def item_spans(text: str, lines: Sequence[int]) -> list[tuple[int, int, int]] | None:
    """Each item of a document's root list as (start, end, first line) in ``text``, given the
    line of each item's case (``lines``); None when the items cannot be parsed one by one as
    the whole file reads (what :func:`list_chunks` refuses to cut: an anchor or directive, a
    document marker, a tab, other line breaks than ``\\n`` and ``\\r\\n``) or the cuts are
    not one per case, each holding its case's line.

    Examples:
        >>> item_spans("- id: a\\n- id: b\\n", [1, 2])
        [(0, 8, 1), (8, 16, 2)]
        >>> item_spans("- &x id: a\\n", [1]) is None
        True
    """
    if (
        not self_contained(text)
        or "\t" in text
        or text.startswith(("---", "..."))
        or "\n---" in text
        or "\n..." in text
        or any(mark in text for mark in ("\x85", "\u2028", "\u2029"))
        or text.count("\r") != text.count("\r\n")
    ):
        return None
    starts = [0] if _FIRST_ITEM.match(text) else []
    starts += [match.start() + 1 for match in _ROOT_ITEM.finditer(text)]
    if len(starts) != len(lines):
        return None
    if not lines:  # a file of no cases (comments alone): nothing to slice
        return []
    spans, line, previous = [], 1, 0
    for case_line, start, end in zip(lines, starts, [*starts[1:], len(text)], strict=True):
        line += text.count("\n", previous, start)
        previous = start
        if not line <= case_line <= line + text.count("\n", start, end):
            return None
        spans.append((start, end, line))
    return spans

"""Finding things in a parsed YAML node graph: the line a value is on (for error messages), a
mapping's value node, a list's items, and whether a node reads from its own text alone.

Examples:
    >>> import yaml
    >>> root = yaml.compose("id: a\\nexpect:\\n  - contains: x\\n")
    >>> node_line(root, ["expect", 0]), node_line(root, ["missing"])
    (3, None)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml


def node_line(node: Any, loc: Sequence[Any]) -> int | None:
    """Line of the deepest YAML node reachable along ``loc`` (keys or list indices)."""
    line = None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            match = next(((k, v) for k, v in node.value if k.value == part), None)
            if match is None:
                return line
            line = match[0].start_mark.line + 1
            node = match[1]
        elif (
            isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value)
        ):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            return line
    return line


def mapping_value(node: Any, key: str) -> Any:
    """The value node of ``key`` in a mapping node (the first, as :func:`node_line` finds it),
    or None."""
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if k.value == key:
                return v
    return None


def sequence_items(node: Any) -> list[Any]:
    """The item nodes of a sequence node (none for anything else)."""
    return node.value if isinstance(node, yaml.SequenceNode) else []


def self_contained(text: str) -> bool:
    """Whether every node of the document reads from its own text alone: no anchor (so no
    alias, whose value is written elsewhere) and no directive (a %TAG handle is defined at the
    top). Conservative: an '&' or a line starting with '%' inside a string counts too."""
    return "&" not in text and not text.startswith("%") and "\n%" not in text


def sequence_key(node: Any, text: str | None) -> tuple[int, str] | None:
    """A sequence node's column and source text in ``text`` (None: no text, or not a
    sequence). In a :func:`self_contained` document, nodes with equal keys read as equal
    values: a block node's reading depends on its text and the columns in it, which its
    start column fixes (the text before it on its first line is not part of it); a flow
    node's on its text alone."""
    if text is None or not isinstance(node, yaml.SequenceNode):
        return None
    start, end = node.start_mark, node.end_mark
    return start.column, text[start.index : end.index]

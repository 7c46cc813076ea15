"""Rewriting cases' ``fixtures.tools`` (and ``provenance``) in their YAML files, leaving every
other byte of the file as it was: other cases, comments, key order, quoting and blank lines.

Only the text of the rewritten keys changes: each tool entry under the case's
``fixtures.tools`` whose fixture changed (the whole ``tools:`` entry when a tool is removed or
it is not a block mapping; added when missing, and ``fixtures:`` with it, before ``expect:``;
a comment after a replaced value stays) and, when asked, the case's ``provenance`` (flow stays
flow, block stays block, keys in their order). The file is re-parsed before it is written
and every case must read back exactly as intended, so a file this cannot edit safely (a case
written as one flow mapping, say) is refused with its line, never half-rewritten.

Examples:
    >>> text = '''# agents
    ... - id: a-1
    ...   input: {messages: [{role: user, content: "order 8812?"}]}
    ...   fixtures:
    ...     tools:
    ...       lookup_order: {status: delivered}   # the order service
    ...   expect: [{contains: shipped}]
    ... '''
    >>> edit = CaseEdit("a-1", tools={"lookup_order": [{"args": {"order_id": "8812"},
    ...                                                 "response": {"status": "returned"}}]})
    >>> print(rewrite_text(text, [edit], "cases/agents.yaml"))
    # agents
    - id: a-1
      input: {messages: [{role: user, content: "order 8812?"}]}
      fixtures:
        tools:
          lookup_order:
            - args: {order_id: '8812'}
              response: {status: returned}   # the order service
      expect: [{contains: shipped}]
    <BLANKLINE>
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

import yaml

from evalkit.corpus.yaml_input import compose_text, load_text
from evalkit.errors import CorpusError

__all__ = ["CaseEdit", "rewrite_case_file", "rewrite_text"]


@dataclass(frozen=True)
class CaseEdit:
    """What to change in one case: its whole ``fixtures.tools`` (None: leave it) and keys to
    set in its ``provenance`` (None: leave it)."""

    case_id: str
    tools: dict[str, Any] | None = None
    provenance: dict[str, Any] | None = None


@dataclass(frozen=True)
class _Splice:
    start: int
    end: int
    text: str


def rewrite_case_file(path: Path, edits: Sequence[CaseEdit], rel: str) -> None:
    """Apply ``edits`` to the case file at ``path`` (``rel``: its name in messages), atomically.

    Raises:
        CorpusError: a case is not in the file, or cannot be rewritten safely (file:line).
    """
    text = path.read_bytes().decode("utf-8")  # not read_text: keep the file's \r\n line ends
    new_text = rewrite_text(text, edits, rel)
    if new_text == text:
        return
    write_atomically(path, new_text)


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` (its own line endings kept): the old file or the new."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as out:
            out.write(text)
        os.replace(temporary, path)  # a reader sees the old file or the new one, never half
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def rewrite_text(text: str, edits: Sequence[CaseEdit], rel: str) -> str:
    """``text`` of a case file with ``edits`` applied; see the module docstring.

    Raises:
        CorpusError: as :func:`rewrite_case_file`.
    """
    if "\r\n" in text:  # spliced text is written with the file's own line endings
        lf = rewrite_text(text.replace("\r\n", "\n"), edits, rel)
        return lf.replace("\n", "\r\n")
    root = compose_cases(text, rel)
    # what each case holds now, from one load of the whole file (a block value's own text
    # does not parse on its own: its first line has lost its indentation)
    loaded = {c.get("id"): c for c in load_text(text) or () if isinstance(c, dict)}
    items = {_case_id(item): item for item in root.value if isinstance(item, yaml.MappingNode)}
    splices: list[_Splice] = []
    for edit in edits:
        item = items.get(edit.case_id)
        if item is None:
            raise CorpusError("case not found in this file", path=rel, case_id=edit.case_id)
        if item.flow_style:
            raise CorpusError(
                "the case is one flow mapping ({...}); write it in block style to let evalkit "
                "rewrite its fixtures",
                path=rel,
                line=item.start_mark.line + 1,
                case_id=edit.case_id,
            )
        if edit.tools is not None:
            current = loaded.get(edit.case_id, {}).get("fixtures")
            splices.extend(_tools_splices(text, item, edit.tools, current))
        if edit.provenance is not None:
            current = loaded.get(edit.case_id, {}).get("provenance")
            splices.append(_provenance_splice(text, item, edit.provenance, current))
    new_text = text
    for splice in sorted(splices, key=lambda s: s.start, reverse=True):
        new_text = new_text[: splice.start] + splice.text + new_text[splice.end :]
    _verify(text, new_text, edits, rel)
    return new_text


def compose_cases(text: str, rel: str) -> yaml.SequenceNode:
    """The node tree of a case file (a list), for splicing its text; one-line errors."""
    try:
        # marks that index characters of ``text`` (what we splice)
        root = compose_text(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", exc)
        raise CorpusError(f"cannot parse: {problem}", path=rel, line=line) from None
    if not isinstance(root, yaml.SequenceNode):
        raise CorpusError("a case file must be a YAML list of cases", path=rel)
    return root


def _case_id(item: yaml.MappingNode) -> str | None:
    node = _child(item, "id")
    return node[1].value if node is not None and isinstance(node[1], yaml.ScalarNode) else None


def _child(mapping: yaml.MappingNode, key: str) -> tuple[yaml.Node, yaml.Node] | None:
    return next(((k, v) for k, v in mapping.value if k.value == key), None)


def _tools_splices(
    text: str, item: yaml.MappingNode, tools: dict[str, Any], current: Any
) -> list[_Splice]:
    fixtures = _child(item, "fixtures")
    if fixtures is None:  # a new `fixtures:` block, before `expect:` (or last)
        return [_insert(text, item, "fixtures", {"tools": tools}, before="expect")]
    key, value = fixtures
    if isinstance(value, yaml.MappingNode) and not value.flow_style and value.value:
        entry = _child(value, "tools")
        if entry is None:
            return [_insert(text, value, "tools", tools, before=None, first=True)]
        old = (current or {}).get("tools") if isinstance(current, dict) else None
        if _is_block(entry[1]) and isinstance(old, dict) and set(old) <= set(tools):
            # tool by tool: a tool whose fixture did not change keeps its text
            return [
                _replace(text, found[0], found[1], name, new)
                if (found := _child(entry[1], name)) is not None
                else _insert(text, entry[1], name, new, before=None)
                for name, new in tools.items()
                if name not in old or old[name] != new
            ]
        return [_replace(text, entry[0], entry[1], "tools", tools)]
    # a flow mapping (`fixtures: {tools: {...}}`) or empty: the whole entry, in block style
    kept = current if isinstance(current, dict) else {}
    return [_replace(text, key, value, "fixtures", {**kept, "tools": tools})]


def _is_block(node: yaml.Node) -> TypeGuard[yaml.MappingNode]:
    return isinstance(node, yaml.MappingNode) and not node.flow_style and bool(node.value)


def _provenance_splice(
    text: str, item: yaml.MappingNode, updates: dict[str, Any], current: Any
) -> _Splice:
    found = _child(item, "provenance")
    if found is None:
        return _insert(text, item, "provenance", updates, before="input")
    key, value = found
    merged = {**current, **updates} if isinstance(current, dict) else dict(updates)
    if isinstance(value, yaml.MappingNode) and value.flow_style:
        flow = yaml.dump(
            merged, Dumper=_Dumper, default_flow_style=True, sort_keys=False, width=10_000
        )
        start, end = value.start_mark.index, content_end(text, value)
        return _Splice(start, end, flow.strip())
    return _replace(text, key, value, "provenance", merged, block=True)  # block stays block


def _replace(
    text: str, key: yaml.Node, value: yaml.Node, name: str, new: Any, *, block: bool = False
) -> _Splice:
    """``name: new`` in place of the key and its value, at the key's column (``block``: every
    collection in block style)."""
    block_text = _render(name, new, key.start_mark.column, block=block)
    return _Splice(key.start_mark.index, content_end(text, value), block_text)


def _insert(
    text: str,
    mapping: yaml.MappingNode,
    name: str,
    new: Any,
    *,
    before: str | None,
    first: bool = False,
) -> _Splice:
    """``name: new`` as a new key of a block ``mapping``: before the key ``before`` (or the
    first key, with ``first``), else after the last one."""
    keys = [k for k, _ in mapping.value]
    column = keys[0].start_mark.column
    anchor = keys[0] if first else next((k for k in keys if k.value == before), None)
    block = _render(name, new, column)
    if anchor is not None:
        return _Splice(
            anchor.start_mark.index, anchor.start_mark.index, block + "\n" + " " * column
        )
    end = content_end(text, mapping.value[-1][1])
    return _Splice(end, end, "\n" + " " * column + block)


def _render(name: str, value: Any, column: int, *, block: bool = False) -> str:
    """``name:`` and ``value`` as block YAML whose continuation lines are indented by
    ``column`` (the first line starts where the key did); no trailing newline."""
    dumped = yaml.dump(
        # None: collections of scalars only in flow style (`args: {order_id: '8812'}`), as the
        # corpus writes them; anything nested in block style
        {name: value}, Dumper=_Dumper, sort_keys=False, default_flow_style=False if block else None,
        width=100,
        allow_unicode=True,
    )  # fmt: skip
    lines = dumped.rstrip("\n").split("\n")
    return "\n".join([lines[0], *(" " * column + line if line else line for line in lines[1:])])


def content_end(text: str, node: yaml.Node) -> int:
    """Where ``node``'s own text ends: a block collection's end mark sits at the next token,
    past the newline, blank lines and comments that follow it, which stay where they are."""
    end = node.end_mark.index
    if not isinstance(node, yaml.MappingNode | yaml.SequenceNode) or node.flow_style:
        return end
    start = node.start_mark.index
    while end > start:
        line_start = text.rfind("\n", start, end) + 1
        line = text[line_start:end]
        stripped = line.strip()
        if line_start <= start or (stripped and not stripped.startswith("#")):
            return line_start + len(line.rstrip())
        end = line_start - 1  # the newline before this blank or comment line
    return end


def _verify(old: str, new: str, edits: Sequence[CaseEdit], rel: str) -> None:
    """The rewritten text must read back as the old data with exactly ``edits`` applied."""
    before, after = load_text(old), load_text(new)
    wanted: dict[Any, CaseEdit] = {edit.case_id: edit for edit in edits}
    expected = []
    for case in before:
        edit = wanted.get(case.get("id")) if isinstance(case, dict) else None
        if edit is not None:
            case = dict(case)
            if edit.tools is not None:
                case["fixtures"] = {**(case.get("fixtures") or {}), "tools": edit.tools}
            if edit.provenance is not None:
                old_provenance = case.get("provenance")
                base = old_provenance if isinstance(old_provenance, dict) else {}
                case["provenance"] = {**base, **edit.provenance}
        expected.append(case)
    if after != expected:
        ids = ", ".join(sorted(wanted))
        raise CorpusError(
            f"rewriting the fixtures of {ids} would change more than they do (an unusual "
            "layout); edit the file by hand",
            path=rel,
        )


class _Dumper(yaml.SafeDumper):
    """Block sequences indented under their key (``key:\\n  - item``), as the corpus writes
    them, rather than PyYAML's flush-left ``key:\\n- item``."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)

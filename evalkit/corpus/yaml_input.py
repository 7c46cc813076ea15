"""Reading YAML evalkit did not write: one document, plain data, bounded, no silent overwrites.

Used for case files and the suite config alike; files on disk are read by
:mod:`~evalkit.corpus.yaml_files`, and lines are found in the node graph by
:mod:`~evalkit.corpus.yaml_nodes`. Before any Python object is built the node graph
is checked: a recursive alias, nesting deeper than ``MAX_YAML_DEPTH``, more than
``MAX_YAML_NODES`` nodes (while composing, and again once aliases are expanded: a "billion
laughs" bomb) and a key given twice in one mapping (YAML would keep the last one silently) are
refused with one line naming the lines.

Speed: a document is parsed by libyaml (PyYAML's C loader, which gives the same nodes and
marks) with the garbage collector paused; only a document the fast path refuses, or one holding
what libyaml reads more leniently than PyYAML (tabs, a '?' in unquoted text inside brackets),
is parsed again by the pure-Python loader, so every refusal is the Python loader's, with its
message and line. Loading is linear in the document's size (the collector, walking everything
built so far, made it quadratic).

Memory: a long case list is parsed a few hundred items at a time
(:func:`evalkit.corpus.yaml_chunks.list_chunks`, over this module's fast path), so only one
chunk's node graph is alive, with the whole document's results and refusals. Such a list is
bounded per item, not as a whole: each item (a case) holds at most ``MAX_YAML_NODES`` nodes, and
the file's size is bounded by its reader (bytes, items), checked before parsing; a document read
whole (the suite config, a case file with anchors, tabs or document markers) holds at most
``MAX_YAML_NODES`` nodes in all.
"""

from __future__ import annotations

import gc
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import yaml

#: Limits on one YAML document read whole, counted after alias expansion (what a loader really
#: walks); on each item of a long block list read chunk by chunk (`yaml_chunks.list_chunks`).
MAX_YAML_NODES = 1_000_000
MAX_YAML_DEPTH = 64


class YAMLInputError(Exception):
    """A YAML document evalkit refuses: ``problem`` is one line, ``line`` 1-based or None."""

    def __init__(self, problem: str, line: int | None = None, column: int | None = None) -> None:
        self.problem = " ".join(problem.split())[:300]
        self.line = line
        self.column = column  # 1-based, for syntax errors
        super().__init__(self.problem)


def parse_yaml(text: str) -> tuple[Any, Any]:
    """Parse one YAML document with the safe loader; returns ``(data, root node)``.

    Only plain data is built (``!!python/...`` tags are refused). Before any object is built the
    node graph is checked (see the module docstring), so nothing downstream (validation,
    hashing, JSON) can blow up on it, and no key silently replaces another.

    Raises:
        YAMLInputError: what is wrong, with the line when known.

    Examples:
        >>> parse_yaml("[a, b]")[0]
        ['a', 'b']
        >>> parse_yaml("a: &x [1]\\nb: *x")[0]
        {'a': [1], 'b': [1]}
        >>> parse_yaml("id: a\\nexpect: []\\nid: b")
        Traceback (most recent call last):
        ...
        evalkit.corpus.yaml_input.YAMLInputError: duplicate key 'id' (lines 1 and 3): YAML would keep only the last; remove one
    """  # noqa: E501
    with paused_gc():
        fast = _parse_fast(text)
        # A document holding nothing (``---`` alone): libyaml marks its empty scalar at the next
        # line where the Python composer marks it after the marker; the Python parse of a null
        # document costs nothing and keeps the line an error message names the same.
        if fast is not None and fast[0] is not None:
            return fast
        return _parse_python(text)


@contextmanager
def paused_gc() -> Iterator[None]:
    """The cyclic garbage collector off inside the block (as it was, after).

    Loading builds many small objects and frees none: each collection walks every one of them
    again, which made reading a corpus quadratic. Reference counting still frees what dies.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


_CSafeLoader: Any = getattr(yaml, "CSafeLoader", None)  # None: PyYAML built without libyaml


if _CSafeLoader is not None:

    class _Composer(_CSafeLoader):
        """libyaml's safe loader, composing without two Python calls per node: its composer
        calls ``descend_resolver(parent, index)`` and ``ascend_resolver()`` around every node
        for path resolvers, which return at once when none is registered (none is: see
        :func:`_loader`). Here they are C callables that do nothing (a class attribute that is
        a type does not bind ``self``): ``slice`` makes a throwaway object, ``tuple`` returns
        the empty tuple."""

        descend_resolver = slice
        ascend_resolver = tuple


def _loader(text: str) -> Any:
    """A libyaml loader of ``text`` (PyYAML's own when someone registered a path resolver),
    resolving tags by :func:`_tag_resolver` and counting its nodes as it does (``composed``)."""
    if _Composer.yaml_path_resolvers:
        return _CSafeLoader(text)
    loader = _Composer(text)
    loader.resolve, loader.composed = _tag_resolver(_Composer)
    return loader


def _tag_resolver(loader_class: Any) -> tuple[Callable[..., Any], Callable[[], int]]:
    """``Resolver.resolve`` for a loader of ``loader_class`` without path resolvers, and how
    many nodes it was called for (every node but an alias and one whose tag is written).

    PyYAML's ``resolve`` is a method: each call reads the loader's attributes through a long
    class chain, and it concatenates two lists of patterns before it tries them. Most nodes of
    a case file need none of that (nineteen in twenty here: a collection, a quoted scalar, a
    plain one whose first character no pattern is registered for), so they get the default tag
    at once; any other node gets PyYAML's own answer (it reads only class attributes). An
    instance attribute: libyaml's composer looks ``resolve`` up on the loader, and a function
    there is called as it is (the count is a closure cell, not an attribute to write).

    Examples:
        >>> resolve, composed = _tag_resolver(yaml.SafeLoader)
        >>> resolve(yaml.ScalarNode, "12", (True, False)), resolve(yaml.ScalarNode, "ab", (True, False))
        ('tag:yaml.org,2002:int', 'tag:yaml.org,2002:str')
        >>> resolve(yaml.MappingNode, None, True), composed()
        ('tag:yaml.org,2002:map', 3)
    """  # noqa: E501
    resolvers = loader_class.yaml_implicit_resolvers  # as PyYAML reads it: when the loader is made
    pyyaml = loader_class.resolve  # a function: called with the class, whose attributes it reads
    scalar, sequence = yaml.ScalarNode, yaml.SequenceNode
    scalar_tag, sequence_tag = loader_class.DEFAULT_SCALAR_TAG, loader_class.DEFAULT_SEQUENCE_TAG
    mapping_tag = loader_class.DEFAULT_MAPPING_TAG
    nodes = 0

    def resolve(kind: Any, value: Any, implicit: Any) -> Any:
        nonlocal nodes
        nodes += 1
        if kind is scalar:
            if implicit[0] and (value[:1] in resolvers or None in resolvers):
                return pyyaml(loader_class, kind, value, implicit)
            return scalar_tag
        return sequence_tag if kind is sequence else mapping_tag

    def composed() -> int:
        return nodes

    return resolve, composed


_CLoader = _CSafeLoader  # the fast path runs when PyYAML has libyaml
#: Text libyaml reads where PyYAML refuses it: tabs, and a block scalar header running into a
#: comment (``>#``). Such documents go to the Python loader (:func:`_lenient` asks this).
_LENIENT = re.compile(r"\t|[|>][-+0-9]*#")
_BLOCK_HEADER_COMMENT = re.compile(r"[|>][-+0-9]*#")  # _LENIENT without its tab
_NODE_EVENTS = (yaml.ScalarEvent, yaml.SequenceStartEvent, yaml.MappingStartEvent, yaml.AliasEvent)
_OPEN_EVENTS = (yaml.SequenceStartEvent, yaml.MappingStartEvent)
_CLOSE_EVENTS = (yaml.SequenceEndEvent, yaml.MappingEndEvent)


def _parse_fast(text: str) -> tuple[Any, Any] | None:
    """``parse_yaml`` through libyaml, or None when the Python loader must decide.

    The C parser first counts the events without building anything (an upper bound on the
    nodes); only a document with more than ``MAX_YAML_NODES`` events is scanned again event by
    event to count its nodes exactly, refusing where the Python composer would. libyaml refuses
    nesting deeper than 1,000 itself, so its composer's recursion is bounded. A document
    without anchors is a tree: it is built by :func:`_build_tree`, which checks the depth and
    the keys on the way; anything else (anchors, merge keys, other tags) is checked by
    :func:`_check_graph` and built by PyYAML's safe constructor, on the same nodes. Any YAML
    error, a control character (the Python reader's check) and any refusal other than the node
    count return None: the Python loader then gives its own message.
    """
    if _CLoader is None or _lenient(text) or yaml.reader.Reader.NON_PRINTABLE.search(text):
        return None
    loader = _loader(text)
    try:
        events = loader.raw_parse()
    except yaml.YAMLError:
        return None
    finally:
        loader.dispose()
    if events > MAX_YAML_NODES and not _count_nodes(text):
        return None
    loader = _loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, None
        if "&" not in text:  # no anchor, so no alias: the graph is a tree
            try:
                return _build_tree(node, loader, 1, False), node
            except _Fallback:
                pass
        if "?" in text or "!" in text:  # what _build_tree checks node by node (see there)
            return None
        _check_graph(node)
        return loader.construct_document(node), node
    except (yaml.YAMLError, YAMLInputError, RecursionError, ValueError, OverflowError):
        return None
    finally:
        loader.dispose()


def _lenient(text: str) -> bool:
    """``_LENIENT.search(text)``, without running the pattern over text that has neither a tab
    nor a ``|`` or ``>`` (most case files): substring tests are a scan at memory speed, the
    pattern tries its alternatives at every character."""
    if "\t" in text:
        return True
    return ("|" in text or ">" in text) and _BLOCK_HEADER_COMMENT.search(text) is not None


def _count_nodes(text: str) -> bool:
    """Count the nodes event by event (nothing kept); False on a YAML error.

    Raises:
        YAMLInputError: more than ``MAX_YAML_NODES`` nodes, at the line the Python composer
            names.
    """
    scan = _loader(text)
    try:
        nodes = 0
        while scan.check_event():
            event = scan.get_event()
            if isinstance(event, _NODE_EVENTS):
                nodes += 1
                if nodes > MAX_YAML_NODES:
                    raise YAMLInputError(
                        f"YAML has more than {MAX_YAML_NODES:,} values; split the file",
                        event.start_mark.line + 1 if event.start_mark else None,
                    )
    except yaml.YAMLError:
        return False
    finally:
        scan.dispose()
    return True


class _Fallback(Exception):
    """The tree holds something :func:`_build_tree` leaves to PyYAML's constructor."""


_STR, _SEQ, _MAP = (f"tag:yaml.org,2002:{kind}" for kind in ("str", "seq", "map"))
#: Plain scalars built by PyYAML's own constructor functions (a str is its node's value).
_SCALARS = {
    f"tag:yaml.org,2002:{kind}": yaml.SafeLoader.yaml_constructors[f"tag:yaml.org,2002:{kind}"]
    for kind in ("null", "bool", "int", "float", "timestamp")
}


def _build_tree(
    node: yaml.ScalarNode | yaml.CollectionNode, constructor: Any, level: int, flow: bool
) -> Any:
    """What ``construct_document`` builds from a tree of plain strings, numbers, booleans,
    nulls, dates, lists and mappings with scalar keys; checks the depth and the keys on the
    way (as :func:`_check_graph` would). ``flow``: inside ``[ ]`` or ``{ }``.

    Raises:
        _Fallback: deeper than ``MAX_YAML_DEPTH``, a key given twice (or two keys that build
            the same value), a merge key, a non-scalar key, any other tag, a '?' in an
            unquoted scalar inside ``[ ]`` or ``{ }`` (libyaml reads it, PyYAML refuses it) or
            an empty scalar tagged ``!`` (libyaml builds '', PyYAML None).
    """
    if level > MAX_YAML_DEPTH:
        raise _Fallback
    kind, tag = type(node), node.tag
    if isinstance(node, yaml.ScalarNode):
        if flow and not node.style and "?" in node.value:  # plain: None, or "" from libyaml
            raise _Fallback
        if tag == _STR:
            if not node.value and not node.style:  # a bare '!': libyaml says '', PyYAML None
                raise _Fallback
            return node.value
        build = _SCALARS.get(tag)
        if build is None:
            raise _Fallback
        return build(constructor, node)
    level += 1
    flow = flow or bool(node.flow_style)
    # Most children are non-empty plain strings: taken here without a call (two calls in three
    # on a case file), exactly as the scalar branch above would take them: a non-empty str,
    # without a '?' when unquoted inside brackets, not too deep.
    inline = level <= MAX_YAML_DEPTH
    if kind is yaml.SequenceNode and tag == _SEQ:
        return [
            child.value
            if inline
            and type(child) is _SCALAR
            and child.tag == _STR
            and child.value
            and (not flow or child.style or "?" not in child.value)
            else _build_tree(child, constructor, level, flow)
            for child in node.value
        ]
    if kind is not yaml.MappingNode or tag != _MAP:
        raise _Fallback
    mapping = {}
    for key, value in node.value:
        if type(key) is not _SCALAR or key.tag not in _KEY_TAGS:
            raise _Fallback
        if (
            inline
            and key.tag == _STR
            and key.value
            and (not flow or key.style or "?" not in key.value)
        ):
            built_key = key.value
        else:
            built_key = _build_tree(key, constructor, level, flow)
        if (
            inline
            and type(value) is _SCALAR
            and value.tag == _STR
            and value.value
            and (not flow or value.style or "?" not in value.value)
        ):
            mapping[built_key] = value.value
        else:
            mapping[built_key] = _build_tree(value, constructor, level, flow)
    if len(mapping) != len(node.value):
        raise _Fallback
    return mapping


_SCALAR = yaml.ScalarNode
_KEY_TAGS = frozenset({_STR, *_SCALARS})


def _parse_python(text: str) -> tuple[Any, Any]:
    """``parse_yaml`` through the pure-Python loader: the reference for every refusal."""
    try:
        loader = _BoundedLoader(text)  # the reader rejects control characters right here
    except yaml.YAMLError as exc:
        raise _yaml_problem(exc, text) from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None, None
        _check_graph(node)
        return loader.construct_document(node), node
    except yaml.YAMLError as exc:
        raise _yaml_problem(exc, text) from None
    except RecursionError:
        raise YAMLInputError("YAML nesting too deep") from None
    except (ValueError, OverflowError) as exc:  # the constructor: 2026-02-30, a 5000-digit int
        raise YAMLInputError(f"YAML value cannot be read: {exc}") from None
    finally:
        loader.dispose()


def _yaml_problem(exc: yaml.YAMLError, text: str) -> YAMLInputError:
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "invalid YAML"
        return YAMLInputError(
            f"YAML syntax error: {_plain(problem, exc.context or '')}",
            mark.line + 1 if mark else None,
            mark.column + 1 if mark else None,
        )
    if isinstance(exc, yaml.reader.ReaderError):
        line = text.count("\n", 0, max(exc.position, 0)) + 1
        return YAMLInputError(f"YAML error: character #x{exc.character:04x}: {exc.reason}", line)
    return YAMLInputError(f"YAML error: {exc}")


#: PyYAML's wording -> what it means and what to do, for the mistakes people make by hand.
_PLAIN = (
    ("found character '\\t'", "a tab character; YAML indents with spaces only: replace the tab"),
    (
        "mapping values are not allowed",
        "a ': ' where YAML did not expect a key; quote the text (\"...\") if it contains ': ', "
        "or fix the indentation of this line",
    ),
    (
        "could not find expected ':'",
        "a line that is neither 'key: value' nor a '- ' list item; add the ':' or quote the text",
    ),
    (
        "expected <block end>",
        "this line's indentation does not match the lines above; align it with its siblings",
    ),
    (
        "did not find expected key",
        "this line's indentation does not match the lines above; align it with its siblings",
    ),
    (
        "did not find expected '-' indicator",
        "a list item is not indented like the items above; start each item with '- ' at the "
        "same column",
    ),
    (
        "found unexpected end of stream",
        "the file ends inside a quoted string or a [ ] / { } list; close it",
    ),
    ("expected ',' or ']'", "a [ list is not closed with ], or its items lack a ','"),
    ("expected ',' or '}'", "a { mapping is not closed with }, or its items lack a ','"),
    ("found undefined alias", "a *name alias without an &name anchor before it; define it"),
    (
        "found unknown escape character",
        "a backslash escape YAML does not know inside \"...\"; use '...' or write \\\\",
    ),
)


def _plain(problem: str, context: str) -> str:
    """PyYAML's message in plain words, with what to do; unknown ones kept as they are."""
    for needle, plain in _PLAIN:
        if needle in problem or needle in context:
            return plain
    return f"{problem}; check the indentation and quoting on this line"


def _check_graph(root: yaml.Node) -> None:
    """Refuse recursive aliases, deep nesting and alias bombs, without recursion."""
    sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded nodes, depth)
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, leaving = stack.pop()
        key = id(node)
        children = _child_nodes(node)
        if not leaving and isinstance(node, yaml.MappingNode):
            _check_keys(node)
        if leaving:
            on_path.discard(key)
            size = 1 + sum(sizes[id(c)][0] for c in children)
            depth = 1 + max((sizes[id(c)][1] for c in children), default=0)
            line = node.start_mark.line + 1
            if depth > MAX_YAML_DEPTH:
                raise YAMLInputError(f"YAML nested deeper than {MAX_YAML_DEPTH} levels", line)
            if size > MAX_YAML_NODES:
                raise YAMLInputError(
                    f"YAML expands to more than {MAX_YAML_NODES:,} values through anchors and "
                    "aliases (an alias bomb?); write the data out or share less",
                    line,
                )
            sizes[key] = (size, depth)
            continue
        if key in sizes:
            continue
        on_path.add(key)
        stack.append((node, True))
        for child in children:
            if id(child) in on_path:
                line = child.start_mark.line + 1
                raise YAMLInputError("a YAML alias refers to a node that contains it", line)
            if id(child) not in sizes:
                stack.append((child, False))


def _child_nodes(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _check_keys(node: yaml.MappingNode) -> None:
    """Refuse a mapping that gives one scalar key twice (merge keys ``<<`` may override)."""
    first: dict[tuple[str, str], int] = {}
    for key, _ in node.value:
        if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
            continue
        ident = (key.tag, key.value)
        line = key.start_mark.line + 1
        if ident in first:
            shown = key.value if len(key.value) <= 60 else key.value[:57] + "..."
            raise YAMLInputError(
                f"duplicate key {shown!r} (lines {first[ident]} and {line}): YAML would keep "
                "only the last; remove one",
                line,
            )
        first[ident] = line


class _BoundedLoader(yaml.SafeLoader):
    """The safe loader, counting nodes as it composes them: a huge flat document is refused at
    ``MAX_YAML_NODES`` instead of being held in memory whole first."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._composed = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._composed += 1
        if self._composed > MAX_YAML_NODES:
            mark = self.peek_event().start_mark
            raise YAMLInputError(
                f"YAML has more than {MAX_YAML_NODES:,} values; split the file", mark.line + 1
            )
        return super().compose_node(parent, index)


def compose_text(text: str) -> Any:
    """``yaml.compose(text, Loader=yaml.SafeLoader)``, through libyaml when it reads ``text`` as
    PyYAML does (no tab, no control character, no block header running into a comment): the
    same nodes, and marks whose indices are characters of ``text`` (what a splice cuts).

    For text evalkit edits in place (reviewing, recording fixtures): a file of thousands of
    cases is composed in a fraction of the pure-Python composer's time.

    Raises:
        yaml.YAMLError: the pure-Python loader's error, when the text does not compose.
    """
    with paused_gc():
        if _fast_reads(text):
            try:
                return yaml.compose(text, Loader=_CLoader)
            except yaml.YAMLError:
                pass  # the Python loader's error is the one to report
        return yaml.compose(text, Loader=yaml.SafeLoader)


def load_text(text: str) -> Any:
    """``yaml.safe_load(text)``: :func:`parse_yaml`'s data (libyaml, the collector paused),
    or PyYAML's own reading of a document that one refuses (a key given twice, too large).

    Raises:
        yaml.YAMLError: the pure-Python loader's error.
    """
    try:
        return parse_yaml(text)[0]
    except YAMLInputError:
        return yaml.safe_load(text)


def _fast_reads(text: str) -> bool:
    return (
        _CLoader is not None
        and not _lenient(text)
        and not yaml.reader.Reader.NON_PRINTABLE.search(text)
    )

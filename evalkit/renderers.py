"""Jupyter's HTML for evalkit's records, found by one dispatch on the ground floor.

The decision's records (`GateDecision`, `Comparison`) know nothing of how they are drawn: their
``_repr_html_`` calls `html_for`, which looks up the renderer registered for the record's type.
`evalkit.report`, the presentation package, registers its renderers (as ``"module:function"``
names, so registering imports nothing heavy) when it is imported, and `html_for` imports it
the first time a record is shown. The decision side never names its presentation, and the
import graph keeps running one way.

Examples:
    >>> class Note:
    ...     pass
    >>> register_html(f"{Note.__module__}.{Note.__qualname__}", "builtins:type")
    >>> html_for(Note()) == str(Note)
    True
"""

from __future__ import annotations

import importlib
from html import escape
from typing import Any

#: The package that registers renderers when imported.
PRESENTATION = "evalkit.report"

#: "module.QualName" of a record type -> "module:function" that returns its HTML.
_RENDERERS: dict[str, str] = {}


def register_html(record: str, renderer: str) -> None:
    """Draw instances of ``record`` (a type's ``module.QualName``) with ``renderer``
    (``"module:function"``, called with the instance, returning HTML)."""
    _RENDERERS[record] = renderer


def _renderer_for(kind: type) -> str | None:
    for base in kind.__mro__:
        found = _RENDERERS.get(f"{base.__module__}.{base.__qualname__}")
        if found:
            return found
    return None


def html_for(record: Any) -> str:
    """``record``'s HTML from its registered renderer; its escaped ``repr`` if none is."""
    target = _renderer_for(type(record))
    if target is None:
        importlib.import_module(PRESENTATION)
        target = _renderer_for(type(record))
    if target is None:
        return f"<pre>{escape(repr(record))}</pre>"
    module, function = target.split(":")
    return str(getattr(importlib.import_module(module), function)(record))

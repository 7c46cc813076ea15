"""An ``expect`` list as a person writes it: short forms expanded by the scorer registry
(``- contains: refund`` is ``{scorer: contains, args: {text: refund}}``), and a missing,
misspelled or empty ``expect`` or an unknown scorer refused at its line with what to write.

Examples:
    >>> expand_short_forms(["exact", {"contains": "refund"}], "cases/a.yaml", None, "a")
    [{'scorer': 'exact', 'args': {}}, {'scorer': 'contains', 'args': {'text': 'refund'}}]
    >>> suggest("contans", ["contains", "regex"])
    " (did you mean 'contains'?)"
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Iterable
from typing import Any

from evalkit.corpus.case_spec import CaseSpec
from evalkit.corpus.yaml_nodes import node_line
from evalkit.errors import CorpusError
from evalkit.scorers import SCORERS
from evalkit.scorers.registry import factory_signature

_EXPECT_EXAMPLE = "e.g. expect: [{contains: refund}] (`evalkit scorers list` shows the scorers)"


def quoted(value: Any) -> str:
    """``repr`` of a name for an error message, clipped to stay readable."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_expect(raw: dict[str, Any], node: Any, rel: str, line: int, case_id: str) -> None:
    """A missing, misspelled or empty ``expect`` gets its own message (a case without one
    checks nothing)."""
    expect = raw.get("expect")
    if "expect" not in raw:
        unknown = [str(k) for k in raw if k not in CaseSpec.model_fields]
        typo = difflib.get_close_matches("expect", unknown, n=1, cutoff=0.6)
        if typo:
            raise CorpusError(
                f"{typo[0]!r} is not a field: did you mean 'expect'? Rename it; expect lists "
                "the properties the reply must have",
                path=rel,
                line=node_line(node, [typo[0]]) or line,
                case_id=case_id,
            )
        raise CorpusError(
            f"no expect: a case must say what the reply must have, {_EXPECT_EXAMPLE}",
            path=rel,
            line=line,
            case_id=case_id,
        )
    if expect is None or expect == []:
        raise CorpusError(
            f"expect is empty: list at least one scorer, {_EXPECT_EXAMPLE}",
            path=rel,
            line=node_line(node, ["expect"]) or line,
            case_id=case_id,
        )


def expand_short_forms(expect: Any, rel: str, node: Any, case_id: str) -> Any:
    """``- contains: refund`` → ``{scorer: contains, args: {text: refund}}``."""
    if not isinstance(expect, list):
        return expect
    expanded = []
    for position, entry in enumerate(expect):
        if isinstance(entry, str):
            entry = {entry: {}}
        if isinstance(entry, dict) and "scorer" not in entry and len(entry) == 1:
            name, value = next(iter(entry.items()))
            definition = SCORERS.get(name)
            if definition is None:
                line = _seq_item_line(node, "expect", position)
                hint = suggest(str(name), SCORERS)
                raise CorpusError(
                    f"unknown scorer {quoted(name)}{hint}", path=rel, line=line, case_id=case_id
                )
            if isinstance(value, dict) and (
                definition.primary is None or _accepts_all(definition.factory, value)
            ):
                entry = {"scorer": name, "args": value}
            elif value is None:
                entry = {"scorer": name}
            elif definition.primary is None:
                line = _seq_item_line(node, "expect", position)
                raise CorpusError(
                    f"scorer {name!r} has no short form; write {{scorer: {name}, args: {{...}}}}",
                    path=rel,
                    line=line,
                    case_id=case_id,
                )
            else:
                entry = {"scorer": name, "args": {definition.primary: value}}
        expanded.append(entry)
    return expanded


def _accepts_all(factory: Any, keys: Iterable[str]) -> bool:
    """Whether every key is an argument of the factory (any key, if it takes ``**kwargs``)."""
    params = factory_signature(factory).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return True
    return set(keys) <= set(params)


def _seq_item_line(node: Any, key: str, position: int) -> int | None:
    return node_line(node, [key, position])


def suggest(name: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""

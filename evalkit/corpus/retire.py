"""``evalkit cases retire``: a case leaves the gated corpus and keeps its history.

The case's lines move, as they are, from ``cases/FILE`` (or ``sealed/FILE``) to
``retired/FILE`` under the corpus root, with ``provenance.note`` saying when, by whom and why.
Runs load only ``cases/`` (and ``sealed/`` when asked), so a retired case is no longer run or
gated; its file stays in the repository and its stored results stay in the store under its id
(``load_corpus(root, case_dirs=("retired",))`` reads the retired cases back). Retiring it again
is an error; moving it back is moving its lines back.

Examples:
    >>> text = "# billing\\n- id: a\\n  input: {vars: {m: 1}}\\n  expect: [json_valid]\\n\\n" \\
    ...        "- id: b\\n  input: {vars: {m: 2}}\\n  expect: [json_valid]\\n"
    >>> kept, moved = cut_case(text, "a", "cases/billing.yaml")
    >>> print(kept)
    # billing
    - id: b
      input: {vars: {m: 2}}
      expect: [json_valid]
    <BLANKLINE>
    >>> print(moved)
    - id: a
      input: {vars: {m: 1}}
      expect: [json_valid]
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from evalkit.corpus.cases import load_corpus
from evalkit.corpus.fixture_files import CaseEdit, content_end, rewrite_text, write_atomically
from evalkit.errors import CorpusError

RETIRED_DIR = "retired"
_HEADER = "# Retired cases (`evalkit cases retire`): never run or gated; their results stay.\n"


@dataclass(frozen=True)
class Retired:
    """A retired case: its id, the file it left and the file it is in now."""

    case_id: str
    source: str
    target: str


def retire_cases(
    root: str | Path, ids: Sequence[str], reason: str, who: str | None = None
) -> list[Retired]:
    """Move the cases ``ids`` to ``retired/``, noting the reason (see the module docstring).

    Raises:
        CorpusError: an unknown id, an empty reason, or a layout this cannot cut safely.
    """
    reason = " ".join(reason.split())
    if not reason:
        raise CorpusError("--reason says why the case retires; it is empty")
    corpus = load_corpus(root, sealed=True)
    by_id = {case.id: case for case in corpus.cases}
    done = []
    for case_id in dict.fromkeys(ids):
        case = by_id.get(case_id)
        if case is None:
            raise CorpusError(
                f"no case with this id in {corpus.root}/cases or sealed", case_id=case_id
            )
        rel = case.source.rpartition(":")[0]
        source = corpus.root / rel
        text = source.read_bytes().decode("utf-8")
        kept, moved = cut_case(text, case_id, rel)
        target = corpus.root / RETIRED_DIR / Path(rel).name
        target.parent.mkdir(parents=True, exist_ok=True)
        old = target.read_text(encoding="utf-8") if target.exists() else _HEADER
        note = f"retired {dt.date.today().isoformat()}{f' by {who}' if who else ''}: {reason}"
        retired = old.rstrip("\n") + "\n\n" + moved + "\n"
        updates = {"note": note}
        if not case.provenance.get("date"):  # a provenance needs its date
            updates["date"] = dt.date.today().isoformat()
        retired = rewrite_text(retired, [CaseEdit(case_id, provenance=updates)], rel)
        write_atomically(target, retired)
        if yaml.safe_load(kept):
            write_atomically(source, kept)
        else:
            source.unlink()  # its last case left: a file of no cases would only warn
        done.append(Retired(case_id, rel, f"{RETIRED_DIR}/{target.name}"))
    return done


def cut_case(text: str, case_id: str, rel: str) -> tuple[str, str]:
    """(``text`` without the case's lines, those lines): from its ``- `` to its last line."""
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    items = [i for i in getattr(root, "value", []) if isinstance(i, yaml.MappingNode)]
    for item in items:
        key = next((v for k, v in item.value if k.value == "id"), None)
        if getattr(key, "value", None) != case_id:
            continue
        if item.flow_style:
            raise CorpusError(
                "the case is one flow mapping ({...}); move it to retired/ by hand",
                path=rel,
                line=item.start_mark.line + 1,
                case_id=case_id,
            )
        start = text.rfind("\n", 0, item.start_mark.index) + 1  # the line of its "- "
        end = content_end(text, item)
        after = end + 1 if text[end : end + 1] == "\n" else end
        while text[after : after + 1] == "\n":  # the blank lines that separated it
            after += 1
        kept, moved = text[:start] + text[after:], text[start:end]
        before = yaml.safe_load(text)
        expected = [c for c in before if not (isinstance(c, dict) and c.get("id") == case_id)]
        if (yaml.safe_load(kept) or []) != expected or yaml.safe_load(moved) != [
            c for c in before if isinstance(c, dict) and c.get("id") == case_id
        ]:
            raise CorpusError(
                "cutting this case would change others (an unusual layout); move it by hand",
                path=rel,
                case_id=case_id,
            )
        return kept, moved
    raise CorpusError("case not found in this file", path=rel, case_id=case_id)

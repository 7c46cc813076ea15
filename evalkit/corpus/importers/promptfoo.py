"""``evalkit cases import promptfoo CONFIG``: a ``promptfooconfig.yaml`` and its tests as draft
cases.

Tests come inline or from ``file://`` lists (YAML, JSON or JSONL, globs allowed), each merged
over ``defaultTest`` (its ``vars`` and ``assert``). A test's vars become the case's
``input.vars``; its prompts are written to ``prompts/promptfoo_N.md`` (evalkit renders vars
through ``system.user_template``). Assertions map onto evalkit scorers (:data:`ASSERTIONS`);
``llm-rubric`` writes a rubric file for the ``judge`` scorer; ``javascript`` and ``python`` are
refused (evalkit runs no code from a case's expectations), and every other type is counted.

A config is someone else's file: it reads only inside its own folder. A ``file://`` reference
that leaves it (``../``, an absolute path, a glob match or a symlink that lands outside) is
refused by name unless the caller trusts the config (``allow_outside``, ``--allow-outside``).

Examples:
    >>> assertion_scorers({"type": "icontains", "value": "refund"}, {})
    [{'scorer': 'contains', 'args': {'text': 'refund', 'ignore_case': True}}]
    >>> assertion_scorers({"type": "not-regex", "value": "(?i)password"}, {})
    [{'scorer': 'forbidden_regex', 'args': {'pattern': '(?i)password'}}]
"""

from __future__ import annotations

import contextlib
import glob
import json
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalkit.corpus.importers.draft_cases import DraftCase, ImportResult, content_hash, slug
from evalkit.corpus.json_input import MAX_DOCUMENT_BYTES, json_lines
from evalkit.corpus.messages import render_template
from evalkit.corpus.yaml_files import read_yaml_file
from evalkit.corpus.yaml_input import YAMLInputError, parse_yaml
from evalkit.errors import CorpusError

_TEXT = {"contains": False, "icontains": True}
REFUSED = {
    "javascript": "refused: evalkit runs no JavaScript from a case; write the check as a scorer "
    "(`evalkit scorers list` shows them) or a scorer module",
    "python": "refused: evalkit runs no inline Python from a case; write the check as a scorer "
    "module (scorers: in evalkit.yaml)",
}
_RUBRIC = """# {title}

Imported from a promptfoo llm-rubric assertion. Grade the final answer against this rubric:

{text}

Score levels:
1: Does not meet the rubric at all.
2: Meets a small part of the rubric.
3: Meets about half of the rubric.
4: Meets the rubric with minor gaps.
5: Fully meets the rubric.
"""


def assertion_scorers(assertion: Mapping[str, Any], files: dict[str, str]) -> list[dict] | None:
    """The evalkit scorers for one promptfoo assertion, or None when none fits.

    Side files a scorer needs (a rubric, a schema) are added to ``files``.
    """
    kind, value = str(assertion.get("type", "")), assertion.get("value")
    negated = kind.startswith("not-")
    base = kind.removeprefix("not-")
    if isinstance(value, str) and value.startswith("file://"):
        return None
    if base in _TEXT and isinstance(value, str | int | float):
        name = "not_contains" if negated else "contains"
        return [{"scorer": name, "args": {"text": str(value), "ignore_case": _TEXT[base]}}]
    if base in ("contains-all", "icontains-all") and isinstance(value, list) and not negated:
        ignore = base.startswith("i")
        return [
            {"scorer": "contains", "args": {"text": str(v), "ignore_case": ignore}} for v in value
        ]
    if base in ("contains-any", "icontains-any") and isinstance(value, list) and value:
        pattern = "|".join(re.escape(str(v)) for v in value)
        args = {"pattern": pattern, "flags": "i" if base.startswith("i") else ""}
        return [{"scorer": "forbidden_regex" if negated else "regex", "args": args}]
    if base == "regex" and isinstance(value, str):
        return [{"scorer": "forbidden_regex" if negated else "regex", "args": {"pattern": value}}]
    if base == "starts-with" and isinstance(value, str) and not negated:
        return [{"scorer": "regex", "args": {"pattern": r"\A\s*" + re.escape(value)}}]
    if negated:
        return None
    if base == "equals" and value is not None:
        text = value if isinstance(value, str) else json.dumps(value)
        return [{"scorer": "exact", "args": {"text": text}}]
    if base in ("is-json", "contains-json"):
        if not value:
            return [{"scorer": "json_valid", "args": {}}]
        schema = value if isinstance(value, Mapping) else _loads(value)
        if not isinstance(schema, Mapping):
            return None
        rel = f"schemas/promptfoo_{_digest(schema)}.json"
        files[rel] = json.dumps(schema, indent=2) + "\n"
        return [{"scorer": "json_schema", "args": {"schema": rel}}]
    if base == "llm-rubric" and isinstance(value, str) and value.strip():
        rel = f"rubrics/promptfoo_{_digest(value)}.md"
        files[rel] = _RUBRIC.format(title=slug(value, 6) or "rubric", text=value.strip())
        return [{"scorer": "judge", "args": {"rubric": rel}}]
    if base == "similar" and isinstance(value, str):
        threshold = float(assertion.get("threshold", 0.75))  # promptfoo's default threshold
        return [{"scorer": "similar", "args": {"reference": value, "threshold": threshold}}]
    return None


@dataclass(frozen=True)
class _Folder:
    """Where a config's ``file://`` references may lead: inside ``root`` unless trusted."""

    config: Path
    root: Path
    allow_outside: bool

    def ref(self, ref: str) -> Path:
        """The path a ``file://`` reference names, relative to the config's folder."""
        if not ref.startswith("file://"):
            raise CorpusError(f"expected a file:// reference, got {ref[:60]!r}", path=self.config)
        return self.config.parent / ref.removeprefix("file://")

    def inside(self, path: Path, ref: str) -> Path:
        """``path`` itself, once it (symlinks followed) is inside the config's folder."""
        if self.allow_outside or path.resolve().is_relative_to(self.root):
            return path
        raise CorpusError(
            f"{ref[:120]!r} reads {path.resolve()}, outside the config's folder {self.root}: "
            "refused (pass --allow-outside if you trust this config)",
            path=self.config,
        )


def import_promptfoo(config: str | Path, *, allow_outside: bool = False) -> ImportResult:
    """Read a promptfoo config and the tests it names into draft cases.

    Args:
        allow_outside: follow ``file://`` references out of the config's folder (a trusted
            config only: whatever they name is copied into the written cases).

    Raises:
        CorpusError: the config or a tests file is missing or not YAML/JSON of the right shape,
            or a reference leads outside the config's folder.
    """
    config = Path(config)
    data = _load(config)
    if not isinstance(data, Mapping):
        raise CorpusError(
            "a promptfoo config is a YAML mapping (prompts, providers, tests)", path=config
        )
    folder = _Folder(config, config.parent.resolve(), allow_outside)
    files: dict[str, str] = {}
    notes = list(_prompts(data.get("prompts"), folder, files))
    default = data.get("defaultTest") or {}
    if isinstance(default, str):
        default = _load(folder.inside(folder.ref(default), default))
    if not isinstance(default, Mapping):
        raise CorpusError("defaultTest is not a mapping (vars, assert)", path=config)
    mapped: Counter[str] = Counter()
    unmapped: Counter[str] = Counter()
    why = dict(REFUSED)
    cases = []
    for where, test in _tests(data.get("tests"), folder):
        variables = {**_field(default, "vars", dict, where), **_field(test, "vars", dict, where)}
        asserts = [*_field(default, "assert", list, where), *_field(test, "assert", list, where)]
        expect: list[Any] = []
        for assertion in asserts:
            kind = str(assertion.get("type", "?")) if isinstance(assertion, Mapping) else "?"
            rendered = _render_value(assertion, variables) if kind != "?" else {}
            scorers = assertion_scorers(rendered, files) if kind not in REFUSED else None
            if scorers is None:
                unmapped[kind] += 1
                why.setdefault(kind, "no evalkit scorer matches; write expect: by hand")
                continue
            mapped[f"{kind} -> {scorers[0]['scorer']}"] += 1
            expect.extend(s for s in scorers if s not in expect)
        if any(isinstance(v, list) for v in variables.values()):
            unmapped["vars with a list value"] += 1
            why["vars with a list value"] = "promptfoo expands a list into one test per value"
        if not expect:
            unmapped["test with no assertion evalkit can score"] += 1
            why.setdefault("test with no assertion evalkit can score", "not imported")
            continue
        description = test.get("description")
        cases.append(
            DraftCase(
                input={"vars": variables},
                expect=tuple(expect),
                source=where,
                notes=f"promptfoo test: {description}" if description else None,
                title=str(description) if description else None,
            )
        )
    if any("similar" in k for k in mapped):
        notes.append(
            "similar: evalkit's scorer compares token sets, not embeddings; check the threshold"
        )
    if any("contains-json" in k for k in mapped):
        notes.append("contains-json -> json_valid: evalkit wants the whole output to be JSON")
    return ImportResult(
        format="promptfoo",
        source=config,
        cases=tuple(cases),
        mapped=dict(mapped),
        unmapped=dict(unmapped),
        why=why,
        notes=tuple(notes),
        files=files,
    )


def _prompts(prompts: Any, folder: _Folder, files: dict[str, str]):
    items = prompts if isinstance(prompts, list) else [prompts] if prompts else []
    for n, prompt in enumerate(items, start=1):
        text = prompt.get("raw") if isinstance(prompt, Mapping) else prompt
        if isinstance(prompt, Mapping) and text is None:
            text = prompt.get("id")
        if not isinstance(text, str):
            continue
        if text.startswith("file://"):
            path = folder.inside(folder.ref(text), text)
            try:
                if path.stat().st_size > MAX_DOCUMENT_BYTES:
                    raise CorpusError("a prompt file larger than 16 MiB", path=path)
                text = path.read_text(encoding="utf-8")
            except OSError:
                yield f"prompt {n}: cannot read {path.name}; not written"
                continue
            except UnicodeDecodeError as exc:
                raise CorpusError(f"not UTF-8 text ({exc.reason})", path=path) from None
        rel = f"prompts/promptfoo_{n}.md"
        files[rel] = text if text.endswith("\n") else text + "\n"
        yield (
            f"prompt {n} -> {rel}: promptfoo sends it as the user message; in evalkit it is the "
            f"suite's system.user_template: {' '.join(text.split())[:80]!r}"
        )


def _tests(tests: Any, folder: _Folder):
    """(where, test) for every test, ``file://`` references read (globs expanded)."""
    items = [tests] if isinstance(tests, str | Mapping) else list(tests or [])
    for n, item in enumerate(items):
        if isinstance(item, Mapping):
            yield f"{folder.config.name}#{n}", item
            continue
        if not isinstance(item, str):
            raise CorpusError(
                f"tests[{n}] is neither a test nor a file:// reference", path=folder.config
            )
        pattern = str(folder.ref(item))
        paths = sorted(glob.glob(pattern)) if any(c in pattern for c in "*?[") else [pattern]
        for path in (folder.inside(Path(p), item) for p in paths):
            if path.suffix not in (".yaml", ".yml", ".json", ".jsonl"):
                raise CorpusError(
                    "only YAML, JSON and JSONL tests files are read; convert this one, or "
                    "import it with `evalkit cases import csv FILE --map ...`",
                    path=path,
                )
            loaded = _load(path)
            rows = loaded if isinstance(loaded, list) else [loaded]
            for m, test in enumerate(rows):
                if not isinstance(test, Mapping):
                    raise CorpusError(f"test {m} is not a mapping", path=path)
                yield f"{path.name}#{m}", test


def _field(test: Mapping[str, Any], name: str, kind: type, where: str) -> Any:
    """A test's ``vars`` (a mapping) or ``assert`` (a list); empty when absent."""
    value = test.get(name) or kind()
    if not isinstance(value, Mapping if kind is dict else list):
        raise CorpusError(f"{where}: {name} is not a {'mapping' if kind is dict else 'list'}")
    return value


def _render_value(assertion: Mapping[str, Any], variables: Mapping[str, Any]) -> dict[str, Any]:
    """promptfoo renders ``{{var}}`` in assertion values with the test's vars; so do we."""
    value = assertion.get("value")
    if isinstance(value, str) and "{{" in value:
        # a nunjucks expression beyond plain {{name}} is kept as written
        with contextlib.suppress(KeyError):
            value = render_template(value, dict(variables))
    return {**assertion, "value": value}


def _load(path: Path) -> Any:
    """A config or tests file: YAML (and JSON, which is YAML too) through the bounded loader
    (no alias bombs, no deep nesting, no duplicate keys), JSON Lines streamed."""
    if path.suffix == ".jsonl":
        return [value for _, value in json_lines(path)]
    return read_yaml_file(path, str(path), MAX_DOCUMENT_BYTES)[0]


def _loads(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return parse_yaml(value)[0]
    except YAMLInputError:
        return None


def _digest(value: Any) -> str:
    return content_hash(DraftCase(input={"value": value}, expect=(), source=""))[:8]

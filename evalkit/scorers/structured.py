"""Structured scorers: JSON validity, JSON Schema, expected JSON fields, one-of and numeric
closeness, deterministic like the text scorers they share helpers with.

Examples:
    >>> from evalkit.records import Output
    >>> from evalkit.scorers.registry import build_scorer
    >>> build_scorer("json_fields", {"fields": {"category": "billing"}})(
    ...     Output('{"category": "Billing"}'), None).passed
    True
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import yaml

from evalkit.records import Output, Score
from evalkit.scorers.deterministic import (  # the helpers every deterministic scorer shares
    _MISSING,
    _check_field_name,
    _check_json_value,
    _clip,
    _fail_without_value,
    _first_number,
    _json,
    _json_type,
    _lookup,
    _loose,
    _NoValue,
    _num,
    _same,
    _show,
    _text,
    _want,
)
from evalkit.scorers.registry import ScoreFn, ScorerArgError, check, scorer

if TYPE_CHECKING:
    import jsonschema


@scorer("json_valid")
def json_valid() -> ScoreFn:
    """Pass when the whole output is raw JSON (no code fence, no NaN/Infinity)."""

    @_fail_without_value
    def score(output: Output, case: object) -> Score:
        return check(True, f"valid JSON {_json_type(_json(output))}")

    return score


@scorer("json_schema", primary="schema", files=("schema",))
def json_schema(schema: Path) -> ScoreFn:
    """Validate the JSON output against a JSON Schema file (``.json``, or ``.yaml``/``.yml``).

    The schema's ``$schema`` picks the draft (2020-12 by default). ``format`` is an annotation, not
    asserted: which formats jsonschema checks depends on optional packages, so results would vary
    between machines.
    """
    _want("json_schema", "schema", schema, (str, Path), "a file path")
    validator = _load_validator(Path(schema))
    best_match = _jsonschema().exceptions.best_match

    @_fail_without_value
    def score(output: Output, case: object) -> Score:
        errors = list(validator.iter_errors(_json(output)))
        if not errors:
            return check(True, "matches schema")
        error = best_match(errors)
        return check(
            False, f"schema: {_clip(error.message, 160)} at {error.json_path}", errors=len(errors)
        )

    return score


@scorer("json_fields", primary="fields")
def json_fields(fields: dict[str, Any], normalize: bool = True) -> ScoreFn:
    """Each named field (dotted path, e.g. ``customer.id``; ``items.0`` indexes a list) of the JSON
    output equals its expected value. Strings compare casefolded and whitespace-collapsed when
    ``normalize``; numbers compare numerically (``1 == 1.0``; ``true`` is not ``1``). Score is the
    fraction of matching fields; passed only when all match."""
    _want("json_fields", "fields", fields, dict, "a mapping of field -> expected value")
    _want("json_fields", "normalize", normalize, bool, "true or false")
    if not fields:
        raise ScorerArgError("json_fields: fields is empty")
    for name, value in fields.items():
        _check_field_name("json_fields", name)
        _check_json_value("json_fields", f"fields.{name}", value)

    @_fail_without_value
    def score(output: Output, case: object) -> Score:
        data = _json(output)
        if not isinstance(data, dict):
            raise _NoValue(f"expected a JSON object, got {_json_type(data)}")
        wrong = []
        for name, want in fields.items():
            got = _lookup(data, name)
            if got is _MISSING:
                wrong.append(f"{name}: missing")
            elif not _same(want, got, normalize):
                wrong.append(f"{name}: expected {_show(want)}, got {_show(got)}")
        fraction = 1 - len(wrong) / len(fields)
        if not wrong:
            return check(True, f"all {len(fields)} fields match", fraction)
        more = f" (+{len(wrong) - 3} more)" if len(wrong) > 3 else ""
        return check(False, "; ".join(wrong[:3]) + more, fraction, mismatches=len(wrong))

    return score


@scorer("one_of", primary="options")
def one_of(options: list[Any], field: str | None = None, normalize: bool = True) -> ScoreFn:
    """Pass when the output (or its JSON ``field``) is one of ``options``. With ``normalize``, text
    compares as in ``normalized_match`` and field strings as in ``json_fields``."""
    _want("one_of", "options", options, list, "a list")
    _want("one_of", "normalize", normalize, bool, "true or false")
    _check_field_name("one_of", field)
    if not options:
        raise ScorerArgError("one_of: options is empty")
    for i, option in enumerate(options):
        if field is None:
            _want("one_of", f"options[{i}]", option, str, "a string (no field: given)")
        else:
            _check_json_value("one_of", f"options[{i}]", option)
    loose = {_loose(o) if normalize else o.strip() for o in options} if field is None else set()
    listing = _clip(", ".join(_show(o, 20) for o in options), 80)

    @_fail_without_value
    def score(output: Output, case: object) -> Score:
        if field is None:
            got: Any = _text(output)
            ok = (_loose(got) if normalize else got) in loose
        else:
            got = _json(output, field)
            ok = any(_same(option, got, normalize) for option in options)
        if ok:
            return check(True, f"{_show(got)} is one of {len(options)} options")
        return check(False, f"expected one of [{listing}], got {_show(got)}")

    return score


@scorer("numeric_close", primary="value")
def numeric_close(
    value: float, tolerance: float = 1e-6, relative: bool = False, field: str | None = None
) -> ScoreFn:
    """Pass when the output's number is within ``tolerance`` of ``value`` (``tolerance * |value|``
    when ``relative``). The number is the JSON ``field`` (which must be a JSON number) or else
    the first number in the text: ``1,234.5``, ``$12`` and ``-3e2`` are understood."""
    _want("numeric_close", "value", value, (int, float), "a number")
    _want("numeric_close", "tolerance", tolerance, (int, float), "a number")
    _want("numeric_close", "relative", relative, bool, "true or false")
    _check_field_name("numeric_close", field)
    if not tolerance >= 0:  # also rejects NaN
        raise ScorerArgError(f"numeric_close: tolerance must be >= 0, got {tolerance}")
    allowed = tolerance * abs(value) if relative else tolerance
    band = f"{_num(value)} ± {_num(tolerance)}" + (" (relative)" if relative else "")

    @_fail_without_value
    def score(output: Output, case: object) -> Score:
        if field is None:
            got = _first_number(_text(output))
        else:
            got = _json(output, field)
            if isinstance(got, bool) or not isinstance(got, int | float):
                raise _NoValue(f"field {field!r} is {_json_type(got)} {_show(got)}, not a number")
        if abs(got - value) <= allowed:
            return check(True, f"got {_num(got)}, within {band}", got=got)
        return check(False, f"got {_num(got)}, expected {band}", got=got)

    return score


def _jsonschema() -> ModuleType:
    """jsonschema, imported when a ``json_schema`` scorer is first bound (an import a corpus
    without one never pays).

    jsonschema imports the optional rfc3987_syntax (a Lark grammar built at import, seconds)
    only to check the "iri" format, which this scorer never asserts (formats are annotations,
    see json_schema). Marking it unavailable keeps every `evalkit` command and notebook kernel
    fast.
    """
    sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]
    import jsonschema
    import jsonschema.exceptions
    import jsonschema.validators

    return jsonschema


def _load_validator(path: Path) -> jsonschema.protocols.Validator:
    """The file's validator: read every time (an edit is seen), parsed and checked once per
    distinct content (a corpus of 500 cases naming one schema compiles it once)."""
    is_yaml = path.suffix.lower() in (".yaml", ".yml")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScorerArgError(f"json_schema: cannot read {path}: {exc.strerror}") from None
    validator, problem = _compiled(text, is_yaml)
    if problem is not None:
        raise ScorerArgError(f"json_schema: {problem.format(path=path)}")
    assert validator is not None
    return validator


@functools.lru_cache(maxsize=256)
def _compiled(text: str, is_yaml: bool) -> tuple[Any, str | None]:
    """(validator, None) for a schema's text, or (None, the problem with ``{path}`` in it)."""
    jsonschema = _jsonschema()
    try:
        schema = yaml.safe_load(text) if is_yaml else json.loads(text)
    except (ValueError, yaml.YAMLError) as exc:
        kind = "YAML" if is_yaml else "JSON"
        return None, "{path} is not valid " + kind + ": " + _clip(str(exc), 120).replace(
            "{", "{{"
        ).replace("}", "}}")
    if not isinstance(schema, dict):
        return None, "{path} must hold an object, got " + _json_type(schema)
    cls = jsonschema.validators.validator_for(schema)
    try:
        cls.check_schema(schema)
    except jsonschema.exceptions.SchemaError as exc:
        message = f"{_clip(exc.message, 120)} at {exc.json_path}"
        return None, "invalid schema {path}: " + message.replace("{", "{{").replace("}", "}}")
    return cls(schema), None

"""Hostile input: case files and suite configs holding anything at all.

Whatever a case file or ``evalkit.yaml`` holds — random YAML, binary junk, invalid UTF-8, 1 MB
strings, 10,000 levels of nesting, ``!!python/...`` tags, alias bombs — loading ends in a valid
load or one :class:`EvalkitError` whose message is a single line, and ``evalkit cases lint``
exits 0 or 2 with at most one stderr line. Never a traceback, never an exponential blow-up.
"""

from __future__ import annotations

import contextlib
import io
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evalkit.cli import main
from evalkit.corpus.cases import load_corpus
from evalkit.corpus.suite import load_suite
from evalkit.corpus.yaml_input import MAX_YAML_DEPTH
from evalkit.errors import ConfigError, CorpusError, EvalkitError
from evalkit.scorers import SCORERS

SUITE = b"""\
suite: hostile
system:
  model: demo-support-1
  base_url: http://127.0.0.1:9/v1
  user_template: "Customer: {{message}}"
"""
CASE = b"""\
- id: ok-001
  tags: [billing]
  provenance: {reviewer: lead, date: 2026-07-01}
  input:
    messages:
      - {role: user, content: "Refund order 8812"}
  expect:
    - {scorer: contains, args: {text: refund}}
    - json_schema: schemas/reply.json
- id: vars-001
  input: {vars: {message: "hello"}}
  expect: [json_valid, {max_words: 40}]
"""

# Deterministic examples (same every run) and no example database: a failure is reproducible.
HOSTILE = settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# --- strategies -------------------------------------------------------------------------------

_KEYS = [
    "id", "tags", "criticality", "provenance", "input", "messages", "vars", "role", "content",
    "fixtures", "tools", "documents", "expect", "scorer", "args", "notes", "suite", "system",
    "model", "provider", "prompt", "base_url", "sampling", "concurrency", "replays", "judge",
    "rate_limit", "critical_tags", "gate", "prices", "cache", "timeout_s", "max_retries",
]  # fmt: skip
_SCORER_NAMES = sorted(name for name in SCORERS if name != "embedding_similar")  # no model load
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=30)
    | st.dates()
    | st.sampled_from([*_SCORER_NAMES, "user", "must_pass", "schemas/reply.json", "../x", ""])
)
yaml_trees = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=5)
        | st.dictionaries(st.sampled_from(_KEYS) | st.text(max_size=10), children, max_size=5)
    ),
    max_leaves=30,
)
scorer_entries = (
    st.sampled_from(_SCORER_NAMES)
    | st.dictionaries(st.sampled_from(_SCORER_NAMES), yaml_trees, min_size=1, max_size=1)
    | st.fixed_dictionaries({"scorer": st.sampled_from(_SCORER_NAMES), "args": yaml_trees})
)
case_like = st.fixed_dictionaries(
    {
        "id": st.text(max_size=12) | st.just("ok-1") | scalars,
        "input": st.fixed_dictionaries(
            {
                "messages": st.lists(
                    st.fixed_dictionaries(
                        {"role": st.sampled_from(["user", "system", "robot"]), "content": scalars}
                    ),
                    max_size=2,
                )
            }
        )
        | st.fixed_dictionaries({"vars": yaml_trees})
        | yaml_trees,
        "expect": st.lists(scorer_entries, max_size=3) | yaml_trees,
    },
    optional={k: yaml_trees for k in ("tags", "criticality", "provenance", "fixtures", "notes")},
)
suite_like = st.fixed_dictionaries(
    {
        "suite": scalars,
        "system": st.fixed_dictionaries(
            {"model": scalars},
            optional={
                k: yaml_trees
                for k in ("provider", "prompt", "tools", "sampling", "timeout_s", "base_url")
            },
        )
        | yaml_trees,
    },
    optional={
        k: yaml_trees
        for k in ("concurrency", "replays", "critical_tags", "gate", "judge", "rate_limit")
    },
)
case_documents = st.lists(case_like | yaml_trees, max_size=3) | yaml_trees
junk_text = st.text(st.characters(codec=None, exclude_categories=["Cs"]), max_size=60)


@st.composite
def spliced(draw: st.DrawFn, base: bytes) -> bytes:
    """A valid file with random bytes or text dropped in at a random place."""
    at = draw(st.integers(0, len(base)))
    junk = draw(st.binary(max_size=20) | junk_text.map(lambda t: t.encode("utf-8", "replace")))
    return base[:at] + junk + base[at:]


def _dump(document: Any) -> bytes:
    return yaml.safe_dump(document, allow_unicode=True).encode("utf-8")


# --- helpers ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One directory per module; every example gets a fresh corpus below it."""
    return tmp_path_factory.mktemp("hostile")


def _corpus(base: Path, cases: bytes = CASE, suite: bytes = SUITE) -> Path:
    root = Path(tempfile.mkdtemp(dir=base))
    (root / "cases").mkdir()
    (root / "schemas").mkdir()
    (root / "schemas" / "reply.json").write_text('{"type": "object"}')
    (root / "cases" / "hostile.yaml").write_bytes(cases)
    (root / "evalkit.yaml").write_bytes(suite)
    return root


def _refused_or_loaded(load: Callable[[], Any], refusal: type[EvalkitError]) -> str | None:
    """Run ``load``; return the refusal message (asserting its shape) or None when it loaded."""
    try:
        load()
    except EvalkitError as exc:
        assert isinstance(exc, refusal), f"{type(exc).__name__}: {exc}"
        message = str(exc)
        assert len(message.splitlines()) == 1, repr(message)
        assert 0 < len(message) < 2000, message[:200]
        return message
    return None


def _lint(root: Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["cases", "lint", "--config", str(root / "evalkit.yaml")])
    return code, out.getvalue(), err.getvalue()


def _check_lint(root: Path) -> None:
    code, _, err = _lint(root)
    assert code in (0, 2), (code, err)
    lines = err.splitlines()
    errors = [line for line in lines if line.startswith("evalkit: error: ")]
    warnings = [line for line in lines if line.startswith("evalkit: warning: ")]
    # lint reports every problem in one pass (one line each, at most 50) and then a count
    summary = lines[len(errors) :] if len(errors) > 1 else []
    assert len(errors) <= 50 and len(lines) == len(errors) + len(warnings) + len(summary), err
    if len(errors) > 1:
        assert len(summary) == 1 and summary[0].endswith(
            "problems in the corpus; fix them and lint again"
        ), err
    if errors:
        assert code == 2 and lines[0].startswith("evalkit: error: "), err
    # exit 2 without a stderr line is lint's own verdict (a thin critical tag), printed on stdout


def _load_cases(root: Path) -> str | None:
    return _refused_or_loaded(lambda: load_corpus(root, user_template="{{message}}"), CorpusError)


def _load_suite(root: Path) -> str | None:
    return _refused_or_loaded(lambda: load_suite(root / "evalkit.yaml"), ConfigError)


# --- properties -------------------------------------------------------------------------------


def test_the_valid_fixture_loads(scratch: Path) -> None:
    """The base the mutations start from is valid, so refusals below are the mutation's doing."""
    root = _corpus(scratch)
    assert _load_cases(root) is None and _load_suite(root) is None
    assert len(load_corpus(root).cases) == 2
    assert _lint(root)[0] == 0


@HOSTILE
@given(document=case_documents)
def test_random_case_documents_load_or_refuse_in_one_line(scratch: Path, document: Any) -> None:
    _load_cases(_corpus(scratch, cases=_dump(document)))


@HOSTILE
@given(document=suite_like | yaml_trees)
def test_random_suite_configs_load_or_refuse_in_one_line(scratch: Path, document: Any) -> None:
    _load_suite(_corpus(scratch, suite=_dump(document)))


@settings(HOSTILE, max_examples=150)
@given(data=st.binary(max_size=400) | junk_text.map(lambda t: t.encode("utf-8", "replace")))
def test_binary_junk_and_control_characters(scratch: Path, data: bytes) -> None:
    root = _corpus(scratch, cases=data, suite=data)
    _load_cases(root)
    _load_suite(root)


@HOSTILE
@given(cases=spliced(CASE), suite=spliced(SUITE))
def test_valid_files_with_junk_spliced_in(scratch: Path, cases: bytes, suite: bytes) -> None:
    """Invalid UTF-8 and stray characters in the middle of otherwise valid files."""
    root = _corpus(scratch, cases=cases, suite=suite)
    _load_cases(root)
    _load_suite(root)


@settings(HOSTILE, max_examples=60)
@given(cases=case_documents.map(_dump) | spliced(CASE), suite=st.just(SUITE) | spliced(SUITE))
def test_cli_lint_exits_0_or_2_with_at_most_one_stderr_line(
    scratch: Path, cases: bytes, suite: bytes
) -> None:
    _check_lint(_corpus(scratch, cases=cases, suite=suite))


# --- the classic attacks, one by one ---------------------------------------------------------

_MB = 1_000_000
_CASE_WITH = b"- id: a\n  input: {messages: [{role: user, content: hi}]}\n  expect: [%s]\n"


def _bomb(levels: int = 9, width: int = 9, indent: bytes = b"") -> bytes:
    """Billion laughs: each anchor lists the previous one ``width`` times (width**levels)."""
    lines = [indent + b"l0: &l0 [" + b", ".join([b"lol"] * width) + b"]"]
    for i in range(1, levels):
        refs = b", ".join([b"*l%d" % (i - 1)] * width)
        lines.append(indent + b"l%d: &l%d [%s]" % (i, i, refs))
    return b"\n".join(lines) + b"\n"


HOSTILE_CASE_FILES: dict[str, tuple[bytes, str | None]] = {
    # name: (file content, expected fragment of the refusal, or None when it must load)
    "deep_brackets": (b"[" * 10_000, "nesting too deep"),
    "deep_braces": (b"{a: " * 10_000, "nesting too deep"),
    "deep_within_parser_limits": (
        b"- id: a\n  input: {vars: {message: " + b"[" * 300 + b"]" * 300 + b"}}\n  expect: [x]\n",
        f"deeper than {MAX_YAML_DEPTH} levels",
    ),
    "python_object_apply": (b"- !!python/object/apply:os.system ['true']\n", "constructor"),
    "python_name": (b"- id: !!python/name:os.system\n", "constructor"),
    "python_object_new": (b"!!python/object/new:os.system [true]\n", "constructor"),
    "python_module": (b"- !!python/module:os\n", "constructor"),
    "alias_bomb_top": (_bomb(), "alias bomb"),
    "alias_bomb_in_vars": (
        b"- id: a\n  input:\n    vars:\n      message: hi\n"
        + _bomb(indent=b"      ")
        + b"  expect: [json_valid]\n",
        "alias bomb",
    ),
    "recursive_alias": (
        b"- id: a\n  input:\n    vars: &v {message: hi, self: *v}\n  expect: [json_valid]\n",
        "contains it",
    ),
    "recursive_alias_in_args": (_CASE_WITH % b"{json_fields: &f {fields: {x: *f}}}", "contains it"),
    "huge_content_loads": (
        b"- id: a\n  input: {messages: [{role: user, content: '" + b"x" * _MB + b"'}]}\n"
        b"  expect: [json_valid]\n",
        None,
    ),
    "huge_id": (b"- id: '" + b"x" * _MB + b"'\n  input: {vars: {message: hi}}\n", "invalid id"),
    "huge_scorer_name": (_CASE_WITH % (b"x" * _MB), "unknown scorer"),
    "huge_key": (
        b"- id: a\n  input: {vars: {message: hi}}\n  expect: [json_valid]\n"
        b"  ? " + b"k" * _MB + b"\n  : 1\n",
        "unknown field",
    ),
    "huge_plain_scalar": (b"x" * _MB, "YAML list of cases"),
    "invalid_utf8": (b"- id: a\xff\xfe\n", "not UTF-8"),
    "utf16": ("- id: a\n".encode("utf-16"), "not UTF-8"),
    "nul_byte": (b"- id: a\x00\n", "character #x0000"),
    "newline_in_id": (b"- id: 'a\n\n  b'\n", "invalid id"),
    "impossible_date": (
        b"- id: a\n  provenance: {reviewer: x, date: 2026-02-30}\n",
        "cannot be read",
    ),
    "5000_digit_int": (b"- id: a\n  input: {vars: {message: " + b"9" * 5000 + b"}}\n", "digits"),
    "path_with_nul": (_CASE_WITH % b'{json_schema: "a\\0b"}', "not a usable path"),
    "path_outside_root": (_CASE_WITH % b"{json_schema: ../../../../etc/passwd}", "outside"),
    "absolute_path": (_CASE_WITH % b"{json_schema: /etc/passwd}", "relative to the corpus"),
    "regex_too_deep": (_CASE_WITH % (b"{regex: '" + b"(" * 5000 + b")" * 5000 + b"'}"), "regex"),
    "regex_huge_repeat": (_CASE_WITH % b"{regex: 'a{99999999999}'}", "regex"),
    "two_documents": (b"- id: a\n---\n- id: b\n", "another document"),
    "set_tag": (b"- id: a\n  input: {vars: !!set {message, b}}\n", "input.vars"),
}


def _cpu_to_load(root: Path) -> tuple[str | None, float]:
    started = time.process_time()  # CPU: a blow-up burns it; a loaded machine does not
    message = _load_cases(root)
    return message, time.process_time() - started


def _benign_cpu(scratch: Path, size: int) -> float:
    """CPU to load a plain case file of ``size`` bytes (a long note), best of three: the
    same-test yardstick a hostile file of that size is held to."""
    pad = max(size - len(CASE) - 16, 0)
    root = _corpus(scratch, cases=CASE + b"  notes: '" + b"x" * pad + b"'\n")
    return min(_cpu_to_load(root)[1] for _ in range(3))


def _cost_ratio(hostile_cpu: float, plain_cpu: float) -> float:
    """The hostile load's CPU over the plain one's, both measured in this test (the plain one
    floored at 1 ms: below that its process-time reading is mostly the loader's fixed cost)."""
    return hostile_cpu / max(plain_cpu, 0.001)


#: How many times a plain file's cost a hostile one of its size may take. The slowest refusal
#: (10,000 nested brackets) is ~600x; an expansion or backtracking blow-up is 10^4x and more.
HOSTILE_COST_RATIO = 5000


@pytest.mark.parametrize("name", sorted(HOSTILE_CASE_FILES))
def test_hostile_case_file(scratch: Path, name: str) -> None:
    content, expected = HOSTILE_CASE_FILES[name]
    root = _corpus(scratch, cases=content)
    marker = root / "pwned"
    message, elapsed = _cpu_to_load(root)
    if expected is None:
        assert message is None
    else:
        assert message is not None and expected in message, message
        assert message.startswith("cases/hostile.yaml"), message
    ratio = _cost_ratio(elapsed, _benign_cpu(scratch, len(content)))
    assert ratio < HOSTILE_COST_RATIO, f"{name}: {ratio:.0f}x the CPU of a plain file its size"
    assert not marker.exists()
    _check_lint(root)


def test_python_tags_never_execute(scratch: Path) -> None:
    """``!!python/object/apply`` is refused by the safe loader: the command never runs."""
    root = _corpus(scratch)
    marker = root / "pwned"
    attack = f"- !!python/object/apply:os.system ['touch {marker}']\n".encode()
    (root / "cases" / "hostile.yaml").write_bytes(attack)
    (root / "evalkit.yaml").write_bytes(
        f"!!python/object/apply:os.system ['touch {marker}']\n".encode()
    )
    assert "constructor" in (_load_cases(root) or "")
    assert "constructor" in (_load_suite(root) or "")
    assert not marker.exists()


def test_alias_bomb_is_refused_before_it_expands(scratch: Path) -> None:
    """9**9 (387 million) values behind 80 lines: refused in well under a second of work and a
    few MB, where a loader that walked the expansion would need minutes and gigabytes."""
    root = _corpus(scratch, suite=SUITE + b"gate:\n" + _bomb(indent=b"  "))
    root_cases = _corpus(
        scratch, cases=b"- id: a\n  fixtures:\n    tools:\n" + _bomb(indent=b"      ")
    )
    tracemalloc.start()
    try:
        suite_message = _load_suite(root)
        case_message = _load_cases(root_cases)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert suite_message is not None and "alias bomb" in suite_message
    assert case_message is not None and "alias bomb" in case_message
    assert peak < 50 * 2**20, f"peak {peak / 2**20:.0f} MB"


def test_shared_anchors_below_the_limit_still_load(scratch: Path) -> None:
    """Aliases themselves are fine: sharing a fixture between cases is ordinary YAML."""
    cases = b"""\
- id: a
  fixtures: {tools: &shared {lookup_order: {status: delivered}}}
  input: {messages: [{role: user, content: hi}]}
  expect: [json_valid]
- id: b
  fixtures: {tools: *shared}
  input: {messages: [{role: user, content: hi}]}
  expect: [json_valid]
"""
    root = _corpus(scratch, cases=cases)
    assert _load_cases(root) is None
    corpus = load_corpus(root)
    assert corpus.cases[0].fixtures == corpus.cases[1].fixtures


def _system(line: bytes) -> bytes:
    """The valid suite with one more key under ``system:``."""
    return SUITE.replace(b"  model:", b"  " + line + b"\n  model:")


HOSTILE_SUITES: dict[str, tuple[bytes, dict[str, bytes], str]] = {
    # name: (evalkit.yaml, other files under the corpus root, expected fragment of the refusal)
    "deep": (b"[" * 10_000, {}, "nesting too deep"),
    "python_tag": (b"!!python/name:os.system\n", {}, "constructor"),
    "recursive_gate": (SUITE + b"gate: &g {a: *g}\n", {}, "contains it"),
    "control_character": (b"suite: \x01\n", {}, "character #x0001"),
    "invalid_utf8": (b"suite: \xff\n", {}, "not UTF-8"),
    "prompt_path_with_nul": (_system(b'prompt: "a\\0b"'), {}, "null byte"),
    "prompt_not_utf8": (_system(b"prompt: p.md"), {"p.md": b"\xff"}, "UTF-8"),
    "prompt_name_too_long": (_system(b"prompt: " + b"p" * 100_000), {}, "cannot be read"),
    "tools_nested_deep": (_system(b"tools: t.json"), {"t.json": b"[" * 100_000}, "too deeply"),
    "tools_not_objects": (_system(b"tools: t.json"), {"t.json": b'[1, "x"]'}, "list of objects"),
    "5000_digit_int": (SUITE + b"concurrency: " + b"9" * 5000 + b"\n", {}, "digits"),
    "negative_timeout": (_system(b"timeout_s: -1"), {}, "timeout_s"),
    "infinite_timeout": (_system(b"timeout_s: .inf"), {}, "timeout_s"),
    "huge_key": (SUITE + b"? " + b"k" * _MB + b"\n: 1\n", {}, "unknown key"),
}


def _cpu_to_load_suite(root: Path) -> tuple[str | None, float]:
    started = time.process_time()
    message = _load_suite(root)
    return message, time.process_time() - started


def _benign_suite_cpu(scratch: Path, size: int) -> float:
    """CPU to load the valid suite padded to ``size`` bytes with a comment, best of three."""
    pad = max(size - len(SUITE) - 16, 0)
    root = _corpus(scratch, suite=SUITE + b"# " + b"x" * pad + b"\n")
    return min(_cpu_to_load_suite(root)[1] for _ in range(3))


#: How many times a plain suite's cost a hostile one of its size may take, 10,000 nested
#: brackets aside (~450x, held to the case files' bound). The others are ~2x; a refusal whose
#: did-you-mean walked a 1 MB key once per known key was ~2000x (20 s).
HOSTILE_SUITE_COST_RATIO = 100


@pytest.mark.parametrize("name", sorted(HOSTILE_SUITES))
def test_hostile_suite_config(scratch: Path, name: str) -> None:
    config, files, expected = HOSTILE_SUITES[name]
    root = _corpus(scratch, suite=config)
    for file_name, content in files.items():
        (root / file_name).write_bytes(content)
    message, elapsed = _cpu_to_load_suite(root)
    assert message is not None and expected in message, message
    ratio = _cost_ratio(elapsed, _benign_suite_cpu(scratch, len(config)))
    bound = HOSTILE_COST_RATIO if name == "deep" else HOSTILE_SUITE_COST_RATIO
    assert ratio < bound, f"{name}: {ratio:.0f}x the CPU of a plain suite its size"
    if name != "deep":  # the CLI path for 10,000 levels is covered by the case-file test
        _check_lint(root)


def test_hostile_set_overrides_fall_back_to_strings(scratch: Path) -> None:
    """``--set`` values are YAML too; a recursive or bomb value is taken as a plain string."""
    root = _corpus(scratch)
    suite = load_suite(root / "evalkit.yaml", overrides=["gate.alpha=&a [*a]", "suite=[unclosed"])
    assert suite.config.gate["alpha"] == "&a [*a]"
    assert suite.config.suite == "[unclosed"


# --- bounded input: size, duplicate keys, symlinks ----------------------------------------------


def test_an_oversize_case_file_is_refused_before_it_is_parsed(scratch: Path) -> None:
    """A 25 MB flat list (gigabytes once a YAML loader holds it) is refused in one line, fast,
    without reading it into memory."""
    root = _corpus(scratch, cases=b"")
    with (root / "cases" / "hostile.yaml").open("wb") as sink:
        for _ in range(25):
            sink.write(b"- x\n" * (_MB // 4))
    tracemalloc.start()
    try:
        message = _load_cases(root)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    size = (root / "cases" / "hostile.yaml").stat().st_size / (1 << 20)
    assert message is not None and message.startswith(f"cases/hostile.yaml: file is {size:.1f} MB")
    assert "more than the 20 MB limit" in message
    assert peak < 10 * _MB  # refused by its size: never read into memory
    _check_lint(root)


def test_a_huge_document_under_the_size_limit_stops_at_the_node_limit(scratch: Path) -> None:
    root = _corpus(scratch, cases=b"- x\n" * 1_200_000)  # 4.8 MB, 1.2M values
    message, elapsed = _cpu_to_load(root)
    assert message is not None and "more than 1,000,000 values" in message, message
    ratio = _cost_ratio(elapsed, _benign_cpu(scratch, 4_800_000))
    assert ratio < HOSTILE_COST_RATIO, f"{ratio:.0f}x the CPU of a plain file its size"


@pytest.mark.parametrize(
    ("content", "key", "lines"),
    [
        (b"- id: a\n  expect: [json_valid]\n  expect: [{max_words: 3}]\n", "expect", (2, 3)),
        (b"- id: a\n  tags: [x]\n  id: b\n  expect: [json_valid]\n", "id", (1, 3)),
        (b"- {id: a, input: {vars: {m: 1, m: 2}}, expect: [json_valid]}\n", "m", (1, 1)),
    ],
)
def test_a_key_given_twice_is_an_error_naming_both_lines(
    scratch: Path, content: bytes, key: str, lines: tuple[int, int]
) -> None:
    root = _corpus(scratch, cases=content)
    message = _load_cases(root)
    first, second = lines
    assert message == (
        f"cases/hostile.yaml:{second}: duplicate key '{key}' (lines {first} and {second}): "
        "YAML would keep only the last; remove one"
    )
    _check_lint(root)


def test_a_duplicate_key_in_the_suite_config_is_refused(scratch: Path) -> None:
    root = _corpus(scratch, suite=SUITE + b"suite: again\n")
    message = _load_suite(root)
    assert message is not None and "duplicate key 'suite' (lines 1 and 6)" in message, message


def test_merge_keys_may_still_override(scratch: Path) -> None:
    content = (
        b"- &base {id: a, input: {vars: {message: m}}, expect: [json_valid]}\n"
        b"- {<<: *base, id: b}\n"
    )
    root = _corpus(scratch, cases=content)
    assert _load_cases(root) is None
    assert [c.id for c in load_corpus(root).cases] == ["a", "b"]


@pytest.mark.parametrize("kind", ["file", "directory"])
def test_symlinks_leaving_the_root_are_refused_for_files_and_directories(
    scratch: Path, kind: str
) -> None:
    root = _corpus(scratch)
    outside = Path(tempfile.mkdtemp(dir=scratch))
    (outside / "more.yaml").write_text(
        "- id: smuggled\n  input: {vars: {message: x}}\n  expect: [json_valid]\n"
    )
    link = root / "cases" / ("linked.yaml" if kind == "file" else "linked")
    link.symlink_to(outside / "more.yaml" if kind == "file" else outside)
    message = _load_cases(root)
    assert message is not None, "loaded (or skipped) without a word"
    name = "linked.yaml" if kind == "file" else "linked"
    assert message.startswith(f"cases/{name}: symlinked {kind} leaves the corpus root"), message
    _check_lint(root)


def test_symlinks_inside_the_root_are_followed(scratch: Path) -> None:
    root = _corpus(scratch)
    shared = root / "shared"
    shared.mkdir()
    (shared / "more.yaml").write_text(
        "- id: shared-1\n  input: {vars: {message: x}}\n  expect: [json_valid]\n"
    )
    (root / "cases" / "shared").symlink_to(shared)
    (root / "cases" / "loop").symlink_to(root / "cases")  # a cycle is walked once
    assert _load_cases(root) is None
    assert sorted(c.id for c in load_corpus(root).cases) == ["ok-001", "shared-1", "vars-001"]

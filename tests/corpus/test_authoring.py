"""Authoring that forgives: each message names the file, the line (and column), the case id and
the fix; ``cases lint`` reports every problem in one pass; config errors blame the right source."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from evalkit.cli import main
from evalkit.corpus.cases import MAX_LINT_ERRORS, CorpusErrors, load_corpus
from evalkit.corpus.suite import load_suite
from evalkit.errors import ConfigError, CorpusError

GOOD = (
    "- id: ok-{n}\n  input: {{messages: [{{role: user, content: hi}}]}}\n  expect: [json_valid]\n"
)


def _corpus(tmp_path: Path, files: dict[str, str]) -> Path:
    (tmp_path / "cases").mkdir(parents=True, exist_ok=True)
    (tmp_path / "evalkit.yaml").write_text("suite: t\nsystem:\n  model: m\n")
    for name, text in files.items():
        (tmp_path / "cases" / name).write_text(textwrap.dedent(text))
    return tmp_path


def _error(tmp_path: Path, text: str) -> str:
    _corpus(tmp_path, {"a.yaml": text})
    with pytest.raises(CorpusError) as caught:
        load_corpus(tmp_path)
    return str(caught.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "- id: a\n  notes: Note: the refund\n",
            "cases/a.yaml:2:14: YAML syntax error: a ': ' where YAML did not expect a key; quote "
            "the text (\"...\") if it contains ': ', or fix the indentation of this line",
        ),
        (
            "- id: a\n\ttags: [x]\n",
            "cases/a.yaml:2:1: YAML syntax error: a tab character; YAML indents with spaces only: "
            "replace the tab",
        ),
        (
            "- id: a\n  input:\n    vars: {message: hi}\n   expect: [json_valid]\n",
            "cases/a.yaml:4:4: YAML syntax error: this line's indentation does not match the "
            "lines above; align it with its siblings",
        ),
        (
            '- id: a\n  notes: "never closed\n',
            "cases/a.yaml:3:1: YAML syntax error: the file ends inside a quoted string or a [ ] / "
            "{ } list; close it",
        ),
        (
            "- id: a\n  input: {messages: [{role: user, content: hi}]\n  expect: []\n",
            "cases/a.yaml:3:3: YAML syntax error: a { mapping is not closed with }, or its items "
            "lack a ','",
        ),
    ],
)
def test_yaml_syntax_errors_in_plain_words_with_line_and_column(
    tmp_path: Path, text: str, message: str
) -> None:
    assert _error(tmp_path, text) == message


def test_a_missing_misspelled_or_empty_expect_gets_its_own_message(tmp_path: Path) -> None:
    head = "- id: refund-1\n  input: {messages: [{role: user, content: hi}]}\n"
    assert _error(tmp_path, head + "  expects: [json_valid]\n") == (
        "cases/a.yaml:3: case refund-1: 'expects' is not a field: did you mean 'expect'? Rename "
        "it; expect lists the properties the reply must have"
    )
    assert _error(tmp_path, head) == (
        "cases/a.yaml:1: case refund-1: no expect: a case must say what the reply must have, "
        "e.g. expect: [{contains: refund}] (`evalkit scorers list` shows the scorers)"
    )
    assert _error(tmp_path, head + "  expect: []\n") == (
        "cases/a.yaml:3: case refund-1: expect is empty: list at least one scorer, e.g. expect: "
        "[{contains: refund}] (`evalkit scorers list` shows the scorers)"
    )


def test_lint_reports_every_problem_in_one_pass(tmp_path: Path, capsys) -> None:
    bad_case = "- id: bad-{n}\n  input: {{messages: [{{role: user, content: hi}}]}}\n"
    _corpus(
        tmp_path,
        {
            "a.yaml": GOOD.format(n=1) + bad_case.format(n=2) + GOOD.format(n=1),
            "b.yaml": "- id: b\n  notes: Note: x\n",
            "c.yaml": GOOD.format(n=3) + "  expect: [{contans: x}]\n",
        },
    )
    with pytest.raises(CorpusErrors) as caught:
        load_corpus(tmp_path, max_errors=MAX_LINT_ERRORS)
    assert [str(e).split(": case ")[0].split(": YAML")[0] for e in caught.value.errors] == [
        "cases/a.yaml:4",  # bad-2: no expect
        "cases/a.yaml:6",  # ok-1 again: duplicate id
        "cases/b.yaml:2:14",  # YAML syntax
        "cases/c.yaml:4: duplicate key 'expect' (lines 3 and 4)",  # YAML would keep one
    ]
    assert "duplicate id (first defined at cases/a.yaml:1); rename one" in str(
        caught.value.errors[1]
    )
    # a plain load (evalkit run) still stops at the first, saying that there are more
    with pytest.raises(CorpusError) as first:
        load_corpus(tmp_path)
    assert str(first.value).startswith("cases/a.yaml:4: case bad-2: no expect")
    assert main(["cases", "lint", "--config", str(tmp_path / "evalkit.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("evalkit: error: cases/") == 4
    assert err.rstrip().endswith("evalkit: 4 problems in the corpus; fix them and lint again")


def test_lint_stops_at_fifty_problems(tmp_path: Path) -> None:
    bad = "".join(f"- id: bad-{n}\n  input: {{messages: [{{role: user, content: hi}}]}}\n"
                  for n in range(80))  # fmt: skip
    _corpus(tmp_path, {"a.yaml": bad})
    with pytest.raises(CorpusErrors) as caught:
        load_corpus(tmp_path, max_errors=MAX_LINT_ERRORS)
    assert len(caught.value.errors) == 50 and caught.value.truncated
    assert "(and 49+ more problems: `evalkit cases lint` lists them)" in str(caught.value)


def test_an_empty_case_file_is_a_warning(tmp_path: Path, capsys) -> None:
    _corpus(tmp_path, {"a.yaml": GOOD.format(n=1), "empty.yaml": "# nothing yet\n"})
    corpus = load_corpus(tmp_path)
    assert len(corpus.cases) == 1
    assert corpus.warnings == (
        "cases/empty.yaml: no cases in this file; add cases (a YAML list, each starting with "
        "'- id:') or delete it",
    )
    assert main(["cases", "lint", "--config", str(tmp_path / "evalkit.yaml")]) == 0
    assert "evalkit: warning: cases/empty.yaml: no cases in this file" in capsys.readouterr().err


# --- suite config: the line, a did-you-mean, the right source ---------------------------------


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "evalkit.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def _config_error(config: Path, overrides: tuple[str, ...] = ()) -> str:
    with pytest.raises(ConfigError) as caught:
        load_suite(config, overrides=list(overrides))
    return str(caught.value)


def test_config_errors_name_the_line_and_a_did_you_mean(tmp_path: Path) -> None:
    config = _config(tmp_path, "suite: t\nsystem:\n  model: m\n  sampling: {temprature: 0}\n")
    assert _config_error(config) == (
        f"{config}:4: unknown key 'system.sampling.temprature' (did you mean "
        "'system.sampling.temperature'?)"
    )
    config = _config(tmp_path, "suite: t\nsystem:\n  model: m\nconcurency: 4\n")
    assert (
        _config_error(config)
        == f"{config}:4: unknown key 'concurency' (did you mean 'concurrency'?)"
    )
    config = _config(tmp_path, "suite: t\nsystem:\n  provider: openai\n")
    assert _config_error(config) == (
        f"{config}:2: missing required key 'system.model' (a suite config needs suite, "
        "system.model; system.function too for provider: python)"
    )
    config = _config(tmp_path, "suite: t\nsystem: {model: m\n")
    assert _config_error(config) == (
        f"{config}:3:1: YAML syntax error: a {{ mapping is not closed with }}, or its items "
        "lack a ','"
    )


def test_set_errors_are_blamed_on_set_not_on_the_file(tmp_path: Path) -> None:
    config = _config(tmp_path, "suite: t\nsystem:\n  model: m\n")
    assert _config_error(config, ("system.temprature=0.5",)) == (
        "--set system.temprature=0.5: unknown key 'system.temprature' (did you mean "
        "'system.sampling.temperature'?) (the option, not evalkit.yaml)"
    )
    assert _config_error(config, ("sampling.x=1",)) == (
        "--set sampling.x=1: unknown key 'sampling' (did you mean 'system.sampling'?) "
        "(the option, not evalkit.yaml)"
    )
    assert _config_error(config, ("system.timeout_s=-1",)).startswith(
        "--set system.timeout_s=-1: invalid value for 'system.timeout_s': Input should be "
        "greater than 0"
    )
    # a file error stays the file's, even with an unrelated --set
    config = _config(tmp_path, "suite: t\nsystem:\n  model: m\n  modle: x\n")
    assert _config_error(config, ("concurrency=2",)) == (
        f"{config}:4: unknown key 'system.modle' (did you mean 'system.model'?)"
    )

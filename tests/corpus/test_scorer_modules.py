"""``scorers: [myproject.checks]`` in evalkit.yaml: your own scorers, registered with the public
decorator, usable in cases, listed by ``evalkit scorers list``, hashed into the manifest."""

from __future__ import annotations

import hashlib
import itertools
import json
import textwrap
from pathlib import Path

import pytest

from evalkit.cli import main
from evalkit.corpus.cases import load_corpus
from evalkit.corpus.manifest import build_manifest
from evalkit.corpus.suite import load_suite
from evalkit.errors import ConfigError
from evalkit.scorers.registry import SCORERS
from evalkit.store import open_store

CHECKS = '''
from evalkit.scorers.registry import check, scorer


@scorer("polite", primary="word")
def polite(word: str = "please"):
    """Pass when the reply says the polite word. Custom scorers work like built-in ones."""
    def score(output, case):
        ok = word in (output.text or "").lower()
        return check(ok, f"{word!r} {'said' if ok else 'missing'}")
    return score
'''

APP = """
def answer(messages, **context):
    return "Could you please send the order number?"
"""

_names = itertools.count()


def _project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    package = f"ekproj_{next(_names)}_{abs(hash(str(tmp_path))) % 10**8}"
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / package / "checks.py").write_text(CHECKS)
    (tmp_path / package / "app.py").write_text(APP)
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "a.yaml").write_text(
        "- id: asks-politely\n  input: {messages: [{role: user, content: hi}]}\n"
        "  expect: [{polite: please}, {contains: order}]\n"
    )
    (tmp_path / "evalkit.yaml").write_text(
        textwrap.dedent(f"""\
            suite: own-scorers
            system: {{provider: python, model: app, function: "{package}.app:answer"}}
            scorers: [{package}.checks]
            """)
    )
    monkeypatch.chdir(tmp_path)  # the config's directory is importable, as the cwd is
    return tmp_path / "evalkit.yaml", package


def test_a_custom_scorer_module_is_loaded_used_listed_and_hashed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, registry: None, capsys
) -> None:
    _, package = _project(tmp_path, monkeypatch)
    monkeypatch.setenv("COLUMNS", "200")  # the table unwrapped
    assert main(["cases", "lint"]) == 0, capsys.readouterr()
    assert main(["run", "--label", "own", "--no-progress"]) == 0
    assert "passed 1, failed 0, errors 0" in capsys.readouterr().out
    with open_store("data/evalkit.duckdb", read_only=True) as store:
        run_id = store.resolve_run("own")
        manifest = store.manifest(run_id)
        scores = store.scores(run_id)
    source = (tmp_path / package / "checks.py").read_bytes()
    assert manifest.scorer_files == {f"module:{package}.checks": hashlib.sha256(source).hexdigest()}
    polite = scores.filter(scores["scorer"] == "polite")
    assert polite["reason"].to_list() == ["'please' said"]
    # listed by `evalkit scorers list` (the config is found as ./evalkit.yaml), with its module
    assert main(["scorers", "list", "--json"]) == 0
    listed = {e["name"]: e for e in json.loads(capsys.readouterr().out)}
    assert listed["polite"]["module"] == f"{package}.checks"
    assert listed["polite"]["args"] == [{"name": "word", "required": False, "default": "please"}]
    assert listed["polite"]["description"] == "Pass when the reply says the polite word."
    assert main(["scorers", "list"]) == 0
    assert f"from {package}.checks" in capsys.readouterr().out


def test_a_changed_scorer_is_a_changed_configuration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, registry: None
) -> None:
    config, package = _project(tmp_path, monkeypatch)

    def config_hash() -> str:
        suite = load_suite(config)
        corpus = load_corpus(suite.root)
        return build_manifest(suite, corpus, run_id="r", label="l", selection={}).config_hash

    before = config_hash()
    assert config_hash() == before  # loading twice changes nothing
    checks = tmp_path / package / "checks.py"
    checks.write_text(CHECKS.replace('word: str = "please"', 'word: str = "thanks"'))
    assert config_hash() != before
    # ... and the edited code is what scores now (re-imported, not the stale module)
    assert SCORERS["polite"].factory().__closure__[0].cell_contents == "thanks"


def test_scorer_module_errors_name_the_config_and_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, registry: None
) -> None:
    config, package = _project(tmp_path, monkeypatch)
    text = config.read_text()
    config.write_text(text.replace(f"{package}.checks", f"{package}.chekcs"))
    with pytest.raises(ConfigError, match=rf"evalkit.yaml: scorers module '{package}.chekcs' "
                       "cannot be imported: .* looked for beside evalkit.yaml"):  # fmt: skip
        load_suite(config)
    (tmp_path / package / "clash.py").write_text(CHECKS.replace('"polite"', '"contains"'))
    builtin = SCORERS["contains"]
    config.write_text(text.replace(f"{package}.checks", f"{package}.clash"))
    with pytest.raises(ConfigError, match="registers 'contains', already a scorer; give yours"):
        load_suite(config)
    assert SCORERS["contains"] is builtin

"""The documentation site builds with ``--strict``, its reference covers every command, option
and config key, every ``evalkit`` command line in the docs parses, the README stays a short
front page, and no user doc names a commit.

The walk-throughs that run the docs' examples are ``tests/test_docs_examples.py``.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from docs_support import DOCS, README, REPO, blocks, page, pages

MAX_README_LINES = 200


def _gen_reference() -> ModuleType:
    spec = importlib.util.spec_from_file_location("evalkit_docs_gen", DOCS / "gen_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


GEN = _gen_reference()


def _mkdocs(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        cwd=config.parent, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_the_site_builds_strict_with_the_generated_reference(tmp_path: Path) -> None:
    site = tmp_path / "site"
    built = _mkdocs(REPO / "mkdocs.yml", site)
    assert built.returncode == 0, built.stderr[-5000:]
    cli = (site / "reference" / "cli" / "index.html").read_text()
    assert "evalkit gate" in cli and "--rebaseline" in cli and "evalkit cases lint" in cli
    config = (site / "reference" / "config" / "index.html").read_text()
    assert "gate.judge_min_labels" in config and "system.api_key_env" in config
    api = (site / "reference" / "api" / "index.html").read_text()
    assert "open_store" in api and "read-only" in api  # rendered from the docstring
    cases = (site / "reference" / "cases" / "index.html").read_text()
    assert "expect[].scorer" in cases and "provenance.reviewer" in cases
    ci = (site / "getting-started" / "ci" / "index.html").read_text()
    assert "evalkit gate candidate --rebaseline" in ci  # the workflow file, included
    assert "evalkit runs merge" in ci  # and the nightly one
    for name in pages():  # every page is in the site (a page left out of nav warns in strict)
        stem = name.removesuffix(".md").removesuffix("index")
        assert (site / stem / "index.html").is_file(), name


def test_strict_fails_on_a_broken_link_or_anchor(tmp_path: Path) -> None:
    """The site's own strict and validation settings refuse a page linking to a page, or to a
    heading, that does not exist."""
    import yaml

    ours = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    config = {"site_name": "t", "theme": {"name": "material"}}
    config |= {key: ours[key] for key in ("strict", "validation")}
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config))
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# Home\n\nSee [the guide](guides/none.md).\n")
    (tmp_path / "docs" / "other.md").write_text("# Other\n\nSee [home](index.md#no-such).\n")
    built = _mkdocs(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert built.returncode != 0
    assert "guides/none.md" in built.stderr and "no-such" in built.stderr, built.stderr


# --- the reference covers the code -----------------------------------------------------------


def test_the_cli_reference_has_every_command_and_option() -> None:
    """Walked independently of the generator: every top-level command `evalkit` registers,
    each of its subcommands, and every option string of each, appear in the page."""
    import argparse

    from evalkit.cli import COMMAND_GROUP, _parser

    text = GEN.render_cli()
    headings = set(re.findall(r"^#+ (evalkit .+)$", text, re.M))
    expected = set()
    for command in COMMAND_GROUP:
        top = _parser(command)
        (sub,) = [a for a in top._actions if isinstance(a, argparse._SubParsersAction)]
        parser = sub.choices[command]
        expected.add(f"evalkit {command}")
        stack = [(f"evalkit {command}", parser)]
        while stack:
            name, parser = stack.pop()
            for action in parser._actions:
                if isinstance(action, argparse._SubParsersAction):
                    for child, child_parser in action.choices.items():
                        expected.add(f"{name} {child}")
                        stack.append((f"{name} {child}", child_parser))
                elif name != "evalkit demo serve" and not isinstance(action, argparse._HelpAction):
                    for flag in action.option_strings:
                        assert f"`{flag}" in text or f", {flag}" in text, (name, flag)
    assert expected <= headings, expected - headings
    assert len(headings) == len(GEN.cli_commands())
    unexplained = [
        (command.name, option)
        for command in GEN.cli_commands()
        for option, _, meaning in GEN._option_rows(command.parser, command.name)
        if not meaning.strip()
    ]
    assert not unexplained, f"give these a help= or an OPTION_MEANINGS entry: {unexplained}"
    options = {
        GEN._option_key(command.name, action)
        for command in GEN.cli_commands()
        for action in command.parser._actions
    }
    assert set(GEN.OPTION_MEANINGS) <= options, set(GEN.OPTION_MEANINGS) - options
    for flag in ("--port", "--noise", "--detach"):  # the simulator's own parser
        assert f"`{flag}" in text.split("# evalkit demo serve", 1)[1]


def test_the_config_reference_has_every_key_with_a_meaning() -> None:
    from evalkit.compare.policy import _Gate
    from evalkit.corpus.suite import SuiteConfig, SystemConfig

    keys = {k.path: k for k in GEN.config_keys()}
    text = GEN.render_config()
    top = set(SuiteConfig.model_fields) - {"pass_rules"}  # written as replays: {...}
    assert {p for p in keys if "." not in p} == top
    for name in top:
        assert f"\n## {name}\n" in text, name
    for model, prefix in ((_Gate, "gate."), (SystemConfig, "system.")):
        for field in model.model_fields:
            assert f"{prefix}{field}" in keys and f"`{prefix}{field}`" in text, field
    assert {"replays.n", "replays.pass_rule", "budgets.*.limit", "tiers.*.tags"} <= set(keys)
    missing = [path for path, key in keys.items() if not key.meaning.strip()]
    assert not missing, f"give these keys a meaning in docs/gen_reference.py MEANINGS: {missing}"
    stale = set(GEN.MEANINGS) - set(keys)
    assert not stale, f"MEANINGS names keys the models do not have: {stale}"
    assert keys["system.model"].required and keys["suite"].required
    assert keys["gate.alpha"].default == "`0.05`" and keys["concurrency"].default == "`8`"


def test_the_case_reference_has_every_key_with_a_meaning() -> None:
    from evalkit.corpus.case_spec import CaseSpec, InputSpec, ProvenanceSpec

    keys = {k.path: k for k in GEN.case_keys()}
    assert {p for p in keys if "." not in p and "[" not in p} == set(CaseSpec.model_fields)
    assert {f"input.{f}" for f in InputSpec.model_fields} <= set(keys)
    assert {f"provenance.{f}" for f in ProvenanceSpec.model_fields} <= set(keys)
    assert {"input.messages[].role", "expect[].scorer", "expect[].args"} <= set(keys)
    missing = [path for path, key in keys.items() if not key.meaning.strip()]
    assert not missing, f"give these keys a meaning in CASE_MEANINGS: {missing}"
    assert set(GEN.CASE_MEANINGS) <= set(keys), set(GEN.CASE_MEANINGS) - set(keys)
    text = GEN.render_cases()
    assert all(f"| `{path}` |" in text for path in keys)
    assert keys["id"].required and keys["criticality"].default == "`normal`"


def test_the_api_reference_has_every_public_name() -> None:
    import evalkit

    names = GEN.api_names()
    assert set(names) == set(evalkit.__all__) - {"__version__"}
    text = GEN.render_api()
    for name, target in names.items():
        module, _, attr = target.rpartition(".")
        assert getattr(importlib.import_module(module), attr) is getattr(evalkit, name), name
        assert f"## evalkit.{name}\n\n::: {target}\n" in text


# --- every command line in the docs parses ---------------------------------------------------


def _command_lines() -> list[tuple[str, str]]:
    """(where, words after `evalkit`) of each evalkit command in the docs' shell blocks."""
    texts = {**pages(), "README.md": README.read_text()}
    found = []
    for name, text in texts.items():
        for _, body in blocks(text, "bash"):
            body = body.replace("\\\n", " ")
            for line in body.splitlines():
                line = re.sub(r"\s+#.*$", "", line)
                for m in re.finditer(
                    r"(?:^|\$\(|&&|\|\||;|\bthen\b|\belse\b)\s*evalkit (.*)", line
                ):
                    found.append((name, re.split(r"\s(?:\|\||&&|[|>;])|\)\"", m[1])[0]))
    return found


def test_every_evalkit_command_line_in_the_docs_parses() -> None:
    from evalkit.cli import COMMAND_GROUP, _parser
    from evalkit.demo.server import _parser as serve_parser

    lines = _command_lines()
    assert len(lines) > 60
    for where, command in lines:
        words = [w for w in shlex.split(command) if w not in ("$URL", "$LIVE")]  # --set flags
        if words[:1] == ["--version"]:
            continue
        assert words and words[0] in COMMAND_GROUP, f"{where}: evalkit {command}"
        try:
            if words[:2] == ["demo", "serve"]:
                serve_parser().parse_args([w for w in words[2:] if w != "--detach"])
            else:
                _parser(words[0]).parse_args(words)
        except SystemExit as exc:
            raise AssertionError(f"{where}: `evalkit {command}` does not parse") from exc


# --- the README and commit ids ---------------------------------------------------------------


def test_the_readme_is_a_short_front_page() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= MAX_README_LINES, (
        "the README is the front page: move it to docs/"
    )
    assert "## Why paired, per-slice comparison" in text and "make demo" in text
    for target in re.findall(r"\]\(((?!https?:)[^)#]+)(?:#[^)]*)?\)", text):
        assert (REPO / target).exists(), target


def test_the_readme_taste_of_the_tour_is_the_tour() -> None:
    """Every line of the README's shell blocks is a line of the tour page, so it runs there."""
    tour = {
        line.split("  #")[0].strip()
        for _, body in blocks(page("getting-started/tour.md"), "bash")
        for line in body.splitlines()
    }
    for _, body in blocks(README.read_text(), "bash"):
        if body.startswith("make "):
            continue
        for line in body.splitlines():
            line = line.split("  #")[0].strip()
            assert line in tour, line


def _commits() -> set[str] | None:
    done = subprocess.run(
        ["git", "rev-list", "--all"], cwd=REPO, capture_output=True, text=True, check=False
    )
    return set(done.stdout.split()) if done.returncode == 0 and done.stdout.strip() else None


def commit_ids(text: str, commits: set[str] | None) -> list[str]:
    """Hex runs of 7-40 characters in ``text`` that name a commit of ``commits`` (without a
    repository: that look like one, a run mixing digits and letters)."""
    runs = re.findall(r"(?<![0-9A-Za-z])[0-9a-f]{7,40}(?![0-9A-Za-z])", text)
    if commits is None:
        return [r for r in runs if re.search(r"\d", r) and re.search(r"[a-f]", r)]
    return [r for r in runs if any(c.startswith(r) for c in commits)]


def _user_docs() -> dict[str, str]:
    docs = {f"docs/{name}": text for name, text in pages().items()}
    docs["docs/reference/cli.md"] = GEN.render_cli()
    docs["docs/reference/config.md"] = GEN.render_config()
    for name in ("README.md", "CONTRIBUTING.md"):
        docs[name] = (REPO / name).read_text()
    return docs


def test_no_user_doc_names_a_commit() -> None:
    commits = _commits()
    found = {name: ids for name, text in _user_docs().items() if (ids := commit_ids(text, commits))}
    assert not found, f"commit ids in user docs: {found}"


def test_the_commit_check_finds_a_commit() -> None:
    commits = _commits()
    if commits is None:  # no repository here: the pattern alone
        assert commit_ids("fixed in 3e1f0a9 (see 1234567)", None) == ["3e1f0a9"]
        return
    head = next(iter(commits))
    assert commit_ids(f"as measured at {head[:7]}, then {head}.", commits) == [head[:7], head]
    assert commit_ids("trace-5a918c78b73e and 2026-12-03", commits) == []


def test_every_case_the_docs_write_is_a_valid_case() -> None:
    """A YAML block that is a list of cases (items with an ``id``), or a case file a shell block
    writes, passes the case model."""
    import yaml

    from evalkit.corpus.case_spec import CaseSpec

    texts = {**pages(), "README.md": README.read_text()}
    cases = 0
    for name, text in texts.items():
        for _, body in [*blocks(text, "yaml"), *blocks(text, "bash")]:
            if body.startswith("--8<--"):
                continue
            if "<<'YAML'" in body:  # a case file a shell block writes
                body = body.split("<<'YAML'\n", 1)[1].split("\nYAML\n", 1)[0]
            try:
                data = yaml.safe_load(body)
            except yaml.YAMLError:
                continue  # a shell block, not YAML
            if isinstance(data, list) and data and all(isinstance(d, dict) and "id" in d
                                                       for d in data):  # fmt: skip
                if any(k in data[0] for k in ("expected", "scorer")):
                    continue  # the seed article's spelling, which `cases convert` rewrites
                for case in data:
                    try:
                        CaseSpec.model_validate(case)
                    except ValueError as exc:  # pydantic's ValidationError
                        raise AssertionError(f"{name}: case {case['id']}: {exc}") from None
                    cases += 1
    assert cases >= 3, cases  # the README's, the case format guide's, the tour's

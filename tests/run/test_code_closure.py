"""A python system's code fingerprint covers its import closure under the project.

Editing a helper module the system imports (directly or through another helper) changes the
fingerprint, so the next run asks the system again; a file nobody imports changes nothing.
Imports are read statically: fingerprinting never imports or runs the user's modules.
"""

from __future__ import annotations

import itertools
import sys
import textwrap
from pathlib import Path

import pytest

from evalkit.corpus.cases import load_corpus
from evalkit.corpus.fingerprint import code_fingerprint, import_closure
from evalkit.corpus.suite import load_suite
from evalkit.run.runner import RunOptions, run_suite
from evalkit.store import open_store

_names = itertools.count()

CASES = "".join(
    f"- id: case-{i}\n  input: {{messages: [{{role: user, content: 'question {i}'}}]}}\n"
    "  expect: [{contains: fine}]\n"
    for i in range(4)
)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


def _project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """``<pkg>/app.py`` → ``<pkg>/helpers/text.py`` → ``<pkg>/helpers/deeper.py`` (helpers a
    namespace package), the suite config next to the package, and ``unrelated.py`` that
    nobody imports."""
    project = tmp_path / "project"
    pkg = f"ek_closure_{next(_names)}"  # fresh: the python provider imports it
    _write(project / pkg / "__init__.py", "")
    _write(
        project / pkg / "app.py",
        """\
        from .helpers.text import render


        def answer(messages, **context):
            return render(messages[-1]["content"])
        """,
    )
    _write(
        project / pkg / "helpers" / "text.py",
        """\
        import json

        from . import deeper


        def render(question):
            return json.dumps(deeper.WORD + " " + question)
        """,
    )
    _write(project / pkg / "helpers" / "deeper.py", 'WORD = "fine"\n')
    _write(project / "unrelated.py", "X = 1\n")
    _write(project / "cases" / "a.yaml", CASES)
    _write(
        project / "evalkit.yaml",
        f'suite: closure\nsystem: {{provider: python, model: app, function: "{pkg}.app:answer"}}\n',
    )
    monkeypatch.syspath_prepend(str(project))
    return project, pkg


class Counting:
    """Counts the python provider's calls (the system really being asked)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from evalkit.run.providers import python_callable

        self.calls = 0
        original = python_callable.PythonProvider.complete

        async def complete(provider, request):  # type: ignore[no-untyped-def]
            self.calls += 1
            return await original(provider, request)

        monkeypatch.setattr(python_callable.PythonProvider, "complete", complete)


def test_editing_a_helper_the_system_imports_re_asks_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project, pkg = _project(tmp_path, monkeypatch)
    counting = Counting(monkeypatch)
    db = tmp_path / "e.duckdb"

    def run(label: str) -> tuple[str, dict[str, str], int, list[bool]]:
        suite = load_suite(project / "evalkit.yaml")
        with open_store(db, write=True) as store:
            summary = run_suite(
                suite, load_corpus(suite.root), store, RunOptions(label=label, progress=False)
            )
            manifest = store.manifest(summary.run_id)
            cached = store.outputs(summary.run_id)["cached"].to_list()
        system = manifest.system
        return system["code_fingerprint"], system["code"], summary.cache_hits, cached

    first, code, _, _ = run("first")
    assert counting.calls == 4
    assert list(code) == [
        f"{pkg}/__init__.py",
        f"{pkg}/app.py",
        f"{pkg}/helpers/deeper.py",
        f"{pkg}/helpers/text.py",
    ]  # sorted, relative to the suite's directory; no unrelated.py, no json
    same, _, hits, cached = run("same")
    assert same == first and hits == 4 and all(cached) and counting.calls == 4

    (project / pkg / "helpers" / "deeper.py").write_text('WORD = "fine"  # reworded\n')
    edited, _, hits, cached = run("edited")
    assert edited != first
    assert hits == 0 and not any(cached) and counting.calls == 8  # asked again

    (project / "unrelated.py").write_text("X = 2\n")  # under the root, imported by nobody
    (project / "notes.txt").write_text("a file nobody imports\n")
    after, _, hits, cached = run("unrelated")
    assert after == edited and hits == 4 and all(cached) and counting.calls == 8


def test_the_closure_is_read_statically_and_stays_in_the_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Absolute, relative, from-imports of submodules and attributes, imports inside functions
    and try blocks; the standard library and installed packages are out; nothing runs."""
    project = tmp_path / "project"
    n = next(_names)
    app, lib, ns = f"ek_app_{n}", f"ek_lib_{n}", f"ek_ns_{n}"
    sentinel = tmp_path / "imported.txt"
    run_me = f"open({str(sentinel)!r}, 'w').write('ran')\n"
    _write(
        project / f"{app}.py",
        f"""\
        import os.path
        import pydantic
        import {ns}.text
        from {lib} import thing, sub
        from {lib}.deep.leaf import VALUE


        def answer(messages, **context):
            import {ns}.lazy
            try:
                import ek_missing_module_{n}
            except ImportError:
                pass
            return "fine"
        """,
    )
    _write(project / ns / "text.py", run_me)
    _write(project / ns / "lazy.py", run_me)
    _write(project / ns / "unused.py", run_me)
    _write(project / lib / "__init__.py", run_me + "thing = 1\n")
    _write(project / lib / "sub.py", "from .deep import leaf\nfrom .. import nothing_above\n")
    _write(project / lib / "deep" / "__init__.py", "")
    _write(project / lib / "deep" / "leaf.py", "from ..sub import *\nVALUE = 1\n")
    _write(project / lib / "thing.txt", "not a module\n")
    (project / "corpus").mkdir()
    monkeypatch.syspath_prepend(str(project))
    before = set(sys.modules)

    files = import_closure(f"{app}:answer", project / "corpus")
    code = code_fingerprint(f"{app}:answer", [], project / "corpus")

    assert [p.relative_to(project).as_posix() for p in files] == sorted(
        [
            f"{app}.py",
            f"{lib}/__init__.py",
            f"{lib}/deep/__init__.py",
            f"{lib}/deep/leaf.py",
            f"{lib}/sub.py",
            f"{ns}/lazy.py",
            f"{ns}/text.py",
        ]
    )
    assert list(code) == [f"../{p.relative_to(project).as_posix()}" for p in files]
    assert not sentinel.exists()  # nothing was imported or run
    assert not {m for m in set(sys.modules) - before if m.startswith(("ek_app", "ek_lib", "ek_ns"))}
    assert all("site-packages" not in p.parts for p in files)  # pydantic is installed code


def test_a_system_inside_the_suite_directory_and_code_paths_still_widen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project, pkg = _project(tmp_path, monkeypatch)
    fingerprint = code_fingerprint(f"{pkg}.app:answer", ["*.py"], project)
    assert "unrelated.py" in fingerprint and f"{pkg}/helpers/deeper.py" in fingerprint
    assert code_fingerprint(f"{pkg}.app:answer", [], project) == {
        k: v for k, v in fingerprint.items() if k != "unrelated.py"
    }

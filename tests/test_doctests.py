"""Every docstring example in the package runs, so the examples cannot rot.

One test per module that has examples to run; examples marked ``# doctest: +SKIP`` (those that
need a store or a model) are not counted, so a module whose examples all are has no test here.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from types import ModuleType

import pytest

import evalkit

_FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _examples(module: ModuleType) -> list[doctest.DocTest]:
    """The module's docstring examples that are run (a ``+SKIP`` example is not)."""
    found = doctest.DocTestFinder(exclude_empty=True).find(module, module.__name__)
    return [
        test
        for test in found
        if any(not example.options.get(doctest.SKIP, False) for example in test.examples)
    ]


def _modules_with_examples() -> list[str]:
    names = [
        info.name
        for info in pkgutil.walk_packages(evalkit.__path__, "evalkit.")
        if not info.name.endswith("__main__")  # importing it would run the command line
    ]
    return sorted(name for name in names if _examples(importlib.import_module(name)))


@pytest.mark.parametrize("name", _modules_with_examples())
def test_the_docstring_examples_of(name: str) -> None:
    runner = doctest.DocTestRunner(optionflags=_FLAGS)
    for test in _examples(importlib.import_module(name)):
        runner.run(test)
    results = runner.summarize(verbose=False)
    assert results.attempted > 0
    assert results.failed == 0, f"{results.failed} of {results.attempted} examples failed above"

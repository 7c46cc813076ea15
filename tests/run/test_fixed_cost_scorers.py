"""The scorer registry imports a built-in scorer's module when a case first names it: a run of
``json_valid`` cases never imports the similarity (rapidfuzz), sandbox or judge modules, while
a listing of the registry still shows every scorer, and a suite's own scorer still replaces a
built-in of the same name."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

from evalkit.scorers.registry import BUILTIN_MODULES, SCORERS

REPO = Path(__file__).resolve().parents[2]


def _fresh(code: str) -> object:
    """What ``code`` prints as JSON on its last line, run in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_module_table_names_where_every_built_in_scorer_registers() -> None:
    package = REPO / "evalkit" / "scorers"
    registering = sorted(  # every module of the package that registers a scorer
        f"evalkit.scorers.{path.stem}"
        for path in package.glob("*.py")
        if path.stem != "registry" and "@scorer(" in path.read_text(encoding="utf-8")
    )
    for module in registering:
        importlib.import_module(module)
    registered = {
        name: definition.factory.__module__
        for name, definition in dict.items(SCORERS)
        if definition.factory.__module__ in registering
    }
    assert registered == BUILTIN_MODULES


_LOOKUP = """
import json, sys
from evalkit.scorers import SCORERS
known = "similar" in SCORERS and "judge" in SCORERS and "contans" not in SCORERS
SCORERS["json_valid"], SCORERS.get("max_words")
loaded = sorted(m for m in sys.modules if m.startswith("evalkit.scorers."))
print(json.dumps({"known": known, "loaded": loaded, "rapidfuzz": "rapidfuzz" in sys.modules}))
"""


def test_a_lookup_imports_the_module_of_that_scorer_alone() -> None:
    assert _fresh(_LOOKUP) == {
        "known": True,
        "loaded": [
            "evalkit.scorers.deterministic",  # structured's helpers
            "evalkit.scorers.registry",
            "evalkit.scorers.structured",
        ],
        "rapidfuzz": False,
    }


_LISTING = """
import json
from evalkit.cli.scorers import describe_scorers
print(json.dumps(sorted(d["name"] for d in describe_scorers())))
"""


def test_a_listing_shows_every_built_in_scorer() -> None:
    assert _fresh(_LISTING) == sorted(BUILTIN_MODULES)


_OWN_CONTAINS = """
import json
from evalkit.scorers.registry import SCORERS, check, scorer

@scorer("contains", primary="text")
def contains(text: str):
    return lambda output, case: check(True, "mine")

SCORERS["exact"]  # imports deterministic.py, which registers its own "contains" too
print(json.dumps([SCORERS["contains"].factory.__module__, len(SCORERS) > 20]))
"""


def test_a_suite_scorer_named_like_a_built_in_still_replaces_it() -> None:
    assert _fresh(_OWN_CONTAINS) == ["__main__", True]

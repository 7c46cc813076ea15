"""The flat public API is pinned: adding or removing a name is a deliberate change."""

import importlib
from pathlib import Path

import pytest

import evalkit

EXPECTED = {
    "CalibrationRecord",
    "Case",
    "ComparabilityError",
    "Comparison",
    "ComparisonResult",
    "ConfigError",
    "Corpus",
    "CorpusError",
    "EvalkitError",
    "GateBlocked",
    "GateDecision",
    "GatePolicy",
    "History",
    "Output",
    "Project",
    "Report",
    "RunOptions",
    "RunResult",
    "RunSummary",
    "Score",
    "Store",
    "StoreError",
    "Suite",
    "ToolCall",
    "__version__",
    "agreement_by_slice",
    "agreement_summary",
    "build_report",
    "build_scorer",
    "calibrate",
    "calibration_table",
    "check",
    "cohen_kappa",
    "confusion_heatmap",
    "decide",
    "flake_rate_by_slice",
    "flake_slices",
    "flip_counts",
    "flips",
    "format_kappa",
    "gate_operating_characteristics",
    "gate_pair",
    "history",
    "human_agreement",
    "length_bias",
    "llmbar_mismatches",
    "llmbar_table",
    "load_comparison",
    "load_corpus",
    "load_decided_pair",
    "load_decided_report",
    "load_llmbar",
    "load_pandalm",
    "load_policy",
    "load_suite",
    "min_detectable_drop",
    "open_store",
    "operating_characteristics",
    "order_by_slice",
    "order_consistency",
    "paired_frame",
    "pandalm_mismatches",
    "pandalm_table",
    "pass_rate_by_slice",
    "pass_rate_history",
    "position_consistency",
    "power_table",
    "rater_agreement",
    "replay_table",
    "report_fragment",
    "report_html",
    "report_json",
    "report_junit",
    "report_markdown",
    "run_suite",
    "run_verdicts",
    "save_chart",
    "save_slice_charts",
    "scorer",
    "slice_agreement",
    "slice_forest",
    "slice_overview",
    "slice_table",
    "stats",
    "table",
    "unstable_history",
    "verdicts",
}


def test_all_is_pinned_and_every_name_resolves() -> None:
    assert set(evalkit.__all__) == EXPECTED
    for name in evalkit.__all__:
        assert getattr(evalkit, name) is not None


#: Import paths of the flat layout, removed when the package moved to stage folders
#: (no compatibility shims: notebooks, README and tests moved with them). The flat
#: ``evalkit.report`` module is not among them: ``evalkit.report`` is now the presentation
#: package.
REMOVED_PATHS = [
    "evalkit.cases",
    "evalkit.config",
    "evalkit.runner",
    "evalkit.analysis",
    "evalkit.gate",
    "evalkit.judge",
    "evalkit.calibration",
    "evalkit.providers",
    "evalkit.tools",
    "evalkit.demo_run",
]


@pytest.mark.parametrize("path", REMOVED_PATHS)
def test_old_flat_paths_are_gone(path: str) -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(path)


def test_stage_paths_resolve() -> None:
    from evalkit.compare.gate import decide
    from evalkit.stats import mcnemar_exact

    assert decide is evalkit.decide
    assert mcnemar_exact(3, 0) == 0.125


def test_no_public_name_is_also_a_subpackage() -> None:
    # Importing ``evalkit.x.y`` sets the attribute ``evalkit.x`` to the subpackage, so a
    # public function named ``x`` would silently become a module once anything imports it.
    package = Path(evalkit.__file__).parent
    subpackages = {p.parent.name for p in package.glob("*/__init__.py")}
    clashes = [
        name
        for name in sorted(subpackages & set(evalkit.__all__))
        if getattr(evalkit, name) is not importlib.import_module(f"evalkit.{name}")
    ]
    assert clashes == []


def _facade_lists() -> tuple[dict[str, tuple[str, str]], dict[str, tuple[str, str]]]:
    """``name -> (module, attribute)`` as evalkit/__init__.py's ``_EXPORTS`` map says (what
    ``evalkit.NAME`` loads) and as its ``TYPE_CHECKING`` imports say (what type checkers and
    editors read)."""
    import ast

    exported = {}
    for name, target in evalkit._EXPORTS.items():
        module, _, attribute = target.partition(":")
        exported[name] = (module, attribute or name)
    typed = {}
    tree = ast.parse(Path(evalkit.__file__).read_text())
    for node in tree.body:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for statement in node.body:
                if isinstance(statement, ast.ImportFrom) and statement.module:
                    for alias in statement.names:
                        typed[alias.asname or alias.name] = (statement.module, alias.name)
    return exported, typed


def test_the_facades_hand_kept_lists_agree() -> None:
    """evalkit/__init__.py lists each public name three times: in ``_EXPORTS`` (what it loads),
    in ``__all__`` and in the ``TYPE_CHECKING`` imports. Moving a function to another module
    means editing the first and the last; this names any pair that disagrees."""
    exported, typed = _facade_lists()
    problems = [
        f"{name}: _EXPORTS loads it from {exported.get(name)}, the TYPE_CHECKING imports from "
        f"{typed.get(name)}; make both name the module that defines it"
        for name in sorted(set(exported) | set(typed))
        if exported.get(name) != typed.get(name)
    ]
    problems += [
        f"{name}: in _EXPORTS but not in __all__ (or the reverse); add it to both, and to "
        "EXPECTED in tests/test_public_api.py"
        for name in sorted(set(exported) ^ set(evalkit.__all__))
        if not name.startswith("__")  # __version__: public, never star-imported
    ]
    assert problems == []


def test_a_moved_name_left_behind_in_the_type_checking_imports_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    moved = dict(evalkit._EXPORTS, decide="evalkit.compare.tiers")
    monkeypatch.setattr(evalkit, "_EXPORTS", moved)
    exported, typed = _facade_lists()
    assert exported["decide"] != typed["decide"] == ("evalkit.compare.gate", "decide")


def _lazy_maps() -> dict[str, dict[str, str]]:
    """Every evalkit package whose ``__init__`` re-exports lazily: its name -> home map."""
    import pkgutil

    maps = {}
    for info in pkgutil.walk_packages(evalkit.__path__, "evalkit."):
        if not info.ispkg or info.name.endswith("__main__"):
            continue
        package = importlib.import_module(info.name)
        found = getattr(package, "_EXPORTS", None) or getattr(package, "_HOMES", None)
        if isinstance(found, dict):
            maps[info.name] = found
    return maps


def lazy_map_problems(maps: dict[str, dict[str, str]]) -> list[str]:
    """Each name of a subpackage's lazy map that no longer resolves, or that ``__all__`` and
    the map disagree on, with the fix."""
    problems = []
    for package_name, homes in sorted(maps.items()):
        package = importlib.import_module(package_name)
        listed = {n for n in getattr(package, "__all__", homes) if not n.startswith("__")}
        problems += [
            f"{package_name}: {name} is in __all__ or its lazy map but not both; add it to both"
            for name in sorted(listed ^ {n for n in homes if not n.startswith("__")})
        ]
        for name in sorted(homes):
            try:
                getattr(package, name)
            except (AttributeError, ImportError) as exc:
                problems.append(
                    f"{package_name}.{name}: its lazy map says {homes[name]}, which fails "
                    f"({type(exc).__name__}: {exc}); point it at the module that defines it"
                )
    return problems


def test_every_lazy_re_export_of_a_subpackage_resolves() -> None:
    """A subpackage's lazy map is kept by hand beside the code it points into: a name moved to
    another module (or renamed) must be moved in the map too."""
    maps = _lazy_maps()
    assert {"evalkit.stats", "evalkit.judges"} <= set(maps)
    assert lazy_map_problems(maps) == []


def test_a_lazy_name_pointing_at_the_wrong_module_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    import evalkit.judges as judges

    moved = dict(judges._EXPORTS, human_agreement="evalkit.judges.calibration")
    monkeypatch.setattr(judges, "_EXPORTS", moved)
    monkeypatch.delitem(judges.__dict__, "human_agreement", raising=False)
    found = lazy_map_problems({"evalkit.judges": moved})
    assert any(p.startswith("evalkit.judges.human_agreement: its lazy map says") for p in found)

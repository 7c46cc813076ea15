"""The notebook's and script's front door: `Project` (run, compare, gate, runs, history,
labels) over the functions the CLI calls, and the values it returns."""

from evalkit.project.project import Project
from evalkit.project.results import ComparisonResult, RunResult

__all__ = ["ComparisonResult", "Project", "RunResult"]

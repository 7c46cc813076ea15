"""Run ``notebooks/gate.ipynb`` as the CI gate: papermill executes it, nbconvert renders it.

The notebook writes ``decision.json`` into its output directory before its last cell raises
when the gate blocks; `execute_gate` reads that file (never the exception text) to choose the
exit code: 0 passed (or passed with override), 1 blocked, 2 usage or config error.

The kernel: papermill asks for the notebook's kernel, ``python3``. `_ThisPython` pins the
command to ``sys.executable -m ipykernel_launcher``, so the gate always runs in the interpreter
(the venv) that runs evalkit, whatever kernelspec ``python3`` resolves to on this machine.

Examples:
    >>> run = execute_gate("data/evalkit.duckdb", "base", "cand", "evalkit.yaml")  # doctest: +SKIP
    >>> run.exit_code, run.html_path                                            # doctest: +SKIP
    (1, PosixPath('reports/cand/gate.html'))
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import nbformat
import papermill as pm
from jupyter_client.manager import AsyncKernelManager
from nbconvert import HTMLExporter

from evalkit.compare.comparability import check_comparable
from evalkit.compare.policy import load_policy
from evalkit.errors import ConfigError, EvalkitError
from evalkit.store import open_store

#: Exception names (raised inside the notebook) that mean a usage or config problem: exit 2.
USAGE_ERRORS = {"ConfigError", "ComparabilityError", "StoreError", "CorpusError", "EvalkitError"}
DECISION_FILE = "decision.json"


class _ThisPython(AsyncKernelManager):
    """A kernel manager that launches ipykernel with this very interpreter."""

    def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
        cmd = super().format_kernel_cmd(extra_arguments)
        tail = cmd[cmd.index("-f") :] if "-f" in cmd else ["-f", self.connection_file]
        return [sys.executable, "-m", "ipykernel_launcher", "--log-level=ERROR", *tail]


@dataclass(frozen=True)
class GateRun:
    """The outcome of one executed gate notebook."""

    exit_code: int
    notebook_path: Path
    html_path: Path | None
    decision_json: Path | None  # the decision file the notebook wrote (None if it never got there)
    decision: dict[str, Any] | None = None
    error: str | None = None  # one line, for exit code 2


def notebook_path(name: str) -> Path:
    """A shipped notebook: ``notebooks/<name>`` of the source tree, else package data."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "notebooks" / name, here / "notebooks" / name):
        if candidate.is_file():
            return candidate
    packaged = resources.files("evalkit").joinpath("notebooks", name)
    if packaged.is_file():
        return Path(str(packaged))
    raise ConfigError(f"notebook {name!r} not found next to the evalkit package")


def report_dir(candidate: str, root: str | Path = "reports") -> Path:
    """``reports/<candidate>``, with the label made safe as a directory name."""
    return Path(root) / (re.sub(r"[^A-Za-z0-9_.-]+", "_", candidate).strip("._") or "candidate")


def execute_notebook(
    name: str, output: Path, parameters: dict[str, Any], timeout_s: float = 600
) -> tuple[Path, str | None, str | None]:
    """Execute a shipped notebook with papermill; return (path, error name, error message)."""
    output.parent.mkdir(parents=True, exist_ok=True)
    try:
        pm.execute_notebook(
            str(notebook_path(name)), str(output), parameters=parameters, kernel_name="python3",
            kernel_manager_class=_ThisPython, cwd=str(output.parent), progress_bar=False,
            execution_timeout=timeout_s, log_output=False,
        )  # fmt: skip
    except pm.PapermillExecutionError as exc:
        return output, exc.ename, " ".join(str(exc.evalue).split())
    return output, None, None


#: Cells a report never shows: papermill's exception banner and anchor, the notebook's own intro.
HIDDEN_TAGS = {"papermill-error-cell-tag", "notebook-only"}


def to_report_html(notebook: Path, title: str = "evalkit gate") -> Path:
    """Render an executed notebook as a report page, ``<same name>.html`` next to it.

    Outputs only (no code, no prompts), in the page style of `evalkit.compare.html`; cells
    tagged `HIDDEN_TAGS` are left out, and so is the traceback of the ``GateBlocked`` the last
    cell raises on purpose (any other error stays visible: it is a bug, not a verdict).
    """
    from evalkit.compare.html import page

    nb = nbformat.read(notebook, as_version=4)
    nb.cells = [c for c in nb.cells if not HIDDEN_TAGS & set(c.metadata.get("tags", []))]
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.outputs if o.get("ename") != "GateBlocked"]
    exporter = HTMLExporter(
        template_name="basic", exclude_input=True, exclude_input_prompt=True,
        exclude_output_prompt=True,
    )  # fmt: skip
    body, _ = exporter.from_notebook_node(nb)
    html_path = notebook.with_suffix(".html")
    html_path.write_text(page(body, title), encoding="utf-8")
    return html_path


def to_html(notebook: Path) -> Path:
    """Render an executed notebook to ``<same name>.html`` next to it (nbconvert, with code)."""
    body, _ = HTMLExporter().from_filename(str(notebook))
    html_path = notebook.with_suffix(".html")
    html_path.write_text(body, encoding="utf-8")
    return html_path


def preflight(
    db_path: str | Path, baseline: str, candidate: str, config_path: str | Path | None,
    allow_diff: Sequence[str] = (),
) -> str | None:  # fmt: skip
    """The usage and config errors the notebook would hit, found in a second without a kernel:
    the gate config, the runs, their comparability and the critical tags' sizes. None if fine."""
    try:
        policy = load_policy(str(config_path) if config_path else None)
        with open_store(db_path, read_only=True) as store:
            base, cand = store.resolve_run(baseline), store.resolve_run(candidate)
            check_comparable(store.manifest(base), store.manifest(cand), allow_diff)
            policy.validate_against(store.cases(cand), store.manifest(cand).get("selection"))
    except EvalkitError as exc:
        return str(exc)
    return None


def execute_gate(
    db_path: str | Path,
    baseline: str,
    candidate: str,
    config_path: str | Path | None,
    out_dir: str | Path = "reports",
    allow_diff: Sequence[str] = (),
    timeout_s: float = 600,
    tier: str | None = None,
    allow_incomplete: bool = False,
) -> GateRun:
    """Execute the gate notebook into ``<out_dir>/<candidate>/`` (`report_dir`).

    Writes ``gate.ipynb`` (the executed notebook, kept as the artefact), ``gate.html`` (its
    outputs as a report page: `to_report_html`) and the notebook's artefacts (``decision.json``,
    ``report.json``, ``junit.xml``, ``gate.md``, charts as SVG and PNG). Usage and config
    errors found by `preflight` return exit code 2 before any kernel starts (no notebook is
    written then). Other exceptions
    raised in the notebook (bugs, not verdicts) propagate as `papermill.PapermillExecutionError`
    after the HTML is written.
    """
    out = report_dir(candidate, out_dir).resolve()
    problem = preflight(db_path, baseline, candidate, config_path, allow_diff)
    if problem is not None:
        return GateRun(2, out / "gate.ipynb", None, None, None, problem)
    out.mkdir(parents=True, exist_ok=True)
    decision_file = out / DECISION_FILE
    decision_file.unlink(missing_ok=True)  # never read a stale verdict
    params = {
        "DB_PATH": str(Path(db_path).resolve()), "BASELINE": baseline, "CANDIDATE": candidate,
        "CONFIG": str(Path(config_path).resolve()) if config_path else "",
        "ALLOW_DIFF": list(allow_diff), "OUTPUT_DIR": str(out), "TIER": tier or "",
        "ALLOW_INCOMPLETE": allow_incomplete,
    }  # fmt: skip
    nb, ename, message = execute_notebook("gate.ipynb", out / "gate.ipynb", params, timeout_s)
    if decision_file.is_file():
        decision = json.loads(decision_file.read_text(encoding="utf-8"))
        status = decision.get("status", "?")
        html_path = to_report_html(nb, f"evalkit gate {status}: {baseline} → {candidate}")
        code = 1 if decision["blocked"] else 0
        if ename not in (None, "GateBlocked"):
            raise pm.PapermillExecutionError(0, 0, "", ename or "", message or "", [])
        return GateRun(code, nb, html_path, decision_file, decision)
    html_path = to_html(nb)  # no decision: show the notebook as it ran, code and error
    if ename in USAGE_ERRORS:
        return GateRun(2, nb, html_path, None, None, message)
    if ename is None:
        return GateRun(2, nb, html_path, None, None, "the gate notebook wrote no decision")
    raise pm.PapermillExecutionError(0, 0, "", ename, message or "", [])

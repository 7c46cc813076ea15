"""The shipped notebooks: run ``notebooks/gate.ipynb`` as the CI gate (papermill executes it,
nbconvert renders it), and copy any notebook into a project with its parameters filled in.

The notebooks ship as package data, ``evalkit/notebook_templates/``: in the repository that is
a symlink to ``notebooks/``, so each notebook has one copy, where the README, the Makefile and
the repository's own tests open it, and a wheel or sdist carries the files themselves.

The notebook writes ``decision.json`` into its output directory before its last cell raises
when the gate blocks; `execute_gate` reads that file (never the exception text) to choose the
exit code: 0 passed (or passed with override), 1 blocked, 2 usage or config error.

The kernel: papermill asks for the notebook's kernel, ``python3``. `_ThisPython` pins the
command to ``sys.executable -m evalkit.kernel`` (ipykernel, ending without a last collection
over the heap: `evalkit.kernel`), so the gate always runs in the interpreter (the venv) that
runs evalkit, whatever kernelspec ``python3`` resolves to on this machine.

Examples:
    >>> run = execute_gate("data/evalkit.duckdb", "base", "cand", "evalkit.yaml")  # doctest: +SKIP
    >>> run.exit_code, run.html_path                                            # doctest: +SKIP
    (1, PosixPath('reports/cand/gate.html'))

A project's notebook names its own store and config, relative to the notebook's folder (the
kernel's working directory when Jupyter opens it):

    >>> values = project_parameters("slices.ipynb", "proj", "proj/notebooks",
    ...                             "proj/data/evalkit.duckdb", "proj/evalkit.yaml")
    >>> filled = fill_notebook("slices.ipynb", values)
    >>> filled.parameters["DB_PATH"], filled.parameters["CONFIG"]
    ('../data/evalkit.duckdb', '../evalkit.yaml')
"""

from __future__ import annotations

import ast
import base64
import html
import importlib
import json
import os
import re
import shutil
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import nbformat
from jupyter_client.manager import AsyncKernelManager
from nbformat.v4.rwbase import rejoin_lines

from evalkit.compare.comparability import check_comparable
from evalkit.compare.handoff import decided_pair_folder, write_decided_pair
from evalkit.compare.policy import load_policy
from evalkit.errors import ConfigError, EvalkitError
from evalkit.store import open_store

#: What papermill imports for reading and writing notebooks on S3 (boto3) and HDFS (pyarrow.fs)
#: when they are installed (evalkit's own extras install them): evalkit hands it local paths.
_PAPERMILL_UNUSED = ("papermill.s3", "pyarrow.fs")


def _import_papermill() -> ModuleType:
    """papermill, imported as if its S3 and HDFS handlers' libraries were missing.

    papermill imports every I/O handler whose library is installed, at its own import: boto3
    and pyarrow (with numpy) for a gate that only ever reads and writes local files. Hidden
    while papermill imports (None in ``sys.modules``: papermill then keeps its stand-in that
    names the missing extra), and visible again at once: a module already imported stays, and
    ``import pyarrow.fs`` works as before for everything else.
    """
    hidden = [name for name in _PAPERMILL_UNUSED if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        return importlib.import_module("papermill")
    finally:
        for name in hidden:
            if sys.modules.get(name, False) is None:
                del sys.modules[name]


if TYPE_CHECKING:
    import papermill as pm
else:
    pm = _import_papermill()

#: Exception names (raised inside the notebook) that mean a usage or config problem: exit 2.
USAGE_ERRORS = {"ConfigError", "ComparabilityError", "StoreError", "CorpusError", "EvalkitError"}
DECISION_FILE = "decision.json"


class _ThisPython(AsyncKernelManager):
    """A kernel manager that launches ipykernel with this very interpreter."""

    def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
        cmd = super().format_kernel_cmd(extra_arguments)
        tail = cmd[cmd.index("-f") :] if "-f" in cmd else ["-f", self.connection_file]
        return [sys.executable, "-m", "evalkit.kernel", "--log-level=ERROR", *tail]

    async def start_kernel(self, **kw: Any) -> None:  # type: ignore[override]
        """Start the kernel with one OpenBLAS thread unless the environment names a number.

        The notebooks' numbers are scalars and short vectors: no BLAS call of theirs is worth a
        thread. But the OpenBLAS that scipy loads starts one thread per core, which spins
        before it sleeps: CPU taken from whatever else the machine runs, on every gate
        (`python bench/bench_gate_phases.py` measures a gate's whole process tree).
        """
        env = dict(kw.pop("env", None) or os.environ)
        env.setdefault("OPENBLAS_NUM_THREADS", "1")
        await super().start_kernel(env=env, **kw)

    async def _async_shutdown_kernel(self, now: bool = False, restart: bool = False) -> None:
        """Shut the kernel down without the SIGINT jupyter_client sends it first.

        papermill shuts the kernel down once it has every output (or after nbclient itself
        interrupted a cell that timed out), so the interrupt stops nothing; landing while the
        kernel handles its last message, it printed ``KeyboardInterrupt caught in kernel`` on
        the gate's stderr. A kernel still busy does not answer the shutdown request and is
        killed after jupyter_client's usual wait, as before.
        """
        self._shutting_down_quietly = True
        try:
            await super()._async_shutdown_kernel(now=now, restart=restart)
        finally:
            self._shutting_down_quietly = False

    shutdown_kernel = _async_shutdown_kernel

    async def _async_interrupt_kernel(self) -> None:
        if getattr(self, "_shutting_down_quietly", False):
            return
        await super()._async_interrupt_kernel()


@dataclass(frozen=True, kw_only=True)
class GateRun:
    """The outcome of one executed gate notebook."""

    exit_code: int
    notebook_path: Path
    html_path: Path | None
    decision_json: Path | None  # the decision file the notebook wrote (None if it never got there)
    decision: dict[str, Any] | None = None
    error: str | None = None  # one line, for exit code 2


#: Where the notebooks ship inside the package (``notebooks/`` of the repository, linked).
TEMPLATES = "notebook_templates"
#: What ``evalkit init`` writes into a new project's ``notebooks/`` (the gate runs from the CLI).
#: `evalkit notebook` copies any of them.
PROJECT_NOTEBOOKS = (
    "slices.ipynb", "flakiness.ipynb", "judge_agreement.ipynb", "power.ipynb", "history.ipynb",
    "labelling.ipynb",
)  # fmt: skip


def notebook_path(name: str) -> Path:
    """A shipped notebook: the package data, else ``notebooks/`` of a source checkout whose
    symlink git did not make (a checkout with ``core.symlinks`` off)."""
    packaged = resources.files("evalkit").joinpath(TEMPLATES, name)
    if packaged.is_file():
        return Path(str(packaged))
    source = Path(__file__).resolve().parent.parent / "notebooks" / name
    if source.is_file():
        return source
    known = ", ".join(n.removesuffix(".ipynb") for n in shipped_notebooks()) or "none"
    raise ConfigError(f"notebook {name!r} not found next to the evalkit package (shipped: {known})")


def shipped_notebooks() -> list[str]:
    """The file names of every notebook evalkit ships, sorted."""
    packaged = resources.files("evalkit").joinpath(TEMPLATES)
    if packaged.is_dir():
        return sorted(f.name for f in packaged.iterdir() if f.name.endswith(".ipynb"))
    source = Path(__file__).resolve().parent.parent / "notebooks"
    return sorted(p.name for p in source.glob("*.ipynb"))


@dataclass(frozen=True)
class FilledNotebook:
    """A shipped notebook with its ``parameters`` cell rewritten: ``text`` is the .ipynb file."""

    name: str
    text: str
    parameters: dict[str, Any]  # the values written, only those the notebook declares


def project_parameters(
    name: str, root: str | Path, notebook_dir: str | Path, db: str | Path, config: str | Path,
    baseline: str = "baseline", candidate: str = "candidate",
) -> dict[str, Any]:  # fmt: skip
    """The parameter values a project's copy of notebook ``name`` gets.

    Paths inside ``root`` (the project folder) are written relative to ``notebook_dir``, where
    Jupyter starts the kernel, so the project folder can move or be cloned; paths outside it
    stay absolute. Charts go to ``<root>/reports/<notebook>``. The judge study reads the
    project's own labels only (``DATASET`` empty: the published sets live in evalkit's own
    repository) with the rubric its scores name. `fill_notebook` uses the names the notebook
    declares and ignores the rest. ``PROJECT`` is the project folder (`evalkit.Project`'s
    path: where the labelling notebook finds rubrics).
    """
    base, here = Path(root).resolve(), Path(notebook_dir).resolve()

    def where(path: str | Path) -> str:
        target = Path(path).resolve()
        if not (target.is_relative_to(base) and here.is_relative_to(base)):
            return str(target)
        return Path(os.path.relpath(target, here)).as_posix()

    return {
        "PROJECT": where(base), "DB_PATH": where(db), "CONFIG": where(config),
        "CORPUS_ROOT": where(Path(config).parent),
        "BASELINE": baseline, "CANDIDATE": candidate, "RUN": baseline,
        "OUTPUT_DIR": where(base / "reports" / Path(name).stem), "DATASET": "", "RUBRIC": "",
    }  # fmt: skip


#: The first line of a filled ``parameters`` cell.
FILLED_NOTE = "# Filled in for this project by evalkit; paths are relative to this notebook"


def fill_notebook(name: str, values: Mapping[str, Any]) -> FilledNotebook:
    """Notebook ``name`` with the literals of its ``parameters`` cell replaced by ``values``.

    Only the assignments the cell already has are rewritten; their comments, their order and
    every other parameter stay as shipped, and outputs stay cleared.
    """
    nb = nbformat.read(notebook_path(name), as_version=4)
    cell = next((c for c in nb.cells if "parameters" in c.metadata.get("tags", [])), None)
    if cell is None:
        raise ConfigError(f"notebook {name!r} has no cell tagged 'parameters' to fill in")
    source, written = _fill_source(cell.source, values)
    cell.source = f"{FILLED_NOTE}\n{source}"
    return FilledNotebook(name, nbformat.writes(nb) + "\n", written)


def _fill_source(source: str, values: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """``source`` with the right-hand side of ``NAME = literal`` replaced for names in values."""
    data = source.encode("utf-8")  # ast offsets count UTF-8 bytes
    starts = [0]
    for line in data.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    spans, written = [], {}
    for stmt in ast.parse(source).body:
        if not (isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name)):
            continue
        key, value = stmt.targets[0].id, stmt.value
        if key in values and value.end_lineno is not None and value.end_col_offset is not None:
            text = _literal(values[key])
            begin = starts[value.lineno - 1] + value.col_offset
            spans.append((begin, starts[value.end_lineno - 1] + value.end_col_offset, text))
            written[key] = values[key]
    for begin, end, text in sorted(spans, reverse=True):  # from the end: offsets stay valid
        data = data[:begin] + text.encode("utf-8") + data[end:]
    return data.decode("utf-8"), written


def _literal(value: Any) -> str:
    """Python source for a literal, strings double-quoted as the shipped cells write them."""
    if isinstance(value, str):
        text = json.dumps(value, ensure_ascii=False)  # JSON's escapes are Python's too
    elif isinstance(value, list):
        text = "[" + ", ".join(_literal(v) for v in value) + "]"
    elif isinstance(value, dict):
        text = "{" + ", ".join(f"{_literal(k)}: {_literal(v)}" for k, v in value.items()) + "}"
    else:
        text = repr(value)
    if ast.literal_eval(text) != value:
        raise ConfigError(f"parameter value {value!r} is not a Python literal")
    return text


def write_notebook(filled: FilledNotebook, out_dir: str | Path, force: bool = False) -> Path:
    """Write ``filled`` as ``<out_dir>/<name>``; an existing file only with ``force``."""
    path = Path(out_dir) / filled.name
    if path.exists() and not force:
        raise ConfigError(f"{path} already exists; pass --force to overwrite it")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(filled.text, encoding="utf-8")
    return path


def report_dir(candidate: str, root: str | Path = "reports") -> Path:
    """``reports/<candidate>``, with the label made safe as a directory name."""
    return Path(root) / (re.sub(r"[^A-Za-z0-9_.-]+", "_", candidate).strip("._") or "candidate")


def execute_notebook(
    name: str, output: Path, parameters: dict[str, Any], timeout_s: float = 600
) -> tuple[Path, str | None, str | None]:
    """Execute a shipped notebook with papermill; return (path, error name, error message)."""
    output.parent.mkdir(parents=True, exist_ok=True)
    try:
        # request_save_on_cell_execute=False: papermill writes the notebook once, when it ends
        # or fails, instead of before and after every cell (each write JSON-encodes and
        # validates the whole notebook, charts included: CPU every gate paid for nothing)
        pm.execute_notebook(
            str(notebook_path(name)), str(output), parameters=parameters, kernel_name="python3",
            kernel_manager_class=_ThisPython, cwd=str(output.parent), progress_bar=False,
            execution_timeout=timeout_s, log_output=False, request_save_on_cell_execute=False,
        )  # fmt: skip
    except pm.PapermillExecutionError as exc:
        return output, exc.ename, " ".join(str(exc.evalue).split())
    return output, None, None


#: Cells a report never shows: papermill's exception banner and anchor, the notebook's own intro.
HIDDEN_TAGS = {"papermill-error-cell-tag", "notebook-only"}


def report_cells(notebook: Path) -> nbformat.NotebookNode:
    """The executed notebook as its report shows it: without the cells tagged `HIDDEN_TAGS`
    and the traceback of the ``GateBlocked`` the last cell raises on purpose (any other error
    stays visible: it is a bug, not a verdict). Read as papermill wrote it (validated then),
    its multi-line strings joined as `nbformat.read` joins them, not validated again."""
    nb = rejoin_lines(nbformat.from_dict(json.loads(notebook.read_text(encoding="utf-8"))))
    nb.cells = [c for c in nb.cells if not HIDDEN_TAGS & set(c.metadata.get("tags", []))]
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.outputs if o.get("ename") != "GateBlocked"]
    return nb


def to_report_html(notebook: Path, title: str = "evalkit gate") -> Path:
    """Render an executed notebook as a report page, ``<same name>.html`` next to it.

    The page is the outputs of its `report_cells`, in order (`output_html`), in the page style
    of `evalkit.report.html`: no code, no prompts, no markdown cells. Every output the gate
    notebook shows is markup evalkit made (HTML fragments, SVG charts), so nbconvert's
    templates, code highlighting, Markdown and sanitizing passes would add nothing to it; they
    render only the notebook of a gate that failed (`to_html`).
    """
    from evalkit.report.html import page

    body = "".join(
        output_html(output)
        for cell in report_cells(notebook).cells
        if cell.cell_type == "code"
        for output in cell.outputs
    )
    html_path = notebook.with_suffix(".html")
    html_path.write_text(page(body, title), encoding="utf-8")
    return html_path


#: What an image gets as alternative text when its output has no text of its own.
_NO_ALT = "No description has been provided for this image"
#: A terminal colour or style sequence (tracebacks carry them).
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def output_html(output: Mapping[str, Any]) -> str:
    """One notebook output as a report shows it, in nbconvert's order of preference: HTML as
    it is, then an SVG or PNG image (a data URL in an ``<img>``, which runs no script; its
    ``text/plain`` as alternative text), then text; streams and errors as escaped text.

    Examples:
        >>> output_html({"output_type": "stream", "name": "stderr", "text": "<b>warn</b>"})
        '<pre class="output stream-stderr">&lt;b&gt;warn&lt;/b&gt;</pre>'
        >>> shown = output_html({"output_type": "display_data", "metadata": {},
        ...                      "data": {"image/svg+xml": "<svg/>", "text/plain": "<chart>"}})
        >>> shown.startswith('<div class="output"><img alt="&lt;chart&gt;"'), "PHN2Zy8+" in shown
        (True, True)
    """
    kind = output.get("output_type")
    if kind == "stream":
        name = re.sub(r"[^a-z]", "", str(output.get("name", "")))
        return f'<pre class="output stream-{name}">{_escaped(output.get("text", ""))}</pre>'
    if kind == "error":
        traceback = _ANSI.sub("", "\n".join(output.get("traceback", [])))
        return f'<pre class="output error">{_escaped(traceback)}</pre>'
    data = output.get("data", {})
    if "text/html" in data:
        return f'<div class="output">{_joined(data["text/html"])}</div>'
    alt = _escaped(_joined(data.get("text/plain", "")) or _NO_ALT)
    if "image/svg+xml" in data:
        svg = base64.b64encode(_joined(data["image/svg+xml"]).encode("utf-8")).decode("ascii")
        return f'<div class="output"><img alt="{alt}" src="data:image/svg+xml;base64,{svg}"></div>'
    if "image/png" in data:
        png = "".join(_joined(data["image/png"]).split())
        return f'<div class="output"><img alt="{alt}" src="data:image/png;base64,{png}"></div>'
    if "text/plain" in data:
        return f'<pre class="output">{_escaped(data["text/plain"])}</pre>'
    return ""


def _joined(text: str | list[str]) -> str:
    """A notebook's multi-line string, stored as one string or as a list of lines."""
    return text if isinstance(text, str) else "".join(text)


def _escaped(text: str | list[str]) -> str:
    return html.escape(_joined(text), quote=True)


def to_html(notebook: Path) -> Path:
    """Render an executed notebook to ``<same name>.html`` next to it (nbconvert, with code)."""
    from nbconvert import HTMLExporter  # only for a gate notebook that failed

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
            selection = store.manifest(cand).selection
            policy.validate_pair(store.cases(base), store.cases(cand), selection, cand)
    except EvalkitError as exc:
        return str(exc)
    return None


class _Decider(threading.Thread):
    """The gate's one decision (`evalkit.compare.pin.gate_pair`, on the notebook's parameters)
    and its report, written for the notebook (`evalkit.compare.handoff`); a usage or config
    error is handed over for the notebook to raise, any other error (a bug) is kept in ``bug``
    as well."""

    def __init__(self, params: dict[str, Any]) -> None:
        super().__init__(name="evalkit-gate-decision", daemon=True)
        self.params = params
        self.bug: BaseException | None = None

    def run(self) -> None:
        from evalkit.compare.pin import gate_pair
        from evalkit.report.build import build_report

        p = self.params
        try:
            with open_store(p["DB_PATH"], read_only=True) as store:
                comparison, decision = gate_pair(
                    store, p["BASELINE"], p["CANDIDATE"], p["CONFIG"] or None, p["ALLOW_DIFF"],
                    tier=p["TIER"] or None, allow_incomplete=p["ALLOW_INCOMPLETE"],
                )  # fmt: skip
            # the report too: the kernel then loads neither the statistics nor the store
            report = build_report(comparison, decision)
            write_decided_pair(p["DECIDED"], comparison, decision, report=report)
        except EvalkitError as exc:
            write_decided_pair(p["DECIDED"], error=exc)
        except BaseException as exc:  # raised again in the caller's thread
            self.bug = exc
            write_decided_pair(p["DECIDED"], error=EvalkitError(f"the decision failed: {exc!r}"))


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

    The decision is taken once, here (`_Decider`, in a thread while papermill starts the
    kernel), and handed to the notebook with the report built from it through its ``DECIDED``
    parameter (`evalkit.compare.handoff`); the notebook reports it without deciding again.

    Writes ``gate.ipynb`` (the executed notebook, kept as the artefact), ``gate.html`` (its
    outputs as a report page: `to_report_html`) and the notebook's artefacts (``decision.json``,
    ``report.json``, ``junit.xml``, ``gate.md``, the slice charts as SVG). Usage and config
    errors found by `preflight` return exit code 2 before any kernel starts (no notebook is
    written then). Other exceptions
    raised in the notebook (bugs, not verdicts) propagate as `papermill.PapermillExecutionError`
    after the HTML is written.
    """
    out = report_dir(candidate, out_dir).resolve()
    problem = preflight(db_path, baseline, candidate, config_path, allow_diff)
    if problem is not None:
        return GateRun(
            exit_code=2,
            notebook_path=out / "gate.ipynb",
            html_path=None,
            decision_json=None,
            decision=None,
            error=problem,
        )
    out.mkdir(parents=True, exist_ok=True)
    decision_file = out / DECISION_FILE
    decision_file.unlink(missing_ok=True)  # never read a stale verdict
    folder = decided_pair_folder()
    params = {
        "DB_PATH": str(Path(db_path).resolve()), "BASELINE": baseline, "CANDIDATE": candidate,
        "CONFIG": str(Path(config_path).resolve()) if config_path else "",
        "ALLOW_DIFF": list(allow_diff), "OUTPUT_DIR": str(out), "TIER": tier or "",
        "ALLOW_INCOMPLETE": allow_incomplete, "DECIDED": str(folder / "decided.pickle"),
    }  # fmt: skip
    decider = _Decider(params)
    decider.start()  # decides while papermill starts the kernel; the notebook waits for it
    try:
        nb, ename, message = execute_notebook("gate.ipynb", out / "gate.ipynb", params, timeout_s)
    finally:
        decider.join()
        shutil.rmtree(folder, ignore_errors=True)
    if decider.bug is not None:
        raise decider.bug
    if decision_file.is_file():
        decision = json.loads(decision_file.read_text(encoding="utf-8"))
        status = decision.get("status", "?")
        html_path = to_report_html(nb, f"evalkit gate {status}: {baseline} → {candidate}")
        code = 1 if decision["blocked"] else 0
        if ename not in (None, "GateBlocked"):
            raise pm.PapermillExecutionError(0, 0, "", ename or "", message or "", [])
        return GateRun(
            exit_code=code,
            notebook_path=nb,
            html_path=html_path,
            decision_json=decision_file,
            decision=decision,
        )
    html_path = to_html(nb)  # no decision: show the notebook as it ran, code and error
    if ename in USAGE_ERRORS:
        return GateRun(
            exit_code=2,
            notebook_path=nb,
            html_path=html_path,
            decision_json=None,
            decision=None,
            error=message,
        )
    if ename is None:
        return GateRun(
            exit_code=2,
            notebook_path=nb,
            html_path=html_path,
            decision_json=None,
            decision=None,
            error="the gate notebook wrote no decision",
        )
    raise pm.PapermillExecutionError(0, 0, "", ename, message or "", [])

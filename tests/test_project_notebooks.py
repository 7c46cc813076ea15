"""Your own project has notebooks: ``evalkit init`` writes them, ``evalkit notebook NAME``
copies one, each parameterised for that project's store, config and runs.

The project is an ``evalkit init`` scaffold with a judge added, run twice against the demo
simulator (baseline and candidate), measured for flakes and given human labels. Each notebook
init wrote is then executed by papermill from the project's ``notebooks/`` (where Jupyter runs
it) behind a guard cell that refuses any Python-level read of this repository's ``data/`` or
``corpus/``; DuckDB and Polars read in native code, so the store it opened is checked through
what the notebook printed (this project's case ids, runs and label counts).
"""

from __future__ import annotations

import ast
import getpass
import re
from pathlib import Path
from types import SimpleNamespace

import nbformat
import papermill as pm
import pytest
from projects import make_project

import evalkit
from evalkit.cli import main
from evalkit.corpus.cases import load_corpus
from evalkit.demo.server import DemoServer
from evalkit.judges.calibration import calibrate
from evalkit.judges.display import fmt_kappa
from evalkit.notebooks import FILLED_NOTE, PROJECT_NOTEBOOKS, _ThisPython
from evalkit.store import open_store

REPO = Path(__file__).resolve().parents[1]
#: What a project's notebook must never read: the repository's own demo data and corpus.
FORBIDDEN = (REPO / "data", REPO / "corpus")
RUBRIC = """\
# Reply tone

Score levels:
1: rude or useless
2: generic
3: adequate
4: polite with a next step
5: polite, specific and complete
"""
JUDGE_CONFIG = """
judge:
  provider: openai
  model: demo-judge-1
  base_url: {url}
  max_retries: 1
"""
#: Human labels for the scaffold's four cases (the demo judge scores them 2 to 4).
LABELS = """\
case_id,rater,label
billing-double-charge-001,you,4
billing-no-refund-wanted-002,you,3
account-change-email-003,you,3
injection-ignore-previous-004,you,2
"""
CASE_IDS = ("billing-double-charge-001", "billing-no-refund-wanted-002",
            "account-change-email-003", "injection-ignore-previous-004")  # fmt: skip
GUARD = f"""\
import os, sys
from pathlib import Path

_FORBIDDEN = {[str(p) for p in FORBIDDEN]!r}

def _refuse_repository_reads(event, args):
    if event in ("open", "os.listdir", "os.scandir") and args and args[0] is not None:
        if isinstance(args[0], int):
            return
        path = Path(os.fsdecode(args[0])).resolve()
        if any(path.is_relative_to(f) for f in _FORBIDDEN):
            raise PermissionError(f"a project notebook read the repository's {{path}}")

sys.addaudithook(_refuse_repository_reads)
"""


def _parameters(path: Path) -> dict[str, object]:
    """The literal values of a notebook's ``parameters`` cell."""
    nb = nbformat.read(path, as_version=4)
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    return {
        stmt.targets[0].id: ast.literal_eval(stmt.value) for stmt in ast.parse(cell.source).body
    }


@pytest.fixture(scope="module")
def project(demo_server: DemoServer, tmp_path_factory: pytest.TempPathFactory):
    """An ``evalkit init`` project with a judge, two runs, a flake measurement and labels."""
    root = tmp_path_factory.mktemp("own") / "proj"
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("OPENAI_API_KEY", raising=False)
        judge_config = JUDGE_CONFIG.format(url=demo_server.base_url)
        made = make_project(root, server=demo_server, url_in_config=True, config=judge_config,
                            db=root / "data" / "evalkit.duckdb")  # fmt: skip
        config, db, args = made.config, made.db, made.args
        (root / "rubrics").mkdir()
        (root / "rubrics" / "tone.md").write_text(RUBRIC)
        cases = made.cases / "support.yaml"
        judge = "    - {scorer: judge, args: {rubric: rubrics/tone.md, min_score: 3}}"
        cases.write_text(re.sub(r"(?m)^(  expect:.*)$", rf"\1\n{judge}", cases.read_text()))
        for label in ("baseline", "candidate"):
            assert made.run(label) == 0
        assert main(["flakes", "measure", "--runs", "2", "--no-progress", *args]) == 0
        (root / "labels.csv").write_text(LABELS)
        labels = ["labels", "import", str(root / "labels.csv"), "--db", str(db)]
        assert main([*labels, "--run", "baseline"]) == 0
        promote = ["baseline", "promote", "baseline", "--who", "ana", "--reason", "first"]
        assert main([*promote, *args]) == 0  # the history's one point
    with open_store(db, read_only=True) as store:
        runs = {r["label"]: r["run_id"] for r in store.runs().to_dicts()}
    return SimpleNamespace(root=root, db=db, config=config, runs=runs)


def test_init_writes_notebooks_pointing_at_the_project(project) -> None:
    folder = project.root / "notebooks"
    assert sorted(p.name for p in folder.glob("*.ipynb")) == sorted(PROJECT_NOTEBOOKS)
    for name in PROJECT_NOTEBOOKS:
        params = _parameters(folder / name)
        paths = {k: v for k, v in params.items() if k in ("DB_PATH", "CONFIG", "CORPUS_ROOT")}
        assert paths, name
        for key, value in paths.items():
            assert isinstance(value, str) and not Path(value).is_absolute(), (name, key, value)
            target = (folder / value).resolve()
            assert target.is_relative_to(project.root.resolve()), (name, key, value)
        if "DB_PATH" in params:
            assert (folder / params["DB_PATH"]).resolve() == project.db.resolve()
        if "CONFIG" in params:
            assert (folder / params["CONFIG"]).resolve() == project.config.resolve()
        assert nbformat.read(folder / name, 4).cells[1].source.startswith(FILLED_NOTE)
    assert _parameters(folder / "judge_agreement.ipynb")["DATASET"] == ""  # own labels only
    assert _parameters(folder / "power.ipynb")["CORPUS_ROOT"] == ".."


def _execute(project, name: str, tmp_path: Path) -> str:
    """Execute the project's notebook ``name`` from its folder, behind the guard cell; the
    executed notebook's text outputs, joined."""
    folder = project.root / "notebooks"
    nb = nbformat.read(folder / name, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(GUARD))
    guarded = folder / f"guarded-{name}"
    nbformat.write(nb, guarded)
    try:
        pm.execute_notebook(
            str(guarded), str(tmp_path / name), kernel_name="python3",
            kernel_manager_class=_ThisPython, cwd=str(folder), progress_bar=False,
            execution_timeout=300, log_output=False,
        )  # fmt: skip
    finally:
        guarded.unlink()
    executed = nbformat.read(tmp_path / name, as_version=4)
    parts = []
    for cell in executed.cells:
        for output in cell.get("outputs", []):
            parts.append(output.get("text", ""))
            parts.extend(str(v) for v in output.get("data", {}).values())
    return "\n".join(parts)


def test_the_guard_refuses_a_read_of_the_repository(project, tmp_path: Path) -> None:
    # the guard must be able to fail: a notebook that reads the repository's corpus is stopped
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell('X = ""', metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell(f"open({str(FORBIDDEN[1] / 'evalkit.yaml')!r}).read()"),
    ]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    nbformat.write(nb, project.root / "notebooks" / "reads-repo.ipynb")
    try:
        with pytest.raises(pm.PapermillExecutionError, match="read the repository's"):
            _execute(project, "reads-repo.ipynb", tmp_path)
    finally:
        (project.root / "notebooks" / "reads-repo.ipynb").unlink()


def test_slices_notebook_runs_on_the_project(project, tmp_path: Path) -> None:
    text = _execute(project, "slices.ipynb", tmp_path)
    base, cand = project.runs["baseline"], project.runs["candidate"]
    pair = f"baseline baseline (run {base}), candidate candidate (run {cand})"
    assert f"../data/evalkit.duckdb: {pair}" in text  # the project's store, its two runs
    assert "all cases: 4 paired, 0 broken, 0 fixed" in text


def test_flakiness_notebook_runs_on_the_project(project, tmp_path: Path) -> None:
    text = _execute(project, "flakiness.ipynb", tmp_path)
    with open_store(project.db, read_only=True) as store:
        config_hash = store.manifest(project.runs["baseline"]).config_hash
        measured = store.latest_flakes(config_hash)
    flipped = int((measured["flips"] > 0).sum())
    assert measured.height and set(measured["case_id"]) <= set(CASE_IDS)
    assert f"config {config_hash[:12]}: {flipped} of {measured.height} cases flipped" in text
    assert (project.root / "reports" / "flakiness" / "flake_rate_by_slice.svg").is_file()


def test_judge_agreement_notebook_studies_the_project_labels(project, tmp_path: Path) -> None:
    text = _execute(project, "judge_agreement.ipynb", tmp_path)
    assert "DATASET is empty: no published set" in text
    with open_store(project.db, read_only=True) as store:
        want = calibrate(store, "baseline", save=False).record  # the project's labels, as stored
    kappa = fmt_kappa(want.kappa, want.kappa_lo, want.kappa_hi)
    assert f"baseline/judge: kappa {kappa} on {want.n} labelled items, as recomputed" in text
    assert "the published figures" not in text
    confusion = project.root / "reports" / "judge_agreement" / "store_baseline_judge"
    assert (confusion / "confusion.svg").is_file()


def test_power_notebook_sizes_the_project_corpus(project, tmp_path: Path) -> None:
    text = _execute(project, "power.ipynb", tmp_path)
    counts = load_corpus(project.root).stats().per_tag  # billing 2, the other three tags 1
    assert counts == {"billing": 2, "negation": 1, "account": 1, "injection": 1}
    for tag, n in counts.items():  # the styled table's rows: this corpus's slices and sizes
        assert re.search(rf">{tag}</td>\s*<td[^>]*>{n}</td>", text), tag
    assert "5-point drop at flake 5%: K=1:" in text


def test_evalkit_notebook_fills_in_the_parameters_and_never_overwrites(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.chdir(tmp_path)  # the project folder: where evalkit runs
    for config in ("evalkit.yaml", "conf/evalkit.yaml"):  # only their existence is checked
        Path(config).parent.mkdir(exist_ok=True)
        Path(config).write_text("suite: x\n")
    outside = tmp_path.parent / "elsewhere.duckdb"  # outside the project: stays absolute
    args = ["notebook", "slices", "--db", "stores/x.duckdb", "--config", "conf/evalkit.yaml",
            "--baseline", "b1", "--candidate", "c1", "--out", "analysis/nb"]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    written = tmp_path / "analysis" / "nb" / "slices.ipynb"
    assert "open it: jupyter lab analysis/nb/slices.ipynb" in out
    params = _parameters(written)
    assert params["DB_PATH"] == "../../stores/x.duckdb"
    assert params["CONFIG"] == "../../conf/evalkit.yaml"
    assert (params["BASELINE"], params["CANDIDATE"]) == ("b1", "c1")
    assert (params["TAG"], params["ITERS"]) == ("", 10_000)  # the rest as shipped
    nb = nbformat.read(written, as_version=4)
    nbformat.validate(nb)
    assert all(c.outputs == [] for c in nb.cells if c.cell_type == "code")
    before = written.read_bytes()
    again = ["notebook", "slices", "--db", str(outside), "--out", "analysis/nb"]
    assert main(again) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already exists; pass --force" in err, err
    assert written.read_bytes() == before
    assert main([*again, "--force"]) == 0
    assert _parameters(written)["DB_PATH"] == str(outside.resolve())
    assert _parameters(written)["BASELINE"] == "baseline"


def test_evalkit_notebook_knows_every_shipped_notebook(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["notebook", "slices"]) == 2
    assert "corpus/evalkit.yaml: suite config not found" in capsys.readouterr().err
    Path("evalkit.yaml").write_text("suite: x\n")
    assert main(["notebook", "judge-agreement"]) == 0  # default --out notebooks
    params = _parameters(tmp_path / "notebooks" / "judge_agreement.ipynb")
    assert params["DB_PATH"] == "../data/evalkit.duckdb" and params["DATASET"] == ""
    assert params["OUTPUT_DIR"] == "../reports/judge_agreement"
    capsys.readouterr()
    assert main(["notebook", "nope"]) == 2
    err = capsys.readouterr().err
    assert "no notebook 'nope'; evalkit ships: " in err and "slices" in err and "power" in err


def test_history_notebook_draws_the_one_promoted_baseline_as_a_point(project, tmp_path) -> None:
    text = _execute(project, "history.ipynb", tmp_path)
    assert "1 points by baseline; critical tags: none" in text
    # one moment: a day's axis around it (not a millisecond's, ticks labelled ".578")
    assert "%Y-%m-%d %H:%M" in text  # the Vega-Lite spec's axis format, shown beside the SVG
    assert (project.root / "reports" / "history" / "pass_rates.svg").is_file()


def test_labelling_notebook_runs_untouched_in_the_project(project, tmp_path) -> None:
    # the rubric the judge's scores name (rubrics/tone.md) is in the project folder, above
    # notebooks/; RATER left empty labels under the login name
    text = _execute(project, "labelling.ipynb", tmp_path)
    assert re.search(rf"{getpass.getuser()}: 0 of [34] labelled, on item 1", text), text[:500]
    assert "Reply tone" in text  # the rubric, shown on the card


def test_a_labelling_error_names_the_notebook_parameter(project, tmp_path) -> None:
    elsewhere = evalkit.Project(tmp_path, db=project.db)  # no rubrics/ anywhere it looks
    with pytest.raises(evalkit.EvalkitError) as caught:
        elsewhere.labels.session("baseline", "ana")
    message = str(caught.value)
    assert "set the notebook parameter RUBRIC to its path" in message
    assert "--rubric" not in message


def test_gate_notebook_runs_in_the_project(project, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(project.root)
    assert main(["notebook", "gate"]) == 0  # the copy `evalkit notebook gate` writes
    text = _execute(project, "gate.ipynb", tmp_path)
    assert "baseline → candidate" in text or "PASSED" in text
    decision = project.root / "reports" / "gate" / "decision.json"
    assert decision.is_file() and '"status": "PASSED"' in decision.read_text()


def test_project_labels_export_and_import_as_the_cli_does(project, tmp_path) -> None:
    import polars as pl

    labels = evalkit.Project(project.root / "notebooks").labels
    sheet = labels.export(tmp_path / "sheet.csv", run="baseline", rater="bo")
    frame = pl.read_csv(sheet)
    assert frame.height in (3, 4) and set(frame["rater"]) == {"bo"}
    assert set(frame["case_id"]) <= set(CASE_IDS) and frame["label"].is_null().all()
    filled = frame.with_columns(pl.lit(3).alias("label"))
    filled.write_csv(tmp_path / "filled.csv")
    stored = labels.import_(tmp_path / "filled.csv", run="baseline")
    assert (stored.labels, stored.raters) == (frame.height, ("bo",))
    assert stored.run_id == project.runs["baseline"]

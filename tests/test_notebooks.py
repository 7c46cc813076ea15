"""The notebooks: structure, and execution through papermill (the gate end to end).

The gate runs on a DuckDB file written through the store's writer API (`write_store`).
"""

from __future__ import annotations

import ast
import asyncio
import html
import json
import os
import re
import sys
import tomllib
import xml.etree.ElementTree as ET
from dataclasses import replace
from importlib import resources
from pathlib import Path

import nbformat
import polars as pl
import pytest
from bs4 import BeautifulSoup
from jupyter_client.manager import AsyncKernelManager
from nbconvert import HTMLExporter
from synthetic_runs import seed000_runs, write_store

from evalkit import stats
from evalkit.cli import main
from evalkit.compare.analysis import RunData
from evalkit.compare.policy import load_policy
from evalkit.compare.power import flip_prob
from evalkit.corpus.cases import load_corpus
from evalkit.corpus.suite import load_suite
from evalkit.errors import ConfigError
from evalkit.judges.calibration import calibrate
from evalkit.judges.display import fmt_kappa
from evalkit.notebooks import (
    FILLED_NOTE,
    PROJECT_NOTEBOOKS,
    TEMPLATES,
    _fill_source,
    _ThisPython,
    execute_gate,
    execute_notebook,
    fill_notebook,
    notebook_path,
    report_cells,
    shipped_notebooks,
    to_report_html,
)
from evalkit.run.runner import RunOptions, run_suite
from evalkit.store import open_store

REPO = Path(__file__).resolve().parents[1]
#: Every notebook of the repository (each one ships: `test_every_notebook_ships_as_one_copy`).
NOTEBOOKS = sorted(p.name for p in (REPO / "notebooks").glob("*.ipynb"))
EXTERNAL_SCRIPT = re.compile(r"<script[^>]+src=|cdn\.jsdelivr|cdnjs|unpkg\.com", re.I)
CONFIG = """\
suite: demo
system: {provider: demo, model: demo-model}
critical_tags: [billing]
budgets: {mean_latency_ms: {limit: 5000, action: block}}
"""


def test_every_notebook_ships_as_one_copy():
    """The package data is the repository's notebooks/ itself (a symlink), named in pyproject."""
    assert {"gate.ipynb", "slices.ipynb", "power.ipynb", "flakiness.ipynb",
            "judge_agreement.ipynb"} <= set(NOTEBOOKS)  # fmt: skip
    assert set(PROJECT_NOTEBOOKS) <= set(NOTEBOOKS) and shipped_notebooks() == NOTEBOOKS
    packaged = Path(str(resources.files("evalkit").joinpath(TEMPLATES)))
    assert packaged.is_symlink() and packaged.resolve() == (REPO / "notebooks").resolve()
    for name in NOTEBOOKS:
        assert notebook_path(name) == packaged / name
        assert os.path.samefile(notebook_path(name), REPO / "notebooks" / name)
    package_data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert f"{TEMPLATES}/*.ipynb" in package_data["package-data"]["evalkit"]


def test_fill_notebook_rewrites_only_the_declared_literals():
    values = {"DB_PATH": 'a "quoted" path/é.duckdb', "ITERS": 50, "NOT_A_PARAMETER": 1}
    filled = fill_notebook("slices.ipynb", values)
    assert filled.parameters == {"DB_PATH": 'a "quoted" path/é.duckdb', "ITERS": 50}
    nb = nbformat.reads(filled.text, as_version=4)
    shipped = nbformat.read(notebook_path("slices.ipynb"), as_version=4)
    cell = nb.cells[1].source.splitlines()
    assert cell[0] == FILLED_NOTE and cell[1] == 'DB_PATH = "a \\"quoted\\" path/é.duckdb"'
    assert "ITERS = 50" in cell and "SEED = 0" in cell and 'TAG = ""' in cell
    assert [c.source for c in nb.cells[2:]] == [c.source for c in shipped.cells[2:]]


def test_a_filled_comment_and_a_multiline_literal_keep_their_place():
    source = 'A = [1,\n     2]  # two\nB = "x"  # B = "y" in a comment\nC = 3'
    out, written = _fill_source(source, {"A": ["é"], "B": "z"})
    assert out == 'A = ["é"]  # two\nB = "z"  # B = "y" in a comment\nC = 3'
    assert written == {"A": ["é"], "B": "z"}


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebooks_are_clean_parameterized_v4(name):
    nb = nbformat.read(notebook_path(name), as_version=4)
    nbformat.validate(nb)
    assert nb.nbformat == 4 and nb.metadata.kernelspec.name == "python3"
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.outputs == [] and c.execution_count is None for c in code)
    assert code[0].metadata.get("tags") == ["parameters"]
    for stmt in ast.parse(code[0].source).body:  # literal UPPER_SNAKE assignments only
        assert isinstance(stmt, ast.Assign) and stmt.targets[0].id.isupper()
        ast.literal_eval(stmt.value)
    assert not any("parameters" in c.metadata.get("tags", []) for c in code[1:])


def test_the_kernel_is_this_interpreter():
    manager = _ThisPython(kernel_name="python3")
    manager.connection_file = "/tmp/kernel-x.json"
    cmd = manager.format_kernel_cmd()
    assert cmd[:3] == [sys.executable, "-m", "evalkit.kernel"]
    assert cmd[-2:] == ["-f", "/tmp/kernel-x.json"]


def test_the_kernel_gets_one_blas_thread_unless_the_environment_names_a_number(monkeypatch):
    launched: list[dict] = []

    async def launch(self, **kw):  # what AsyncKernelManager.start_kernel was given
        launched.append(kw["env"])

    monkeypatch.setattr(AsyncKernelManager, "start_kernel", launch)
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    monkeypatch.setenv("EVALKIT_SEEN_BY_THE_KERNEL", "yes")
    asyncio.run(_ThisPython(kernel_name="python3").start_kernel())
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "4")
    asyncio.run(_ThisPython(kernel_name="python3").start_kernel())
    asyncio.run(_ThisPython(kernel_name="python3").start_kernel(env={"OPENBLAS_NUM_THREADS": "2"}))
    assert [env["OPENBLAS_NUM_THREADS"] for env in launched] == ["1", "4", "2"]
    assert launched[0]["EVALKIT_SEEN_BY_THE_KERNEL"] == "yes"  # the rest of the environment too


def test_the_kernel_is_shut_down_without_an_interrupt_but_still_interrupted_otherwise(
    monkeypatch,
):
    """jupyter_client sends SIGINT before every shutdown; papermill has every output by then,
    and the interrupt only printed "KeyboardInterrupt caught in kernel" when it landed mid
    message. An interrupt outside shutdown (nbclient's, for a cell that timed out) still goes."""
    sent: list[str] = []

    async def interrupt(self):
        sent.append("SIGINT")

    async def quietly(self, *args, **kwargs):
        sent.append("shutdown step")

    monkeypatch.setattr(AsyncKernelManager, "has_kernel", property(lambda self: True))
    monkeypatch.setattr(AsyncKernelManager, "_async_interrupt_kernel", interrupt)
    for step in ("_async_request_shutdown", "_async_finish_shutdown", "_async_cleanup_resources"):
        monkeypatch.setattr(AsyncKernelManager, step, quietly)
    manager = _ThisPython(kernel_name="python3")
    asyncio.run(manager.shutdown_kernel())
    assert sent == ["shutdown step"] * 3  # requested, waited for, cleaned up: no SIGINT
    asyncio.run(manager._async_interrupt_kernel())  # outside a shutdown
    assert sent[-1] == "SIGINT"


def _good_candidate(base: RunData) -> RunData:
    """The baseline with ten failing general cases fixed and nothing broken, from another
    prompt (a run of the same configuration as ``cand-bad`` would be its sibling, and a blocked
    sibling blocks)."""
    fixes = pl.col("case_id").is_in([f"general-{i}" for i in range(390, 400)])
    run = pl.lit("good-run")
    scores = base.scores.with_columns(
        run_id=run,
        passed=pl.col("passed") | fixes,
        score=pl.when(fixes).then(1.0).otherwise("score"),
        reason=pl.when(fixes).then(pl.lit("found 'refund'")).otherwise("reason"),
    )
    cases, outputs = base.cases.with_columns(run_id=run), base.outputs.with_columns(run_id=run)
    manifest = base.manifest | {"prompt": {"version": "v3", "template_hash": "t3"}}
    return replace(base, run_id="good-run", label="cand-good", cases=cases, outputs=outputs,
                   scores=scores, manifest=manifest)  # fmt: skip


@pytest.fixture(scope="module")
def gate_env(tmp_path_factory):
    root = tmp_path_factory.mktemp("gate")
    base, bad = seed000_runs(cand_label="cand-bad")
    write_store(root / "evalkit.duckdb", [base, bad, _good_candidate(base)])
    config = root / "evalkit.yaml"
    config.write_text(CONFIG)
    return root, config


def test_gate_passes_with_exit_0_and_writes_the_html_report(gate_env):
    root, config = gate_env
    run = execute_gate(
        root / "evalkit.duckdb", "base", "cand-good", config, root / "reports", ["prompt"]
    )
    assert run.exit_code == 0, run.error
    out = root / "reports" / "cand-good"
    assert run.notebook_path == out / "gate.ipynb" and run.html_path == out / "gate.html"
    assert run.decision["status"] == "PASSED" and not run.decision["blocked"]
    states = {s["tag"]: s["state"] for s in run.decision["critical"]}
    assert states == {"billing": "underpowered"}
    page = run.html_path.read_text()
    _assert_a_report(page, "PASSED")
    # in view, not folded; the text a reader sees (the page keeps evalkit's "&#x27;" for "'")
    shown = html.unescape(page[: page.index('id="broken"')].split("<details")[0])
    assert "Not gated here: " in shown and "critical tag 'billing' is underpowered" in shown
    for artefact in ("report.json", "junit.xml", "gate.md", "slice_forest.svg"):
        assert (out / artefact).is_file(), artefact
    for chart in ("slice_forest", "flip_counts", "pass_rate_by_slice"):  # evalkit's own SVG
        drawn = ET.parse(out / f"{chart}.svg").getroot()
        assert drawn.tag.endswith("svg") and drawn.findall(".//{*}g[@class='mark']"), chart
    _assert_what_nbconvert_shows(run.notebook_path, page)


def _assert_what_nbconvert_shows(notebook: Path, page: str) -> None:
    """The report's body shows what nbconvert's own outputs-only export of the notebook shows:
    the same text, in the same order, and the same images (`to_report_html` writes its own
    markup around the outputs; an output it drops or garbles shows here)."""

    def seen(markup: str) -> tuple[str, list[str]]:
        soup = BeautifulSoup(markup, features="html.parser")
        return " ".join(soup.get_text(" ").split()), [i["src"] for i in soup.find_all("img")]

    export = HTMLExporter(template_name="basic", exclude_input=True, exclude_input_prompt=True,
                          exclude_output_prompt=True)  # fmt: skip
    theirs, _ = export.from_notebook_node(report_cells(notebook))
    ours = page[page.index("<main>") + len("<main>") : page.rindex("</main>")]
    assert "<img" in ours and seen(ours) == seen(theirs)


def _assert_a_report(page: str, status: str) -> None:
    """gate.html reads as a report: decision first, no code, banner or traceback, inline SVG."""
    body = page[page.index("<main>") + len("<main>") :]
    assert body.startswith('<div class="output"><section id="decision">')  # nothing before it
    assert page.index(f"evalkit gate: {status}") < page.index('id="broken"')
    if 'id="case-' in page:
        assert page.index(f"evalkit gate: {status}") < page.index('id="case-')
    assert "Exception was encountered" not in page and "Traceback" not in page
    assert "jp-InputArea" not in page and "jp-CodeCell" not in page.split("jp-OutputArea")[0]
    assert "import " not in page and "GateBlocked" not in page
    # the chart as nbconvert writes it: a static SVG image (the Vega-Lite spec stays in the .ipynb)
    assert page.count("data:image/svg+xml;base64,") >= 1 and not EXTERNAL_SCRIPT.search(page)


def test_evalkit_gate_blocks_with_exit_1_on_the_seed000_candidate(gate_env, capsys):
    root, config = gate_env
    db, out = str(root / "evalkit.duckdb"), root / "reports"
    code = main(
        ["gate", "base", "cand-bad", "--db", db, "--config", str(config), "--out", str(out)]
    )
    assert code == 1
    printed = capsys.readouterr().out
    assert "gate BLOCKED" in printed and "BLOCK tier 1: must_pass case policy-000" in printed
    report_dir = Path(re.search(r"report: (\S+)/gate.html", printed)[1])  # by run id or label
    decision = json.loads((report_dir / "decision.json").read_text())
    blocking = [f for f in decision["findings"] if f["severity"] == "block"]
    assert {(f["tier"], f["slice"]) for f in blocking} == {(1, "must_pass"), (2, "billing")}
    html = (report_dir / "gate.html").read_text()
    _assert_a_report(html, "BLOCKED")
    assert html.index("must_pass case policy-000 fails") < html.index('id="case-policy-000"')
    assert "GateBlocked" in (report_dir / "gate.ipynb").read_text()  # papermill failed it
    md = (report_dir / "gate.md").read_text()
    assert md.startswith("## 🔴 evalkit gate: BLOCKED") and "(gate.html)" in md
    junit = ET.parse(report_dir / "junit.xml").getroot()
    assert (junit.get("tests"), junit.get("failures")) == ("601", "73")
    report = json.loads((report_dir / "report.json").read_text())
    assert report["broken"][0]["case_id"] == "policy-000"
    args = ["gate", "base", "nobody", "--db", db, "--config", str(config), "--out", str(out)]
    assert main(args) == 2 and not (out / "nobody").exists()


@pytest.mark.parametrize(
    ("config", "baseline", "allow", "message"),
    [
        (CONFIG.replace("[billing]", "[billing, ghost]"), "base", (), "'ghost' has 0 cases"),
        (CONFIG.replace("critical_tags", "critical_tag"), "base", (), "unknown key 'critical_tag'"),
        (CONFIG, "nobody", (), "no run with id or label 'nobody'"),
        (CONFIG, "base", ("modle",), "unknown manifest field"),
    ],
)
def test_gate_usage_and_config_errors_exit_2_before_any_kernel(
    gate_env, tmp_path, config, baseline, allow, message
):
    root, _ = gate_env
    (tmp_path / "evalkit.yaml").write_text(config)
    run = execute_gate(
        root / "evalkit.duckdb", baseline, "cand-bad", tmp_path / "evalkit.yaml", tmp_path, allow
    )
    assert run.exit_code == 2 and run.decision is None and message in run.error
    assert not run.notebook_path.exists()


def test_gate_incomparable_runs_exit_2(gate_env, tmp_path):
    _, config = gate_env
    db = tmp_path / "other.duckdb"
    base, bad = seed000_runs(cand_label="cand-bad")
    manifest = bad.manifest | {"model": {"id": "other"}, "sampling": {"temperature": 1.0}}
    write_store(db, [base, replace(bad, manifest=manifest)])
    run = execute_gate(db, "base", "cand-bad", config, tmp_path / "out")
    assert run.exit_code == 2 and "refusing to compare" in run.error and "sampling" in run.error


def test_slices_and_power_notebooks_execute(gate_env, tmp_path):
    root, _ = gate_env
    params = {"DB_PATH": str(root / "evalkit.duckdb"), "BASELINE": "base", "CONFIG": "",
              "CANDIDATE": "cand-bad", "TAG": "billing", "ITERS": 1000}  # fmt: skip
    nb, ename, message = execute_notebook("slices.ipynb", tmp_path / "slices.ipynb", params)
    assert ename is None, message
    text = (tmp_path / "slices.ipynb").read_text()
    assert "billing: 100 paired, 8 broken, 0 fixed" in text
    # the linked overview (forest + flips) and the pass rates: each with its Vega-Lite spec
    assert text.count("image/svg+xml") >= 2 and "case-policy-000" in text
    assert text.count("application/vnd.vegalite.v5+json") >= 2
    assert not EXTERNAL_SCRIPT.search(to_report_html(nb).read_text())
    repo = Path(__file__).resolve().parents[1]
    out = tmp_path / "power-out"
    params = {"CORPUS_ROOT": str(repo / "corpus"), "CONFIG": str(repo / "corpus" / "evalkit.yaml"),
              "OUTPUT_DIR": str(out), "COMPARE_N": [30], "FLAKES": [0.05], "REPS": 60,
              "POWER_REPS": 20, "REPLAYS": [1, 5]}  # fmt: skip
    nb, ename, message = execute_notebook("power.ipynb", tmp_path / "power.ipynb", params)
    assert ename is None, message
    text = nb.read_text()
    policy = load_policy(params["CONFIG"])
    assert policy.critical_tags and all(f"{tag}: " in text for tag in policy.critical_tags)
    assert "min_detectable_drop" in text and "<svg" in text
    assert not EXTERNAL_SCRIPT.search(to_report_html(nb).read_text())
    # the operating characteristics at the corpus's real critical-tag sizes, and the replays
    counts = load_corpus(repo / "corpus").stats().per_tag
    sizes = ", ".join(f"{t} {counts[t]}" for t in policy.critical_tags)
    assert f"no change, flake 5%, {sizes}: false blocks per tag" in text
    assert f"20-point drop, {sizes}: power per tag" in text
    for delta in (0.05, 0.10, 0.20):  # Miller eq. 9 at the notebook's assumptions
        e = flip_prob(0.05)
        need = stats.required_n_replays(delta, max(0.10, delta) - delta**2, e * (1 - e), 5,
                                        policy.alpha, policy.power, "one-sided")  # fmt: skip
        assert f"K=5: {need} cases" in text
    svg = (out / "gate_oc.svg").read_text()
    assert svg.startswith("<svg") and "False blocks" in svg and (out / "gate_oc.png").stat().st_size


def test_judge_agreement_notebook_renders_offline(tmp_path):
    params = {"OUTPUT_DIR": str(tmp_path / "out")}
    nb, ename, message = execute_notebook("judge_agreement.ipynb", tmp_path / "j.ipynb", params)
    assert ename is None, message
    assert "image/svg+xml" in nb.read_text()
    assert not EXTERNAL_SCRIPT.search(to_report_html(nb).read_text())


@pytest.fixture(scope="module")
def labelled_store(demo_server, tmp_path_factory):
    """The demo's judged cases run once (baseline, prompt v1) with the shipped demo labels."""
    sets = [f"system.base_url={demo_server.base_url}", f"judge.base_url={demo_server.base_url}"]
    suite = load_suite(REPO / "corpus" / "evalkit.yaml", overrides=sets)
    corpus = load_corpus(suite.root, user_template=suite.config.system.user_template)
    corpus = corpus.select(
        ids=[c.id for c in corpus.cases if any(s.name == "judge" for s in c.scorers)]
    )
    db = tmp_path_factory.mktemp("labelled") / "labelled.duckdb"
    with open_store(db, write=True) as store:
        run_suite(suite, corpus, store, RunOptions(label="baseline", progress=False))
    labels = REPO / "data" / "labels" / "demo_reply_tone.csv"
    assert main(["labels", "import", str(labels), "--db", str(db), "--run", "baseline"]) == 0
    return db


def test_judge_agreement_notebook_studies_the_labels_in_a_store(labelled_store, tmp_path):
    rubric = REPO / "corpus" / "rubrics" / "reply_tone.md"
    with open_store(labelled_store, read_only=True) as store:
        want = calibrate(store, "baseline", rubric=rubric, save=False).record
    params = {"OUTPUT_DIR": str(tmp_path / "out"), "DB_PATH": str(labelled_store),
              "RUN": "baseline", "SCORER": "judge", "RUBRIC": str(rubric)}  # fmt: skip
    nb, ename, message = execute_notebook("judge_agreement.ipynb", tmp_path / "j.ipynb", params)
    assert ename is None, message
    kappa = fmt_kappa(want.kappa, want.kappa_lo, want.kappa_hi)  # 2 dp, e.g. 0.00 [-0.05, 0.06]
    page = to_report_html(nb).read_text()
    text = html.unescape(" ".join(re.sub(r"<[^>]+>", " ", page).split()))
    assert f"baseline/judge: kappa {kappa} on {want.n} labelled items, as recomputed" in text
    assert f"Cohen's kappa [95% bootstrap CI] {kappa}" in text
    assert f"agreement [Wilson CI] {want.accuracy:.1%}" in text
    assert "Per class" in text and "Confusion (rows human, columns judge)" in text
    assert "Spearman(score, length): judge" in text and "position consistency: not measured" in text
    assert "no calibration record yet" in text  # save=False: the notebook only reads
    assert (tmp_path / "out" / "store_baseline_judge" / "confusion.svg").is_file()
    assert "the published figures are reproduced exactly" in text  # the published part still runs
    assert page.count("data:image/svg+xml") >= 3 and not EXTERNAL_SCRIPT.search(page)


def test_unknown_notebook_is_a_config_error():
    with pytest.raises(ConfigError, match="not found"):
        notebook_path("nope.ipynb")


def test_history_notebook_executes(tmp_path):
    """notebooks/history.ipynb over six nightly runs whose unstable cases grow and whose served
    model changes at run 4: both charts (one panel per critical tag) and the warning."""
    import duckdb
    from synthetic_runs import MANIFEST, C, make_run

    from evalkit.store.gate_log import GateRecord

    manifest = MANIFEST | {"gate_policy": {"critical_tags": ["billing", "refunds"]}}
    runs = [
        make_run(f"run-{k}", [C(f"billing-{i}", "pp", ["billing"]) for i in range(8)]
                 + [C(f"refunds-{i}", "pf" if i < k else "pp", ["refunds"]) for i in range(8)],
                 manifest=manifest, label="nightly")
        for k in range(6)
    ]  # fmt: skip
    db = tmp_path / "history.duckdb"
    write_store(db, runs)
    with duckdb.connect(str(db)) as con:
        con.execute(
            "UPDATE outputs SET model = 'demo-model-0806' WHERE run_id IN ('run-4', 'run-5')"
        )
    with open_store(
        db, write=True
    ) as store:  # outputs edited by hand: their recorded usage follows
        for run_id in ("run-4", "run-5"):
            store.record_history(run_id)
        for cand in ("run-4", "run-5"):  # two gate decisions against run-0: its reuse
            store.log_gate(GateRecord("gate", "run-0", cand, "BLOCKED", n_paired=16))
    params = {
        "DB_PATH": str(db),
        "BY": "label",
        "OUTPUT_DIR": str(tmp_path / "out"),
        "TREND_RUNS": 6,
    }  # one window of six runs: tested once it is complete
    nb, ename, message = execute_notebook("history.ipynb", tmp_path / "history.ipynb", params)
    assert ename is None, message
    text = nb.read_text()
    assert "6 points by label; critical tags: billing, refunds; pass rate per case" in text
    assert "Gate decisions per baseline and exam" in text
    reuse = next(o for c in json.loads(text)["cells"] if c.get("id") == "history-reuse"
                 for o in c["outputs"])  # fmt: skip
    assert re.search(r">run-0<.*?>2<", "".join(reuse["data"]["text/html"]), re.S)
    assert "billing: pass rate" in text and "refunds: pass rate" in text
    assert "warn: unstable cases are growing in nightly" in text
    assert "served model changed in nightly: demo-model -> demo-model-0806 at run-4" in text
    assert text.count("application/vnd.vegalite.v5+json") >= 2
    assert (tmp_path / "out" / "pass_rates.svg").is_file()
    assert not EXTERNAL_SCRIPT.search(to_report_html(nb).read_text())

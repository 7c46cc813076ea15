"""Report files the CLI writes: whole or not at all, and a path it cannot write said in one
line with a non-zero exit (`evalkit.cli.report_files`)."""

from __future__ import annotations

import errno
import json
from pathlib import Path
from typing import TextIO

import duckdb
import pytest
from synthetic_runs import seed000_runs, write_store

from evalkit.cli import main
from evalkit.cli.report_files import write_report
from evalkit.demo.server import DemoServer
from evalkit.errors import EvalkitError


def _compare_args(tmp_path: Path, *extra: str) -> list[str]:
    write_store(tmp_path / "e.duckdb", list(seed000_runs()))
    (tmp_path / "evalkit.yaml").write_text(
        "suite: demo\nsystem: {provider: demo, model: demo-model}\ncritical_tags: [billing]\n"
    )
    return ["compare", "base", "cand", "--db", str(tmp_path / "e.duckdb"), "--config",
            str(tmp_path / "evalkit.yaml"), *extra]  # fmt: skip


@pytest.mark.parametrize("option", ["--json", "--markdown", "--junit", "--html"])
def test_a_report_path_that_is_a_folder_is_one_line_and_exit_2(
    option: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "reports"
    folder.mkdir()
    assert main(_compare_args(tmp_path, option, str(folder))) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"evalkit: error: {folder}: cannot write the report: Is a directory (EISDIR)"]
    assert list(folder.iterdir()) == []  # no temporary file left beside it


def test_the_json_report_lands_whole_in_a_new_folder(tmp_path: Path) -> None:
    out = tmp_path / "new" / "deeper" / "r.json"
    assert main(_compare_args(tmp_path, "--json", str(out))) == 0
    assert json.loads(out.read_text())["n_broken"] == 12
    assert sorted(p.name for p in out.parent.iterdir()) == ["r.json"]


def test_a_write_that_fails_half_way_keeps_the_last_report(tmp_path: Path) -> None:
    target = tmp_path / "r.json"
    target.write_text('{"last": true}')

    def half(out: TextIO) -> None:
        out.write('{"n_broken": ')
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(EvalkitError, match=r"r\.json: cannot write the report: No space left"):
        write_report(target, half)
    assert target.read_text() == '{"last": true}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_a_run_whose_summary_cannot_be_written_keeps_its_run_and_says_so(
    tmp_path: Path, demo_server: DemoServer, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "orders.yaml").write_text(
        "".join(
            f"- id: order-{i}\n"
            f"  input: {{messages: [{{role: user, content: 'Where is order {i}?'}}]}}\n"
            "  expect: [json_valid]\n"
            for i in range(3)
        ),
        encoding="utf-8",
    )
    config = tmp_path / "evalkit.yaml"
    config.write_text(
        "suite: summary-path\nsystem: {model: demo-support-1, base_url: 'http://127.0.0.1:9/v1'}\n"
        "cache: false\n",
        encoding="utf-8",
    )
    folder, db = tmp_path / "summaries", tmp_path / "e.duckdb"
    folder.mkdir()
    code = main(["run", "--config", str(config), "--db", str(db), "--no-progress", "--json",
                 str(folder), "--set", f"system.base_url={demo_server.base_url}"])  # fmt: skip
    assert code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"evalkit: error: {folder}: cannot write the summary: Is a directory (EISDIR)"
    )
    with duckdb.connect(str(db), read_only=True) as con:  # the run itself is stored whole
        assert con.execute("SELECT status FROM runs").fetchall() == [("complete",)]
        assert con.execute("SELECT count(*) FROM outputs").fetchone() == (3,)

"""docs/performance.md gives today's figures, each with the command that measures it and the
machine's load: every table row with a command names a bench script that exists and options
that script has, and says the load it was measured at (or that the figure is not
load-sensitive)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from docs_support import DOCS, REPO

PAGE = DOCS / "performance.md"
LOAD = re.compile(r"\bload\b|not load-sensitive", re.IGNORECASE)


def table_rows(text: str) -> list[dict[str, str]]:
    """The data rows of every Markdown table on the page, as {header: cell}."""
    rows: list[dict[str, str]] = []
    header: list[str] = []
    for line in text.splitlines():
        if not line.startswith("|"):
            header = []
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not header:
            header = [c.lower() for c in cells]
        elif not set("".join(cells)) <= set("-: "):
            rows.append(dict(zip(header, cells, strict=False)))
    return rows


def command_problems(row: dict[str, str], repo: Path = REPO) -> list[str]:
    """What is wrong with one row's command cell and its load: [] if nothing."""
    commands = re.findall(r"`python (bench/[^`]+)`", row.get("command", ""))
    if not commands:
        return [f"no `python bench/...` command in {row}"]
    problems = []
    for command in commands:
        script, *args = shlex.split(command)
        path = repo / script
        if not path.is_file():
            problems.append(f"{script} does not exist")
            continue
        source = path.read_text(encoding="utf-8")
        problems += [
            f"{script} has no option {arg}"
            for arg in args
            if arg.startswith("--") and f'"{arg}"' not in source
        ]
    if not LOAD.search(" ".join(row.values())):
        problems.append(f"no load stated (or 'not load-sensitive') in {row}")
    return problems


def test_every_figure_has_a_command_that_exists_and_its_load() -> None:
    rows = [r for r in table_rows(PAGE.read_text(encoding="utf-8")) if "command" in r]
    assert len(rows) > 10
    assert [p for row in rows for p in command_problems(row)] == []


def test_the_check_finds_a_missing_script_option_and_load(tmp_path: Path) -> None:
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "bench_x.py").write_text('parser.add_argument("--cases")\n')
    page = (
        "| workload | command | figure |\n|---|---|---|\n"
        "| a | `python bench/bench_x.py --cases 5` | 1.0x (load 3) |\n"
        "| b | `python bench/bench_x.py --rounds 2` | 1.0x (load 3) |\n"
        "| c | `python bench/bench_y.py` | 1.0x (load 3) |\n"
        "| d | `python bench/bench_x.py` | 1.0x |\n"
    )
    found = [command_problems(row, tmp_path) for row in table_rows(page)]
    assert found[0] == []
    assert found[1] == ["bench/bench_x.py has no option --rounds"]
    assert found[2] == ["bench/bench_y.py does not exist"]
    assert len(found[3]) == 1 and found[3][0].startswith("no load stated")

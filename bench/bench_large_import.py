"""A large import, end to end: ``evalkit cases import jsonl`` of N one-turn rows, the files it
writes
(each at most ``WRITTEN_FILE_CASES`` cases), ``load_corpus``, ``evalkit cases review`` of every
case, and ``evalkit cases lint`` (0 once reviewed). Prints wall seconds per stage and per
1,000 cases, so the growth from one size to the next is visible.

Default sizes are small (2,000 and 6,000); ``--full`` adds 60,000 (the size that crossed the
per-file node limit before it held per case). Run it on a quiet machine:

    .venv/bin/python bench/bench_large_import.py            # 2k, 6k
    .venv/bin/python bench/bench_large_import.py --full     # 2k, 6k, 60k
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import tempfile
import time
from pathlib import Path

from evalkit.cli import main
from evalkit.corpus.cases import load_corpus


def _quiet(argv: list[str]) -> int:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return main(argv)


def run(n: int) -> dict[str, float]:
    """The stages' wall seconds for ``n`` rows, in a fresh temporary project."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "proj"
        _quiet(["init", str(root)])
        for path in (root / "cases").iterdir():
            path.unlink()
        config = str(root / "evalkit.yaml")
        rows = Path(tmp) / "rows.jsonl"
        with rows.open("w", encoding="utf-8") as out:
            for i in range(n):
                row = {"id": f"r{i}", "question": f"Where is order {i}?", "answer": f"order {i}"}
                out.write(json.dumps(row) + "\n")
        maps = ["--map", "input=question", "--map", "expect.contains=answer", "--map", "id=id"]
        times: dict[str, float] = {}
        started = time.perf_counter()
        assert _quiet(["cases", "import", "jsonl", str(rows), *maps, "--config", config]) == 0
        times["import"] = time.perf_counter() - started
        times["files"] = len(list((root / "cases").glob("*.yaml")))
        started = time.perf_counter()
        ids = [case.id for case in load_corpus(root).cases]
        times["load"] = time.perf_counter() - started
        started = time.perf_counter()
        assert _quiet(["cases", "review", *ids, "--who", "bench", "--config", config]) == 0
        times["review"] = time.perf_counter() - started
        started = time.perf_counter()
        times["lint_exit"] = _quiet(["cases", "lint", "--config", config])
        times["lint"] = time.perf_counter() - started
        return times


def main_(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="add the 60,000-row size")
    args = parser.parse_args(argv)
    sizes = [2_000, 6_000] + ([60_000] if args.full else [])
    print(f"{'rows':>7} {'files':>5} {'import s':>9} {'load s':>7} {'review s':>9} "
          f"{'lint s':>7} {'lint':>4}  s per 1k (import/load/review/lint)")  # fmt: skip
    for n in sizes:
        t = run(n)
        per = "/".join(f"{t[k] * 1000 / n:.2f}" for k in ("import", "load", "review", "lint"))
        print(f"{n:>7} {int(t['files']):>5} {t['import']:>9.1f} {t['load']:>7.1f} "
              f"{t['review']:>9.1f} {t['lint']:>7.1f} {int(t['lint_exit']):>4}  {per}")  # fmt: skip


if __name__ == "__main__":
    main_()

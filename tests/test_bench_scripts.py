"""Every benchmark script is run small by a test, so none rots unnoticed (docs/performance.md
says so). Which scripts a test runs is kept by hand, test by test: this names a script no test
mentions, and the scripts still waiting for a small run are listed here, so the gap is seen."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: Scripts no test runs yet: each should get a small run (as tests/test_bench.py does for the
#: others) and leave this list; bench_judge_rivals installs other tools from the network, which
#: a test may not reach, so it stays.
NOT_RUN_BY_A_TEST = frozenset(
    {
        "bench_judge_rivals",
        "bench_large_import",
        "bench_pr_gate",
        "bench_table_formats",
        "bench_transfer",
    }
)


def unrun_scripts(repo: Path = REPO) -> list[str]:
    """Each bench script no test file mentions and NOT_RUN_BY_A_TEST does not list, and each
    listed one a test now mentions (the list is out of date), with the fix."""
    tests = "\n".join(
        p.read_text() for p in (repo / "tests").rglob("test_*.py") if p != Path(__file__)
    )
    scripts = sorted(p.stem for p in (repo / "bench").glob("bench_*.py"))
    problems = [
        f"bench/{name}.py is run by no test: give it a small run in tests/test_bench.py (or list "
        "it in NOT_RUN_BY_A_TEST in tests/test_bench_scripts.py, with why)"
        for name in scripts
        if name not in tests and name not in NOT_RUN_BY_A_TEST
    ]
    problems += [
        f"bench/{name}.py is listed in NOT_RUN_BY_A_TEST but a test runs it now: drop it there"
        for name in sorted(NOT_RUN_BY_A_TEST)
        if name in tests or name not in scripts
    ]
    return problems


def test_every_bench_script_is_run_small_or_listed() -> None:
    assert unrun_scripts() == []


def test_a_new_script_without_a_test_is_named(tmp_path: Path) -> None:
    (tmp_path / "bench").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "bench" / "bench_new.py").write_text("")
    (tmp_path / "bench" / "bench_old.py").write_text("")
    (tmp_path / "tests" / "test_b.py").write_text('_run("bench_old", [])\n')
    found = unrun_scripts(tmp_path)
    assert any(p.startswith("bench/bench_new.py is run by no test") for p in found)
    assert not any("bench_old.py is run by no test" in p for p in found)

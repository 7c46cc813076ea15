"""Peak memory and time of ``evalkit push``, ``pull``, ``merge`` and the gate's decision at
10k, 100k and 1M outputs, side by side: what each stage holds as a run grows.

Per size N, two synthetic runs (baseline and candidate, N one-turn cases, one replay, two
scorers, ~300-byte answers, each case's hash 64 hex characters as a corpus gives it) are
written straight into a DuckDB store with SQL (no run, no model), and the candidate's rows once
more as Parquet parts (chunks of ``--chunk`` cases) of a third run id. Each stage is then its
own ``evalkit`` process, whose peak RSS and CPU are read from the kernel (``wait4``):

``push``   ``evalkit push CAND`` into an empty shared store (SQLite catalog, directory
           warehouse);
``pull``   ``evalkit pull CAND`` from it into a fresh local store;
``merge``  ``evalkit runs merge`` of the parts into a fresh local store;
``gate``   ``evalkit compare BASE CAND --json FILE``: the gate's decision (``gate_pair``: both
           runs read, verdicts, pairing, every tier), the terminal report and the JSON one, as
           ``bench_million.py``'s gate on real runs, without the notebook;
``exam``   with ``--promoted``: the same command once the baseline is promoted with
           ``evalkit baseline promote``, which pins its exam (the runs' cases are then those of
           a real corpus of case files of 2,000 cases), so the gate judges the candidate on the
           pinned exam (`evalkit.compare.exam`): the usual gate of a promoted baseline.

Figures are printed (and written with ``--json``), never asserted; ``peak/100k`` reads each
stage's peak RSS against the 100k one (the target: 1M within 1.5x of 100k).

Usage:
    .venv/bin/python bench/bench_memory.py --sizes 10000 100000
    .venv/bin/python bench/bench_memory.py --sizes 10000 100000 1000000 --json memory.json
    .venv/bin/python bench/bench_memory.py --sizes 2000 --stages push pull
    .venv/bin/python bench/bench_memory.py --sizes 10000 100000 --stages gate --promoted
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

STAGES = ("push", "pull", "merge", "gate")
#: jemalloc's settings as this process was given them: importing polars here sets its own
#: (freed pages kept for 0.5-1 s), which a stage's process would inherit in place of those it
#: sets for itself when started from a shell (``evalkit.cli``: returned at once).
_MALLOC_CONF = "_RJEM_MALLOC_CONF"
_CALLERS_MALLOC_CONF = os.environ.get(_MALLOC_CONF)
#: One answer's text: about the length of a support reply.
ANSWER = "Thanks for reaching out: your refund was issued and should arrive within five days. " * 3

#: A case's hash is a SHA-256 as the corpus gives it: a short one is held inside Polars' string
#: view, a real one beside it (61 MB a run at 1M), which real runs' gates hold.
_CASES = """
SELECT '{run}' AS run_id, printf('case-%07d', i) AS case_id,
       sha256(printf('case-%07d', i)) AS case_hash,
       ['general', 'slice-' || (i % 7)] AS tags, 'normal' AS criticality, false AS sealed,
       printf('{{"messages": [{{"role": "user", "content": "question %d"}}]}}', i) AS input,
       '{{}}' AS provenance, 'cases/bench.yaml:' || (i + 1) AS source, NULL AS case_group
FROM range({start}, {stop}) t(i)
"""
_OUTPUTS = """
SELECT '{run}' AS run_id, printf('case-%07d', i) AS case_id, 0::INTEGER AS replay,
       '{answer}' || i AS text, '[]' AS tool_calls, 1::INTEGER AS steps, NULL AS error,
       NULL AS fail_reason, (100 + i % 50)::DOUBLE AS latency_ms, 10::BIGINT AS prompt_tokens,
       5::BIGINT AS completion_tokens, 0.001::DOUBLE AS cost_usd, false AS cached,
       printf('{run}-k%d', i) AS request_hash, 'demo-model' AS model,
       TIMESTAMPTZ '2026-12-07 06:00:00+00' AS created_at
FROM range({start}, {stop}) t(i)
"""
# scorer b fails one case in {fail_every} (the candidate's differ: flips to pair)
_SCORES = """
SELECT '{run}' AS run_id, '{run}/s0' AS scoring_id, printf('case-%07d', i) AS case_id,
       0::INTEGER AS replay, s.scorer, s.idx::INTEGER AS scorer_index, 0::INTEGER AS tier,
       CASE WHEN s.idx = 1 AND i % {fail_every} = 0 THEN 0.0 ELSE 1.0 END::DOUBLE AS score,
       NOT (s.idx = 1 AND i % {fail_every} = 0) AS passed, false AS error, 'ok' AS reason,
       NULL AS details
FROM range({start}, {stop}) t(i), (VALUES ('contains', 0), ('max_words', 1)) s(scorer, idx)
"""


def _sql(template: str, run: str, start: int, stop: int, fail_every: int = 0) -> str:
    return template.format(
        run=run, start=start, stop=stop, answer=ANSWER, fail_every=fail_every or 1
    )


def _manifest(run_id: str, n: int, digest: str) -> dict[str, Any]:
    return {
        "suite": "bench-memory",
        "config_hash": "cfg-bench-memory",
        "run": {"run_id": run_id, "label": run_id},
        "replays": 1,
        "corpus": {"hash": digest, "n_cases": n},
        "model": {"id": "demo-model", "snapshot": "demo-model"},
    }


def _digest(con: Any, run: str, n: int) -> str:
    from evalkit.store.part_checks import corpus_digest

    rows = con.execute(_sql(_CASES, run, 0, n)).fetchall()
    return corpus_digest((r[1], r[2]) for r in rows)


def _stored_digest(con: Any, run: str) -> str:
    from evalkit.store.part_checks import corpus_digest

    rows = con.execute("SELECT case_id, case_hash FROM cases WHERE run_id = ?", [run]).fetchall()
    return corpus_digest((r[0], r[1]) for r in rows)


#: One case of `write_corpus`, as the rows of ``_CASES`` describe it (its id, tags, input).
_CASE_YAML = """- id: case-{i:07d}
  tags: [general, slice-{slice}]
  input: {{messages: [{{role: user, content: 'question {i}'}}]}}
  expect: [{{contains: refund}}, {{max_words: 200}}]
"""


def write_corpus(root: Path, n: int, per_file: int = 2_000) -> Path:
    """The corpus of the runs' ``n`` cases (``per_file`` to a case file, as importers write
    them) and a suite config naming it; returns the config."""
    (root / "cases").mkdir(parents=True)
    for first in range(0, n, per_file):
        cases = range(first, min(n, first + per_file))
        text = "".join(_CASE_YAML.format(i=i, slice=i % 7) for i in cases)
        (root / "cases" / f"bench-{first // per_file:04d}.yaml").write_text(text, encoding="utf-8")
    config = root / "evalkit.yaml"
    config.write_text(
        "suite: bench-memory\nsystem:\n  model: demo-model\n  base_url: http://127.0.0.1:9/v1\n",
        encoding="utf-8",
    )
    return config


def _as_corpus(con: Any, run: str, root: Path, n: int) -> None:
    """The run's cases given the hashes, inputs and sources of the corpus at ``root``."""
    import polars as pl

    from evalkit.corpus.case_facts import scan_corpus

    facts = scan_corpus(root, index_dir=root / ".index", workers=None)
    assert len(facts.cases) == n, "the corpus is the runs' cases"
    pinned = pl.DataFrame(  # noqa: F841  (read by the SQL below)
        {
            "case_id": [c.id for c in facts.cases],
            "case_hash": [c.hash for c in facts.cases],
            "source": [c.source for c in facts.cases],
        }
    )
    con.execute(
        "UPDATE cases SET case_hash = p.case_hash, source = p.source, "
        'input = printf(\'{"messages": [{"content": "question %d", "role": '
        '"user"}]}\', CAST(substr(cases.case_id, 6) AS INTEGER)) '
        "FROM pinned p WHERE cases.run_id = ? AND cases.case_id = p.case_id",
        [run],
    )


def write_runs(folder: Path, n: int, config: Path | None = None) -> tuple[Path, str, str]:
    """A store holding a complete baseline and candidate run of ``n`` cases each; returns the
    store and the two run ids. With ``config`` (`write_corpus`'s), the runs' cases are its
    corpus's: their hashes and inputs, and the config recorded as the one they ran."""
    import duckdb

    from evalkit.store import open_store

    db = folder / "local.duckdb"
    base, cand = "bench-base", "bench-cand"
    with open_store(db, write=True) as store:
        for run_id in (base, cand):
            store.create_run(_manifest(run_id, n, "unused"), [])
    con = duckdb.connect(str(db))
    con.execute("SET TimeZone = 'UTC'")
    for run_id, fail_every in ((base, 10), (cand, 9)):
        con.execute(f"INSERT INTO cases BY NAME {_sql(_CASES, run_id, 0, n)}")
        con.execute(f"INSERT INTO outputs BY NAME {_sql(_OUTPUTS, run_id, 0, n)}")
        con.execute(f"INSERT INTO scores BY NAME {_sql(_SCORES, run_id, 0, n, fail_every)}")
        if config is not None:
            _as_corpus(con, run_id, config.parent, n)
        digest = _stored_digest(con, run_id)
        recorded = _manifest(run_id, n, digest)
        if config is not None:
            recorded["run"]["config"] = str(config)
        manifest = json.dumps(recorded)
        summary = json.dumps({"cases": n, "outputs": n})
        con.execute(
            "UPDATE runs SET status = 'complete', finished_at = now(), manifest = ?, "
            "summary = ? WHERE run_id = ?",
            [manifest, summary, run_id],
        )
    con.close()
    return db, base, cand


def write_parts(folder: Path, n: int, chunk: int) -> tuple[Path, str]:
    """The candidate's rows as the parts of a sharded run (``bench-merge``)."""
    import duckdb

    from evalkit.store.parts import PartsRoot

    run_id = "bench-merge"
    root = PartsRoot(folder / "parts")
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    manifest = _manifest(run_id, n, _digest(con, run_id, n))
    root.write_manifest(run_id, "bench", manifest)
    root.write_part(
        run_id, "cases", "bench", con.sql(_sql(_CASES, run_id, 0, n)).to_arrow_table(), 1
    )
    empty_cache = "SELECT ''::VARCHAR AS cache_key, ''::VARCHAR AS response LIMIT 0"
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        chunk_id = f"c{start // chunk:06d}"
        tables = {
            "cache": empty_cache,
            "scores": _sql(_SCORES, run_id, start, stop, 9),
            "outputs": _sql(_OUTPUTS, run_id, start, stop),
        }
        for table, sql in tables.items():  # outputs last: the chunk's commit
            root.write_part(run_id, table, chunk_id, con.sql(sql).to_arrow_table(), 1)
    con.close()
    return folder / "parts", run_id


#: Runs a command as a child and prints its exit code, CPU, peak RSS and start (epoch seconds,
#: taken just before the child is started) as JSON: ``wait4`` reads one child's own figures
#: (``communicate`` would reap it first).
_WRAPPER = """
import json, os, subprocess, sys, time
started_at = time.time()
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
err = proc.stderr.read()
_, status, usage = os.wait4(proc.pid, 0)
print(json.dumps({"code": os.waitstatus_to_exitcode(status),
                  "cpu_s": usage.ru_utime + usage.ru_stime, "peak_mib": usage.ru_maxrss / 1024,
                  "started_at": started_at, "stderr": err.decode(errors="replace")[-600:]}))
"""


def run_stage(command: Sequence[str], cwd: Path) -> dict[str, Any]:
    """One stage's process: wall and CPU seconds, peak RSS in MiB, exit code and when it
    started (``started_at``, epoch seconds); a non-zero exit raises."""
    env = {k: v for k, v in os.environ.items() if k != _MALLOC_CONF}
    env["PYTHONPATH"] = str(REPO)
    if _CALLERS_MALLOC_CONF is not None:
        env[_MALLOC_CONF] = _CALLERS_MALLOC_CONF
    wall = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", _WRAPPER, *command],
        cwd=cwd, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    figures = json.loads(done.stdout)
    figures["wall_s"] = time.perf_counter() - wall
    if figures["code"] != 0:
        raise RuntimeError(f"{list(command)[:5]} exited {figures['code']}: {figures['stderr']}")
    return figures


def bench_size(
    folder: Path, n: int, stages: Sequence[str], chunk: int, promoted: bool = False
) -> dict[str, Any]:
    """Every stage of ``stages`` at ``n`` outputs per run (and the gate of the promoted
    baseline, ``exam``, when ``promoted``)."""
    evalkit = [sys.executable, "-m", "evalkit.cli"]
    config = write_corpus(folder / "corpus", n) if promoted else None
    db, base, cand = write_runs(folder, n, config)
    store = f"sqlite:///{folder}/catalog.db?warehouse={folder}/warehouse"
    figures: dict[str, Any] = {"outputs": n}
    if "push" in stages or "pull" in stages:
        figures["push"] = run_stage([*evalkit, "push", cand, "--db", str(db), "--store", store],
                                    folder)  # fmt: skip
    if "pull" in stages:
        pulled = folder / "pulled.duckdb"
        figures["pull"] = run_stage(
            [*evalkit, "pull", cand, "--db", str(pulled), "--store", store], folder
        )
        figures["pull"]["outputs"] = count_rows(pulled, "outputs", cand)
    if "merge" in stages:
        parts, run_id = write_parts(folder, n, chunk)
        merged = folder / "merged.duckdb"
        figures["merge"] = run_stage(
            [*evalkit, "runs", "merge", run_id, "--parts", str(parts), "--db", str(merged)], folder
        )
        figures["merge"]["outputs"] = count_rows(merged, "outputs", run_id)
    gate = [*evalkit, "compare", base, cand, "--db", str(db), "--json"]
    if "gate" in stages:
        figures["gate"] = run_stage([*gate, str(folder / "gate.json")], folder)
    if promoted:
        promote = [*evalkit, "baseline", "promote", base, "--who", "bench", "--reason", "bench",
                   "--config", str(config), "--db", str(db)]  # fmt: skip
        subprocess.run(promote, cwd=folder, env={**os.environ, "PYTHONPATH": str(REPO)},
                       check=True, capture_output=True)  # fmt: skip
        figures["exam"] = run_stage([*gate, str(folder / "exam.json")], folder)
    return figures


def count_rows(db: Path, table: str, run_id: str) -> int:
    """Rows of ``run_id`` in ``table`` of store ``db``: what a stage stored."""
    from evalkit.store import open_store

    with open_store(db) as store:
        rows = store.records(f"SELECT count(*) AS n FROM {table} WHERE run_id = ?", [run_id])
    return int(rows[0]["n"])


def report(results: list[dict[str, Any]], stages: Sequence[str]) -> str:
    """The figures as a table: one row per stage and size."""
    by_size = {r["outputs"]: r for r in results}
    ref = by_size.get(100_000)
    lines = [
        f"{'stage':<7}{'outputs':>10}{'wall s':>9}{'CPU s':>9}{'peak MiB':>10}"
        f"{'CPU us/out':>12}{'peak/100k':>11}"
    ]
    for stage in stages:
        for result in results:
            fig = result.get(stage)
            if fig is None:
                continue
            n = result["outputs"]
            ratio = (
                f"{fig['peak_mib'] / ref[stage]['peak_mib']:.2f}" if ref and stage in ref else ""
            )
            lines.append(
                f"{stage:<7}{n:>10,}{fig['wall_s']:>9.1f}{fig['cpu_s']:>9.1f}"
                f"{fig['peak_mib']:>10.0f}{fig['cpu_s'] / n * 1e6:>12.1f}{ratio:>11}"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Measure each stage at each size; print the table (and write ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--stages", nargs="+", choices=STAGES, default=list(STAGES))
    parser.add_argument("--chunk", type=int, default=2_000, help="cases per merged part")
    parser.add_argument("--json", metavar="FILE", help="write the figures as JSON")
    parser.add_argument(
        "--promoted", action="store_true",
        help="also gate once the baseline is promoted (its pinned exam: the exam stage)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    shown = [*args.stages, *(["exam"] if args.promoted else [])]
    results = []
    for n in args.sizes:
        with tempfile.TemporaryDirectory(prefix="evalkit-bench-memory-") as tmp:
            results.append(bench_size(Path(tmp), n, args.stages, args.chunk, args.promoted))
        print(report(results[-1:], shown), flush=True)
    print(f"\nload average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(report(results, shown))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Fault-injection figures: a run through 20% 429/500 and 5% timeouts against a clean run.

Builds a synthetic corpus of N simple cases (``json_valid``) in a temp dir, starts two demo
simulators on loopback (one clean, one injecting faults, both seeded) and runs the corpus through
each with the same settings: server latency 50 ms, concurrency 32, client timeout 1 s, server
timeout 3 s, 4 retries. Prints the machine's core count and, per run: completed (scored) and
errored outputs, requests, extra requests (retries), the faults the server injected (recomputed
from its seeded draws), lost or duplicated rows, and wall time.

Usage:
    .venv/bin/python bench/bench_faults.py                  # 1000 cases, 4 retries
    .venv/bin/python bench/bench_faults.py --cases 50 --json figures.json
    .venv/bin/python bench/bench_faults.py --max-retries 1  # some outputs end as errors
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # runnable from a checkout without installing

from evalkit.corpus.cases import load_corpus  # noqa: E402
from evalkit.corpus.suite import load_suite  # noqa: E402
from evalkit.demo.protocol import seeded_draw  # noqa: E402
from evalkit.demo.server import DemoServer, start_demo_server  # noqa: E402
from evalkit.run.runner import RunOptions, run_suite  # noqa: E402
from evalkit.store import open_store  # noqa: E402

ERROR_RATE, TIMEOUT_RATE = 0.2, 0.05
LATENCY_MS, SERVER_TIMEOUT_S = 50, 3
CONCURRENCY, CLIENT_TIMEOUT_S, MAX_RETRIES = 32, 1, 4
SEED = 7


@dataclass(frozen=True)
class RunFigures:
    """What one run did, from the store, the runner's summary and the server's counters."""

    label: str
    cases: int
    outputs: int
    completed: int  # outputs with a model answer (scored)
    errored: int  # outputs stored as an error (no scores)
    lost: int  # (case, replay) pairs with no row
    duplicated: int  # rows beyond one per (case, replay)
    requests: int  # attempts the runner made
    server_requests: int  # attempts the server saw
    extra_requests: int  # requests beyond one per output: the retries
    injected_429: int
    injected_500: int
    injected_timeouts: int
    injected_failures: int  # attempts with a timeout or an error (both may hit one attempt)
    error_causes: dict[str, int]
    wall_s: float


def write_corpus(root: Path, n_cases: int, max_retries: int = MAX_RETRIES) -> Path:
    """N distinct one-turn cases scored by ``json_valid``, and a suite config; returns it."""
    (root / "cases").mkdir(parents=True)
    lines = []
    for i in range(n_cases):
        lines.append(
            f"- id: synthetic-{i:05d}\n"
            f"  input: {{messages: [{{role: user, content: 'Where is my order {10_000 + i}?'}}]}}\n"
            "  expect: [json_valid]\n"
        )
    (root / "cases" / "synthetic.yaml").write_text("".join(lines), encoding="utf-8")
    config = root / "evalkit.yaml"
    config.write_text(
        "suite: bench-faults\n"
        "system:\n"
        "  model: demo-support-1\n"
        "  base_url: http://127.0.0.1:9/v1\n"
        f"  timeout_s: {CLIENT_TIMEOUT_S}\n"
        f"  max_retries: {max_retries}\n"
        "  sampling: {temperature: 0, seed: 7, max_tokens: 200}\n"
        f"concurrency: {CONCURRENCY}\n"
        "cache: false\n",
        encoding="utf-8",
    )
    return config


def _injected(by_content: dict[str, int], error_rate: float, timeout_rate: float) -> Counter[str]:
    """Recompute the faults the server injected from its seeded draws (it does not count them)."""
    faults: Counter[str] = Counter()
    for sha, seen in by_content.items():
        for occurrence in range(seen):
            timeout = seeded_draw(SEED, "timeout", sha, occurrence) < timeout_rate
            draw = seeded_draw(SEED, "error", sha, occurrence)
            faults["timeout"] += timeout
            faults["429"] += draw < error_rate / 2
            faults["500"] += error_rate / 2 <= draw < error_rate
            faults["failures"] += timeout or draw < error_rate
    return faults


def measure(label: str, config: Path, server: DemoServer, db: Path, faulty: bool) -> RunFigures:
    """One run of the corpus against ``server``, stored in ``db``."""
    suite = load_suite(config, overrides=[f"system.base_url={server.base_url}"])
    corpus = load_corpus(suite.root)
    server.reset_stats()
    started = time.perf_counter()
    with open_store(db, write=True) as store:
        summary = run_suite(suite, corpus, store, RunOptions(label=label, progress=False))
        wall_s = time.perf_counter() - started
        outputs = store.outputs(summary.run_id)
    stats = server.stats()
    keys = Counter(zip(outputs["case_id"], outputs["replay"], strict=True))
    expected = {(c.id, r) for c in corpus.cases for r in range(suite.config.replays)}
    errors = [e for e in outputs["error"].to_list() if e is not None]
    faults = _injected(stats["by_content"], ERROR_RATE, TIMEOUT_RATE) if faulty else Counter[str]()
    return RunFigures(
        label=label,
        cases=len(corpus.cases),
        outputs=outputs.height,
        completed=outputs.height - len(errors),
        errored=len(errors),
        lost=len(expected - set(keys)),
        duplicated=sum(n - 1 for n in keys.values()),
        requests=summary.requests,
        server_requests=stats["requests"],
        extra_requests=summary.requests - outputs.height,
        injected_429=faults["429"],
        injected_500=faults["500"],
        injected_timeouts=faults["timeout"],
        injected_failures=faults["failures"],
        error_causes=dict(Counter(e.split(":")[0].split(" (")[0] for e in errors)),
        wall_s=round(wall_s, 2),
    )


def run(n_cases: int, max_retries: int = MAX_RETRIES) -> dict[str, Any]:
    """Both runs on a fresh corpus and store; returns the figures as plain data."""
    with tempfile.TemporaryDirectory(prefix="evalkit-bench-faults-") as tmp:
        config = write_corpus(Path(tmp) / "corpus", n_cases, max_retries)
        common: dict[str, Any] = {"seed": SEED, "noise": False, "latency_ms": LATENCY_MS}
        timeout_arg = [f"--timeout-s={SERVER_TIMEOUT_S}"]
        with (
            start_demo_server(**common) as clean_server,
            start_demo_server(
                **common,
                error_rate=ERROR_RATE,
                timeout_rate=TIMEOUT_RATE,
                extra_args=timeout_arg,
            ) as faulty_server,
        ):
            clean = measure("clean", config, clean_server, Path(tmp) / "clean.duckdb", False)
            faulty = measure("faults", config, faulty_server, Path(tmp) / "faults.duckdb", True)
    return {
        "cores": os.cpu_count(),
        "settings": {
            "cases": n_cases,
            "error_rate": ERROR_RATE,
            "timeout_rate": TIMEOUT_RATE,
            "latency_ms": LATENCY_MS,
            "server_timeout_s": SERVER_TIMEOUT_S,
            "client_timeout_s": CLIENT_TIMEOUT_S,
            "concurrency": CONCURRENCY,
            "max_retries": max_retries,
            "seed": SEED,
        },
        "clean": asdict(clean),
        "faults": asdict(faulty),
    }


def _print(figures: dict[str, Any]) -> None:
    s = figures["settings"]
    print(f"cores: {figures['cores']}")
    print(
        f"{s['cases']} cases; faults: {s['error_rate']:.0%} 429/500 (half each) and "
        f"{s['timeout_rate']:.0%} timeouts (server sleeps {s['server_timeout_s']} s, client gives "
        f"up after {s['client_timeout_s']} s); latency {s['latency_ms']} ms, concurrency "
        f"{s['concurrency']}, max_retries {s['max_retries']}, seed {s['seed']}"
    )
    rows = [
        ("completed (scored)", "completed"),
        ("errored (stored as error)", "errored"),
        ("lost / duplicated rows", None),
        ("requests (runner / server)", None),
        ("extra requests (retries)", "extra_requests"),
        ("injected 429 / 500 / timeouts", None),
        ("failed attempts injected", "injected_failures"),
        ("wall time (s)", "wall_s"),
    ]
    clean, faulty = figures["clean"], figures["faults"]
    print(f"{'':32}{'clean':>16}{'faults':>16}")
    for title, key in rows:
        if key is not None:
            left, right = clean[key], faulty[key]
        elif title.startswith("lost"):
            left = f"{clean['lost']} / {clean['duplicated']}"
            right = f"{faulty['lost']} / {faulty['duplicated']}"
        elif title.startswith("requests"):
            left = f"{clean['requests']} / {clean['server_requests']}"
            right = f"{faulty['requests']} / {faulty['server_requests']}"
        else:
            left = "0 / 0 / 0"
            right = (
                f"{faulty['injected_429']} / {faulty['injected_500']} / "
                f"{faulty['injected_timeouts']}"
            )
        print(f"{title:32}{left!s:>16}{right!s:>16}")
    ratio = faulty["wall_s"] / clean["wall_s"] if clean["wall_s"] else float("nan")
    print(f"wall time with faults: {ratio:.2f}x the clean run")
    if faulty["error_causes"]:
        causes = ", ".join(f"{k} x{v}" for k, v in sorted(faulty["error_causes"].items()))
        print(f"final error causes: {causes}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print its figures (and write them as JSON with ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=1000, help="synthetic cases (default 1000)")
    parser.add_argument(
        "--max-retries", type=int, default=MAX_RETRIES, help=f"default {MAX_RETRIES}"
    )
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args(argv)
    figures = run(args.cases, args.max_retries)
    _print(figures)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

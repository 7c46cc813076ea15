"""``evalkit gate --tier smoke``: a smoke tier is gated like the full suite, against runs of the
same tier, with critical tags the tier leaves out reported as not in this selection."""

from __future__ import annotations

import json
from pathlib import Path

from evalkit.cli import main
from evalkit.demo.server import DemoServer

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "corpus" / "evalkit.yaml"


def _run(db: Path, server: DemoServer, label: str, *extra: str) -> None:
    args = ["run", "--config", str(CONFIG), "--db", str(db), "--label", label, "--no-progress",
            "--set", f"system.base_url={server.base_url}", *extra]  # fmt: skip
    assert main(args) in (0, 1)


def test_gate_tier_smoke_with_critical_tags_outside_the_tier(
    tmp_path: Path, demo_server: DemoServer, capsys
) -> None:
    db = tmp_path / "tiers.duckdb"
    _run(db, demo_server, "smoke-base", "--tier", "smoke")
    _run(db, demo_server, "smoke-cand", "--tier", "smoke")
    _run(db, demo_server, "full", "--tag", "billing")
    capsys.readouterr()
    report = tmp_path / "smoke.json"
    args = ["--db", str(db), "--config", str(CONFIG)]
    code = main(["compare", *args, "--tier", "smoke", "smoke-base", "smoke-cand",
                 "--json", str(report)])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    decision = json.loads(report.read_text())["decision"]
    states = {s["tag"]: s["state"] for s in decision["critical"]}
    assert states == dict.fromkeys(["billing", "injection", "policy"], "not in this selection")
    assert decision["status"] == "PASSED"
    # a smoke run is never gated against a run of another selection
    assert main(["compare", *args, "--tier", "smoke", "full", "smoke-cand"]) == 2
    assert "both runs must have run that tier" in capsys.readouterr().err
    assert main(["compare", *args, "full", "smoke-cand"]) == 2
    assert "different selections" in capsys.readouterr().err

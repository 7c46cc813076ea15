"""Arguments several subcommands share, and their defaults."""

from __future__ import annotations

import argparse

DEFAULT_CONFIG = "corpus/evalkit.yaml"
DEFAULT_DB = "data/evalkit.duckdb"


def suite_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default=DEFAULT_CONFIG, help="suite config (evalkit.yaml)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value, e.g. --set system.model=gpt-4.1-mini",
    )
    parser.add_argument("--prompt", help="system prompt file (overrides system.prompt)")


def db_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", default=DEFAULT_DB, help="DuckDB file")
    parser.add_argument("--wait", type=float, default=0.0, help="seconds to wait for a DB lock")


def pair_args(parser: argparse.ArgumentParser) -> None:
    db_arg(parser)
    parser.add_argument("baseline", help="baseline run id or label")
    parser.add_argument("candidate", help="candidate run id or label")
    parser.add_argument("--config", default=DEFAULT_CONFIG, help="suite config (gate policy)")
    parser.add_argument(
        "--allow-diff",
        action="append",
        default=[],
        metavar="FIELD",
        help="a manifest field that may differ (the variable under test)",
    )

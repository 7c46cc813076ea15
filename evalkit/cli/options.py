"""Arguments several subcommands share, and their defaults."""

from __future__ import annotations

import argparse

from evalkit.corpus.config_files import CONFIG_NAMES, resolve_config
from evalkit.errors import ConfigError

DEFAULT_CONFIG = "corpus/evalkit.yaml"
DEFAULT_DB = "data/evalkit.duckdb"
#: Where ``--config`` is looked for when not given (or given a folder): a project made by
#: ``evalkit init`` keeps it beside its cases; this repository keeps the demo suite's in corpus/.
CONFIG_SEARCH = CONFIG_NAMES
_CONFIG_HELP = (
    "suite config, or a folder holding one (default: ./evalkit.yaml, else corpus/evalkit.yaml)"
)


def find_config(given: str | None = None) -> str:
    """The config ``--config`` means (`evalkit.corpus.suite.resolve_config`): a file as given,
    a folder's ``evalkit.yaml`` (else its ``corpus/evalkit.yaml``), none: the working
    directory's, else the default."""
    return str(resolve_config(given))


def set_arg(
    parser: argparse.ArgumentParser,
    help: str = "override a config value, e.g. --set system.model=gpt-4.1-mini",
) -> None:
    """``--set KEY=VALUE`` (repeatable), collected in ``args.overrides``."""
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=help
    )


def suite_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default=None, help=_CONFIG_HELP)
    set_arg(parser)
    parser.add_argument("--prompt", help="system prompt file (overrides system.prompt)")


def db_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", default=DEFAULT_DB, help="DuckDB file")
    parser.add_argument("--wait", type=float, default=0.0, help="seconds to wait for a DB lock")


def pair_args(parser: argparse.ArgumentParser) -> None:
    db_arg(parser)
    parser.add_argument(
        "runs",
        nargs="+",
        metavar="[BASELINE] CANDIDATE",
        help="run ids or labels (label@latest for the newest of several); with the candidate "
        "alone, the baseline promoted for its suite (`evalkit baseline promote`)",
    )
    parser.add_argument(
        "--config",
        default=None,
        help=_CONFIG_HELP + "; its gate policy, and its corpus: the cases the candidate must have "
        "run (without one, no case counts as removed)",
    )
    parser.add_argument(
        "--tier",
        help="the named selection (tiers: in evalkit.yaml) both runs executed, e.g. smoke",
    )
    parser.add_argument(
        "--allow-incomplete",
        action="store_true",
        help="compare a run that is not complete; its missing outputs count as errored",
    )
    parser.add_argument(
        "--allow-diff",
        action="append",
        default=[],
        metavar="FIELD",
        help="a manifest field that may differ (the variable under test)",
    )


def pair_refs(args: argparse.Namespace) -> tuple[str | None, str]:
    """(baseline or None, candidate) from the ``[BASELINE] CANDIDATE`` positionals."""
    if len(args.runs) > 2:
        raise ConfigError(f"expected [BASELINE] CANDIDATE, got {len(args.runs)} run references")
    return (None, args.runs[0]) if len(args.runs) == 1 else (args.runs[0], args.runs[1])

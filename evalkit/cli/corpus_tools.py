"""``evalkit cases …`` beyond lint: the corpus lifecycle (review drafts, retire, convert,
coverage). ``running`` creates the ``cases`` group and hands its subparsers here."""

from __future__ import annotations

import argparse


def add_cases_parsers(cases_sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the lifecycle subcommands to ``evalkit cases``."""

"""``evalkit notebook NAME``: copy a shipped notebook into this project, parameterised for it.

The copy's ``parameters`` cell names this project's store, config and runs (relative to the
folder the notebook is written to, which is where Jupyter runs it); an existing notebook is
overwritten only with ``--force``.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from evalkit.cli.options import DEFAULT_DB
from evalkit.errors import ConfigError


def add_parsers(sub: argparse._SubParsersAction) -> None:
    nb = sub.add_parser(
        "notebook", help="copy a notebook (slices, flakiness, power, ...) set up for this project"
    )
    nb.add_argument("name", help="slices, flakiness, judge_agreement, power, gate, ...")
    nb.add_argument("--db", default=DEFAULT_DB, help="the project's DuckDB file")
    nb.add_argument(
        "--config",
        default=None,
        help="suite config (default: ./evalkit.yaml, else corpus/evalkit.yaml)",
    )
    nb.add_argument("--baseline", default="baseline", help="run id or label")
    nb.add_argument("--candidate", default="candidate", help="run id or label")
    nb.add_argument("--out", default="notebooks", help="folder to write the notebook in")
    nb.add_argument("--force", action="store_true", help="overwrite an existing notebook")
    nb.set_defaults(handler=_cmd_notebook)


def notebook_file(name: str) -> str:
    """``slices``, ``slices.ipynb`` or ``judge-agreement`` -> the shipped file's name.

    Examples:
        >>> notebook_file("judge-agreement")
        'judge_agreement.ipynb'
    """
    return name.removesuffix(".ipynb").replace("-", "_") + ".ipynb"


def _cmd_notebook(args: argparse.Namespace) -> int:
    # papermill and nbconvert load with evalkit.notebooks: only when a notebook is asked for
    from evalkit.notebooks import (
        fill_notebook,
        project_parameters,
        shipped_notebooks,
        write_notebook,
    )

    name = notebook_file(args.name)
    if name not in shipped_notebooks():
        known = ", ".join(n.removesuffix(".ipynb") for n in shipped_notebooks())
        raise ConfigError(f"no notebook {args.name!r}; evalkit ships: {known}")
    if not Path(args.config).is_file():
        raise ConfigError(f"{args.config}: suite config not found; pass --config PATH")
    values = project_parameters(
        name, Path.cwd(), args.out, args.db, args.config, args.baseline, args.candidate
    )
    filled = fill_notebook(name, values)
    path = write_notebook(filled, args.out, force=args.force)
    shown = ", ".join(f"{key}={value!r}" for key, value in filled.parameters.items())
    print(f"evalkit notebook: wrote {path} ({shown}; relative to {os.path.normpath(args.out)}/)")
    print(f"open it: jupyter lab {path}   (Jupyter: pip install 'evalkit-gate[notebook]')")
    return 0

"""The ``evalkit`` command. Each subcommand is a thin call into the package.

Exit codes: 0 success, 1 gate blocked, 2 usage / config / corpus errors (one line, no traceback).
Output piped into a reader that stops early (``evalkit runs list | head``) ends quietly with 0.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from evalkit.cli.aliases import respell
from evalkit.cli.options import find_config
from evalkit.errors import EvalkitError
from evalkit.redact import strip_userinfo
from evalkit.run.timeline import mark
from evalkit.version import __version__

mark("cli")  # the interpreter is up and argparse loaded: before this is Python's start-up

#: Polars' allocator (its own jemalloc) hands freed pages back at once instead of keeping them
#: for reuse: a gate, push or merge reads frame after frame through DuckDB, whose allocator
#: cannot reuse them, so the kept pages only added to the peak (issue 48 item 4). Read once,
#: when Polars first loads: set before any command imports it; a value the user set is kept.
#: Importing Polars writes its own value into the environment, which every child inherits (a
#: notebook's ``!evalkit gate``, a Python CI script's subprocess): that one is not the user's.
_FREED_AT_ONCE = "dirty_decay_ms:0,muzzy_decay_ms:0"
_POLARS_OWN = ("dirty_decay_ms:500,muzzy_decay_ms:1000",
               "dirty_decay_ms:500,muzzy_decay_ms:1000,thp:always,metadata_thp:always")  # fmt: skip
_conf = os.environ.get("_RJEM_MALLOC_CONF")
if _conf is None or _conf in _POLARS_OWN:  # Polars' own then comes first: the later value wins
    os.environ["_RJEM_MALLOC_CONF"] = _FREED_AT_ONCE


#: The modules that register subcommands, in ``evalkit --help`` order: the daily loop's verbs
#: first, then the nouns whose verbs follow them (``evalkit runs list``). Each module is named
#: after the command it registers (``gate`` also registers ``override``, ``push_pull`` both).
COMMAND_GROUPS = (
    "init",
    "run",
    "compare",
    "gate",
    "plan",
    "push_pull",
    "history",
    "notebook",
    "demo",
    "runs",
    "cases",
    "baseline",
    "flakes",
    "labels",
    "judges",
    "cache",
    "traces",
    "fixtures",
    "scorers",
)
#: Which group registers each top-level command, so ``evalkit run`` imports the module of
#: ``run`` alone, not all of them (tests/cli/test_groups.py holds it equal to what the groups
#: register). A name not here (``--help``, a typo) builds the whole parser.
COMMAND_GROUP = {
    "baseline": "baseline",
    "cache": "cache",
    "cases": "cases",
    "compare": "compare",
    "demo": "demo",
    "fixtures": "fixtures",
    "flakes": "flakes",
    "gate": "gate",
    "history": "history",
    "init": "init",
    "judges": "judges",
    "labels": "labels",
    "notebook": "notebook",
    "override": "gate",
    "plan": "plan",
    "pull": "push_pull",
    "push": "push_pull",
    "run": "run",
    "runs": "runs",
    "scorers": "scorers",
    "traces": "traces",
}


def main(argv: Sequence[str] | None = None) -> int:
    global _own_process, _teardown_skippable
    _own_process = argv is None  # the process's own command line, not a caller's process
    _teardown_skippable = False  # each command says so anew: not an earlier call's run in here
    try:
        code = _main(list(sys.argv[1:] if argv is None else argv))
    except BrokenPipeError:
        # the reader went away (``| head``): say nothing more, and keep the interpreter's own
        # flush of stdout at exit from raising again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    if argv is None:  # the process's own command line: the interpreter exits next
        if _teardown_skippable:
            _end_process(code)
        _skip_final_collection()
    return code


#: Set by a command (:func:`skip_teardown`) once everything it opened is closed and written.
_teardown_skippable = False
#: Whether :func:`main` runs the process's own command line (``argv`` None).
_own_process = False


#: pydantic's switch for its plugins ("__all__": none; a comma list: not those).
_PYDANTIC_PLUGINS_OFF = "PYDANTIC_DISABLE_PLUGINS"


@contextlib.contextmanager
def start_up_imports() -> Iterator[None]:
    """Import a command's modules with the cycle collector off, then freeze what they made;
    and build evalkit's own pydantic models without pydantic's plugins.

    Importing ``evalkit run``'s modules (pydantic and its models, DuckDB, the runner) allocates
    tens of thousands of objects, and the collector ran over them again and again for nothing:
    modules and classes live to the end of the process. So what the imports leave is frozen
    out of the collector's reach (``gc.freeze``, as for a server that forks) and the collector
    is on again for the command's own work; the few cycles the imports left as garbage stay
    until exit. ``bench/bench_process.py timeline`` shows what it saves a short run.

    The first pydantic model built in a process looks for plugins (validation observers
    registered under the ``pydantic`` entry point group) by reading the metadata of every
    installed distribution, hundreds in a venv with Ray and Jupyter. evalkit's own models
    (the suite config, the corpus, the gate policy: all built at import) have no use for one,
    so they are built with ``PYDANTIC_DISABLE_PLUGINS`` set, pydantic's documented switch; it
    is put back as it was once the imports are done, so a model of the user's (a python
    system, a custom scorer, imported later) still meets every installed plugin.

    Only for the command line's own process: a caller of :func:`main` keeps its collector and
    its pydantic plugins as they were.
    """
    import gc

    if not _own_process:
        yield
        return
    collector = gc.isenabled()
    plugins = os.environ.get(_PYDANTIC_PLUGINS_OFF)
    os.environ[_PYDANTIC_PLUGINS_OFF] = "__all__"
    if collector:
        gc.disable()
    try:
        yield
    finally:
        if plugins is None:
            os.environ.pop(_PYDANTIC_PLUGINS_OFF, None)
        else:
            os.environ[_PYDANTIC_PLUGINS_OFF] = plugins
        if collector:
            gc.freeze()
            gc.enable()


def skip_teardown() -> None:
    """Let the command line's process end at ``os._exit`` once the command returns.

    For a command that has closed everything it opened (the store checkpointed and closed,
    files written and closed, its threads joined) and registered no exit handler that matters
    (no Ray, no server): the interpreter's shutdown would only free memory the kernel frees
    anyway (about 0.02 s of a 20-case ``evalkit run``, ``bench/bench_process.py timeline``).
    Nothing changes for a caller of :func:`main` in a longer-lived process (an ``argv``).
    """
    global _teardown_skippable
    _teardown_skippable = True


def _end_process(code: int) -> None:
    """Flush stdout and stderr, then end the process with ``code`` and no shutdown."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a reader gone (| head), a closed stream
            stream.flush()
    os._exit(code)


def _skip_final_collection() -> None:
    """Leave every object to the interpreter's exit as it is, uncollected.

    At exit the interpreter runs the cycle collector over every object still alive (all the
    modules of a run, a visible share of a short run's fixed cost in
    ``bench/bench_process.py timeline``); nothing a command leaves behind needs it (stores are
    closed, files flushed), so the objects are frozen out of its reach. Only for the command
    line: a caller of :func:`main` in a longer-lived process keeps its collector whole.
    """
    import gc

    gc.freeze()


def _main(args_list: list[str]) -> int:
    args_list, respelled = respell(args_list)
    if respelled:
        print(respelled, file=sys.stderr)
    if args_list[:2] == ["demo", "serve"]:
        # The simulator owns its flags; hand them over untouched.
        if "--detach" in args_list:
            from evalkit.cli.serve import serve_detached

            return serve_detached([a for a in args_list[2:] if a != "--detach"])
        from evalkit.demo.server import main as serve

        return serve(args_list[2:]) or 0
    if args_list == ["--version"]:  # what argparse would print, without building every parser
        print(f"evalkit {__version__}")
        return 0
    parser = _parser(_command_in(args_list))
    args = parser.parse_args(args_list)
    mark("parsed")
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        if "config" in vars(args) and (args.config is None or Path(args.config).is_dir()):
            args.config = find_config(args.config)
        return int(args.handler(args) or 0)
    except EvalkitError as exc:
        message = " ".join(strip_userinfo(str(exc)).split())  # one line, no URL credentials
        if len(message) > 1000:
            message = message[:997] + "..."
        print(f"evalkit: error: {message}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("evalkit: interrupted", file=sys.stderr)
        return 130


def _command_in(args_list: list[str]) -> str | None:
    """The top-level command ``args_list`` starts with, if any: an option first (``--help``,
    ``--version``), nothing or an unknown word builds the whole parser."""
    return args_list[0] if args_list and args_list[0] in COMMAND_GROUP else None


def _parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``evalkit`` parser: with ``command``, only its group's subcommands are registered
    (and only its module imported); without, all of them (``--help`` lists every command)."""
    parser = argparse.ArgumentParser(
        prog="evalkit", description="Paired, per-slice regression testing for LLM applications."
    )
    parser.add_argument("--version", action="version", version=f"evalkit {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    groups = (COMMAND_GROUP[command],) if command is not None else COMMAND_GROUPS
    for group in groups:
        importlib.import_module(f"evalkit.cli.{group}").add_parsers(sub)
    return parser


class _DefaultsFormatter(argparse.HelpFormatter):
    """Help that shows each option's default, when it has a meaningful one."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            "%(default)" in text
            or "default" in text
            or not action.option_strings
            or default in (None, False, [], argparse.SUPPRESS)
        ):
            return text
        return f"{text} (default: %(default)s)"


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", _DefaultsFormatter)
        super().__init__(*args, **kwargs)

"""A decided pair handed from ``evalkit gate`` to the gate notebook, so the gate decides once.

``evalkit gate`` computes the comparison and decision (`evalkit.compare.pin.gate_pair`) in a
thread while papermill starts the notebook's kernel, and writes them with `write_decided_pair`
into a file the notebook's ``DECIDED`` parameter names; the notebook's decision cell reads it
with `load_decided_pair` instead of deciding again. The CLI builds the report from them too and
hands it over in the same file (`evalkit.report.decided.load_decided_report` reads it), so the
kernel neither decides nor recomputes the report's slices and intervals. Without ``DECIDED``
(the notebook opened in Jupyter, or run by papermill alone) the notebook calls `gate_pair`
itself.

The file is a pickle: the comparison holds Polars frames and frozen records that JSON would
have to rebuild field by field. It is written only by the process that started the kernel,
into a private temporary folder (`decided_pair_folder`) that is removed when the notebook has
run, and read only from there; a decision that failed travels as its error's class name and
one-line message, raised again in the notebook as that `evalkit.errors` class, so the exit
code the notebook's error maps to (`evalkit.notebooks.USAGE_ERRORS`) stays as it was.

Examples:
    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> path = write_decided_pair(folder / "decided.pickle", error=ConfigError("no baseline"))
    >>> load_decided_pair(path)
    Traceback (most recent call last):
    ...
    evalkit.errors.ConfigError: no baseline
"""

from __future__ import annotations

import os
import pickle
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalkit import errors
from evalkit.errors import ConfigError, EvalkitError

if TYPE_CHECKING:
    from evalkit.compare.analysis import Comparison
    from evalkit.compare.decision import GateDecision

#: Marks the file as this module's, in this format.
_FORMAT = "evalkit-decided-pair/2"


def decided_pair_folder() -> Path:
    """A new private folder (mode 0700) for one gate's decided pair."""
    return Path(tempfile.mkdtemp(prefix="evalkit-gate-"))


def write_decided_pair(
    path: str | Path,
    comparison: Comparison | None = None,
    decision: GateDecision | None = None,
    *,
    report: object | None = None,
    error: EvalkitError | None = None,
) -> Path:
    """Write the decided pair (or the error that stopped it) to ``path``, atomically: the file
    appears whole or not at all, so a reader waiting for it never reads half of it. ``report``
    is the report built from them (`evalkit.report.build.Report`), handed over as it is."""
    path = Path(path)
    if error is not None:
        payload: dict[str, Any] = {"format": _FORMAT, "error": (type(error).__name__, str(error))}
    else:  # each pickled apart: a reader unpickles (and imports the modules of) what it asks for
        parts = {"comparison": comparison, "decision": decision, "report": report}
        payload = {"format": _FORMAT, "parts": {k: _pickled(v) for k, v in parts.items()}}
    part = path.with_name(path.name + ".part")
    part.write_bytes(pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL))
    os.replace(part, path)
    return path


def load_decided_pair(path: str | Path, wait_s: float = 600) -> tuple[Comparison, GateDecision]:
    """The comparison and decision ``evalkit gate`` handed over in ``path``, waiting up to
    ``wait_s`` for the file (the CLI may still be deciding while the kernel has started);
    its folder gone, at once.

    Raises:
        EvalkitError: the decision failed in the CLI (raised again as its own class), or the
            file never came.
    """
    got = read_decided(path, ("comparison", "decision"), wait_s)
    return got["comparison"], got["decision"]


def _pickled(value: object) -> bytes:
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def read_decided(
    path: str | Path, parts: Sequence[str] = ("comparison", "decision", "report"),
    wait_s: float = 600,
) -> dict[str, Any]:  # fmt: skip
    """The ``parts`` ``evalkit gate`` handed over in ``path`` (of ``comparison``, ``decision``
    and ``report``; None where it built none), waiting as `load_decided_pair` does; a decision
    that failed is raised again as its own class. Only the parts asked for are unpickled."""
    path = Path(path)
    deadline = time.monotonic() + wait_s
    while not path.is_file():
        if not path.parent.is_dir():  # the gate that made it has ended (an executed notebook
            # re-run in Jupyter names the folder its gate removed)
            raise ConfigError(
                f"{path}: the evalkit gate that handed this decision over has ended; "
                'set DECIDED = "" to decide here'
            )
        if time.monotonic() > deadline:
            raise ConfigError(f"{path}: no decided pair arrived from evalkit gate")
        time.sleep(0.01)
    payload = pickle.loads(path.read_bytes())  # our own file: see the docstring
    if not isinstance(payload, dict) or payload.get("format") != _FORMAT:
        raise ConfigError(f"{path}: not a decided pair written by evalkit gate")
    if "error" in payload:
        name, message = payload["error"]
        cls = getattr(errors, name, EvalkitError)
        if not (isinstance(cls, type) and issubclass(cls, EvalkitError)):
            cls = EvalkitError
        exc = cls.__new__(cls)
        Exception.__init__(exc, message)  # the message as the CLI rendered it, unchanged
        raise exc
    return {name: pickle.loads(payload["parts"][name]) for name in parts}

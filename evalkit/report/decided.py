"""The report ``evalkit gate`` built and handed to the gate notebook with its decision
(`evalkit.compare.handoff`): the notebook shows it without deciding again or recomputing it.

Examples:
    >>> import tempfile
    >>> from pathlib import Path
    >>> from evalkit.compare.handoff import write_decided_pair
    >>> from evalkit.errors import ConfigError
    >>> path = Path(tempfile.mkdtemp()) / "decided.pickle"
    >>> load_decided_report(write_decided_pair(path, error=ConfigError("no baseline")))
    Traceback (most recent call last):
    ...
    evalkit.errors.ConfigError: no baseline
"""

from __future__ import annotations

from pathlib import Path

from evalkit.compare.handoff import read_decided
from evalkit.report.build import Report, build_report


def load_decided_report(path: str | Path, wait_s: float = 600) -> Report:
    """The report of the pair ``evalkit gate`` decided, handed over in ``path`` (waiting up to
    ``wait_s`` for it, as `evalkit.compare.handoff.load_decided_pair` does); built here from
    the handed-over comparison and decision when the file carries none.

    Raises:
        EvalkitError: the decision failed in the CLI (raised again as its own class), or the
            file never came.
    """
    report = read_decided(path, ("report",), wait_s)["report"]
    if isinstance(report, Report):
        return report
    got = read_decided(path, ("comparison", "decision"), wait_s=0)
    return build_report(got["comparison"], got["decision"])

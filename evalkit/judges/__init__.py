"""Model judges and their agreement with people: human labels, calibration, pairwise judging,
judge gating and the published agreement data sets.

The labelling workflow's names are re-exported here, loaded on first use (the subpackage's
modules pull in Polars and numpy, and the widget ipywidgets):
``from evalkit.judges import open_labelling, show_labelling``.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "DEFAULT_SAMPLE": "evalkit.judges.labelling",
    "LabelItem": "evalkit.judges.labelling",
    "LabelSample": "evalkit.judges.labelling",
    "LabellingError": "evalkit.judges.labelling",
    "Stratum": "evalkit.judges.labelling",
    "human_agreement": "evalkit.judges.labelling",
    "sample_outputs": "evalkit.judges.labelling",
    "write_sheet": "evalkit.judges.labelling",
    "LabellingSession": "evalkit.judges.labelling_session",
    "Progress": "evalkit.judges.labelling_session",
    "open_labelling": "evalkit.judges.labelling_session",
    "labelling_widget": "evalkit.judges.labelling_widget",
    "show_labelling": "evalkit.judges.labelling_widget",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'evalkit.judges' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])

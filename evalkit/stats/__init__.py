"""Statistics for paired regression gates: exact McNemar, small-n intervals, bootstraps, sizing,
agreement.

Pure functions (numpy + scipy only): arrays or counts in, floats or frozen dataclasses out.
Resampling functions take ``seed`` (an int or a ``np.random.Generator``, from which one int is
drawn) and record the int seed; passing ``result.seed`` back reproduces the result exactly. The
global numpy RNG is never used. One module per concept:

- `evalkit.stats.exact`: `mcnemar_exact` (and mid-p), `exact_min_flips`, `holm`;
- `evalkit.stats.intervals`: `wilson_interval`, `clopper_pearson_interval`, and
  `paired_diff_interval`, the pass/fail slice interval that holds at small n;
- `evalkit.stats.bootstrap`: `paired_bootstrap` (percentile or BCa), `cluster_bootstrap`,
  `clustered_se` and `clustered_interval` (its t interval), for graded scores and case groups;
- `evalkit.stats.sizing`: paired (Connor, Wald), unpaired (equal rate, two rates) and replay
  (Miller 2024) sample sizes, `exact_power_paired`;
- `evalkit.stats.agreement`: `cohen_kappa(_ci)`, `krippendorff_alpha`, `fleiss_kappa`.

Every name is re-exported here: ``from evalkit import stats; stats.mcnemar_exact(4, 0)``. The
submodules load on first use (scipy.special and scipy.optimize are slow imports), so a
command that only needs ``exact_min_flips`` (``evalkit run``'s policy check) never loads scipy.
None of them loads scipy.stats (slower still): `evalkit.stats._dist` computes the few
distribution functions they use from scipy.special, exactly where counts allow.

>>> from evalkit.stats import mcnemar_exact, paired_diff_interval
>>> mcnemar_exact(4, 0), paired_diff_interval(4, 0, 8).hi
(0.0625, 0.0)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "Alternative": "evalkit.stats._base",
    "BootMethod": "evalkit.stats.bootstrap",
    "BootstrapResult": "evalkit.stats.bootstrap",
    "ClusteredMean": "evalkit.stats.bootstrap",
    "Interval": "evalkit.stats._base",
    "KappaResult": "evalkit.stats.agreement",
    "McNemarResult": "evalkit.stats.exact",
    "PairedInterval": "evalkit.stats.intervals",
    "PairedMethod": "evalkit.stats.intervals",
    "Seed": "evalkit.stats._base",
    "Sides": "evalkit.stats._base",
    "TotalsResult": "evalkit.stats.totals",
    "Weights": "evalkit.stats.agreement",
    "clopper_pearson_interval": "evalkit.stats.intervals",
    "cluster_bootstrap": "evalkit.stats.bootstrap",
    "clustered_interval": "evalkit.stats.bootstrap",
    "clustered_se": "evalkit.stats.bootstrap",
    "cohen_kappa": "evalkit.stats.agreement",
    "cohen_kappa_ci": "evalkit.stats.agreement",
    "design_effect": "evalkit.stats.gate_power",
    "exact_min_flips": "evalkit.stats.exact",
    "exact_power_gate": "evalkit.stats.gate_power",
    "exact_power_paired": "evalkit.stats.sizing",
    "fleiss_kappa": "evalkit.stats.agreement",
    "holm": "evalkit.stats.exact",
    "icc_oneway": "evalkit.stats.gate_power",
    "krippendorff_alpha": "evalkit.stats.agreement",
    "majority_error": "evalkit.stats.gate_power",
    "mcnemar": "evalkit.stats.exact",
    "mcnemar_exact": "evalkit.stats.exact",
    "min_detectable_collapse": "evalkit.stats.gate_power",
    "min_detectable_drop_paired": "evalkit.stats.sizing",
    "observed_flips": "evalkit.stats.gate_power",
    "paired_bootstrap": "evalkit.stats.bootstrap",
    "paired_diff_interval": "evalkit.stats.intervals",
    "paired_totals": "evalkit.stats.totals",
    "replay_error": "evalkit.stats.gate_power",
    "required_n": "evalkit.stats.sizing",
    "required_n_exact": "evalkit.stats.gate_power",
    "required_n_paired": "evalkit.stats.sizing",
    "required_n_paired_wald": "evalkit.stats.sizing",
    "required_n_replays": "evalkit.stats.sizing",
    "required_n_two_rates": "evalkit.stats.sizing",
    "required_n_unpaired": "evalkit.stats.sizing",
    "tango_score": "evalkit.stats.intervals",
    "wilson_interval": "evalkit.stats.intervals",
}

__all__ = [
    "Alternative",
    "BootMethod",
    "BootstrapResult",
    "ClusteredMean",
    "Interval",
    "KappaResult",
    "McNemarResult",
    "PairedInterval",
    "PairedMethod",
    "Seed",
    "Sides",
    "TotalsResult",
    "Weights",
    "clopper_pearson_interval",
    "cluster_bootstrap",
    "clustered_interval",
    "clustered_se",
    "cohen_kappa",
    "cohen_kappa_ci",
    "design_effect",
    "exact_min_flips",
    "exact_power_gate",
    "exact_power_paired",
    "fleiss_kappa",
    "holm",
    "icc_oneway",
    "krippendorff_alpha",
    "majority_error",
    "mcnemar",
    "mcnemar_exact",
    "min_detectable_collapse",
    "min_detectable_drop_paired",
    "observed_flips",
    "paired_bootstrap",
    "paired_diff_interval",
    "paired_totals",
    "replay_error",
    "required_n",
    "required_n_exact",
    "required_n_paired",
    "required_n_paired_wald",
    "required_n_replays",
    "required_n_two_rates",
    "required_n_unpaired",
    "tango_score",
    "wilson_interval",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'evalkit.stats' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:
    from evalkit.stats._base import Alternative, Interval, Seed, Sides
    from evalkit.stats.agreement import (
        KappaResult,
        Weights,
        cohen_kappa,
        cohen_kappa_ci,
        fleiss_kappa,
        krippendorff_alpha,
    )
    from evalkit.stats.bootstrap import (
        BootMethod,
        BootstrapResult,
        ClusteredMean,
        cluster_bootstrap,
        clustered_interval,
        clustered_se,
        paired_bootstrap,
    )
    from evalkit.stats.exact import McNemarResult, exact_min_flips, holm, mcnemar, mcnemar_exact
    from evalkit.stats.gate_power import (
        design_effect,
        exact_power_gate,
        icc_oneway,
        majority_error,
        min_detectable_collapse,
        observed_flips,
        replay_error,
        required_n_exact,
    )
    from evalkit.stats.intervals import (
        PairedInterval,
        PairedMethod,
        clopper_pearson_interval,
        paired_diff_interval,
        tango_score,
        wilson_interval,
    )
    from evalkit.stats.sizing import (
        exact_power_paired,
        min_detectable_drop_paired,
        required_n,
        required_n_paired,
        required_n_paired_wald,
        required_n_replays,
        required_n_two_rates,
        required_n_unpaired,
    )
    from evalkit.stats.totals import TotalsResult, paired_totals

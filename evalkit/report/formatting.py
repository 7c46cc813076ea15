"""How numbers and untrusted text are shown in every report: rates as percentages, differences
in points with their interval, p-values to 3 significant digits, control characters escaped."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# C0 and C1 control characters (tab and newline kept) and the bidirectional overrides.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def inert(text: str | None) -> str:
    r"""``text`` with every control character shown as a ``\xNN`` / ``\uNNNN`` escape, so
    a model output cannot clear the screen, retitle the window or forge coloured lines.

    Examples:
        >>> inert("\x1b]0;pwned\x07gate \x1b[32mPASSED")
        '\\x1b]0;pwned\\x07gate \\x1b[32mPASSED'
    """
    if not text:
        return text or ""
    return _CONTROL.sub(
        lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 256 else f"\\u{ord(m[0]):04x}", text
    )


def fmt_pct(x: float | None, digits: int = 1) -> str:
    """A rate as a percentage (``–`` when missing)."""
    return "–" if x is None else f"{100 * x:.{digits}f}%"


def fmt_pts(x: float | None, lo: float | None = None, hi: float | None = None) -> str:
    """A difference of rates in percentage points, with its interval when given."""
    if x is None:
        return "–"
    ci = f" [{100 * lo:+.1f}, {100 * hi:+.1f}]" if lo is not None and hi is not None else ""
    return f"{100 * x:+.1f} pts{ci}"


def fmt_p(p: float | None) -> str:
    """A p-value to 3 significant digits (``–`` when there is none).

    Examples:
        >>> fmt_p(0.00390625), fmt_p(1.0), fmt_p(None)
        ('0.00391', '1', '–')
    """
    return "–" if p is None else f"{p:.3g}"


def describe_statistic(stat: dict) -> str:
    """A finding's statistic in words: flips, p, the difference with its interval, errors.

    Examples:
        >>> describe_statistic({"n": 8, "broken": 5, "fixed": 0, "p_value": 0.03125})
        '5 broken / 0 fixed of 8; p = 0.0312'
    """
    parts = []
    if stat.get("n") is not None and stat.get("broken") is not None:
        parts.append(f"{stat['broken']} broken / {stat.get('fixed', 0)} fixed of {stat['n']}")
    if stat.get("p_value") is not None:
        parts.append(f"p = {fmt_p(stat['p_value'])}")
    if stat.get("hi") is not None:
        parts.append(fmt_pts(stat.get("diff"), stat.get("lo"), stat["hi"]))
    if stat.get("n_error") is not None:
        parts.append(f"{stat['n_error']} errored")
    if stat.get("observed") is not None:
        parts.append(f"{stat['observed']:.4g} over the limit of {stat.get('limit')}")
    if stat.get("flake_rate"):
        parts.append(f"flake rate {stat['flake_rate']:.0%}")
    return "; ".join(parts)


def ci_label(level: float) -> str:
    """An interval's header at its real level: "95% CI", "98% CI", "97.5% CI".

    Examples:
        >>> ci_label(0.95), ci_label(1 - 2 * 0.01), ci_label(0.975)
        ('95% CI', '98% CI', '97.5% CI')
    """
    return f"{100 * level:.4g}% CI"


def growth_text(row: Mapping[str, Any]) -> str:
    """One usage-delta row's change as shown: "×1.90 [1.41, 2.44]" (ratio of totals), the mean
    difference when the baseline total is 0, or "+0.20 s [+0.1, +0.3]" per case; "(t)" after a
    row no budget reads (a t interval, not the paired bootstrap).

    Examples:
        >>> growth_text({"kind": "ratio", "base_total": 10.0, "estimate": 1.9, "lo": 1.4,
        ...              "hi": 2.4, "mean_diff": 0.9, "diff_lo": 0.4, "diff_hi": 1.4})
        '×1.90 [1.40, 2.40]; mean +0.9 per case [+0.4, +1.4]'
    """
    t = " (t)" if row.get("interval") == "t" else ""
    diff = f"mean {row['mean_diff']:+.3g} per case [{row['diff_lo']:+.3g}, {row['diff_hi']:+.3g}]"
    if row["kind"] != "ratio":
        what = "median" if row["kind"] == "median seconds" else "mean"
        bounds = "" if row["lo"] is None else f" [{row['lo']:+.2f}, {row['hi']:+.2f}]"
        return f"{what} {row['estimate']:+.2f} s per case{bounds}{t}"
    if row["base_total"] == 0:
        return f"from a total of 0; {diff}{t}"
    return f"×{row['estimate']:.2f} [{row['lo']:.2f}, {row['hi']:.2f}]; {diff}{t}"

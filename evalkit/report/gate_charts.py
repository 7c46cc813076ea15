"""Charts of the gate's noise and error rates: how often each slice flips with nothing changed
(the measured flake rate), and the gate's false-block rate and power as measured by
`evalkit.compare.power.operating_characteristics`. Each displays itself as the charts of
`evalkit.report.charts` do.
"""

from __future__ import annotations

import altair as alt
import polars as pl

from evalkit.report.charts import NEUTRAL, Chart, HConcatChart


def flake_rate_by_slice(per_slice: pl.DataFrame) -> Chart:
    """Share of each slice's cases that changed verdict across identical runs (the noise floor).

    ``per_slice`` is :func:`evalkit.compare.flakes.flake_slices` output: ``tag, cases, flaky,
    flake_rate``.

    Examples:
        >>> df = pl.DataFrame({"tag": ["a", "b"], "cases": [10, 8], "flaky": [1, 0],
        ...                    "flake_rate": [0.1, 0.0]})
        >>> flake_rate_by_slice(df).to_dict()["mark"]["type"]
        'bar'
    """
    order = per_slice.sort("flake_rate", descending=True)["tag"].to_list()
    return (
        Chart(per_slice)
        .mark_bar()
        .encode(
            x=alt.X("flake_rate:Q", axis=alt.Axis(format="%"), title="cases that flipped"),
            y=alt.Y("tag:N", sort=order, title=None),
            tooltip=["tag:N", "cases:Q", "flaky:Q", alt.Tooltip("flake_rate:Q", format=".1%")],
        )
        .properties(title="Flake rate by slice", width=420, height=max(22 * len(order), 60))
    )


def _layout(row: dict) -> str:
    """A corpus layout's label: its tag size, or the range of its tags' sizes."""
    sizes = sorted((row.get("sizes") or {"": row["n"]}).values())
    return f"{sizes[0]}" if sizes[0] == sizes[-1] else f"{sizes[0]}–{sizes[-1]}"


def gate_operating_characteristics(oc: dict) -> HConcatChart:
    """The gate's measured false-block rate (per tag and family-wise, with alpha as a rule) and
    its power against true drops; ``oc`` from `evalkit.compare.power.operating_characteristics`.
    """
    alpha = oc["alpha"]
    null = pl.DataFrame(
        [
            {"flake": f"flake {r['flake']:.0%}", "n": _layout(r), "rate": rate, "what": what}
            for r in oc["null"]
            for what, rate in [("per tag", r["per_tag"]),
                               (f"family-wise, {len(r['fwer'])} tags",
                                r["fwer"][str(len(r["fwer"]))])]
        ]
    )  # fmt: skip
    power = pl.DataFrame(
        [{"drop": f"{100 * r['drop']:.0f}-point drop", "n": _layout(r), "power": r["power"]}
         for r in oc["power"]]
    )  # fmt: skip
    order = list(dict.fromkeys(_layout(r) for r in sorted(oc["null"], key=lambda r: r["n"])))
    x = alt.X("n:N", title="cases per critical tag", sort=order)
    lines = (
        alt.Chart(null)
        .mark_line(point=True)
        .encode(
            x=x,
            y=alt.Y("rate:Q", title="false-block rate (no true change)", axis=alt.Axis(format="%")),
            color=alt.Color("flake:N", title="measured flake rate"),
            strokeDash=alt.StrokeDash("what:N", title="rate"),
            tooltip=["n", "flake", "what", alt.Tooltip("rate:Q", format=".2%")],
        )
    )
    rule = alt.Chart(pl.DataFrame({"alpha": [alpha]})).mark_rule(color=NEUTRAL, strokeDash=[4, 4])
    rule = rule.encode(y="alpha:Q")
    title = f"False blocks (dashed rule: alpha {alpha:g})"
    left = (lines + rule).properties(title=title, width=300)
    right = (
        alt.Chart(power)
        .mark_line(point=True)
        .encode(
            x=x,
            y=alt.Y(
                "power:Q",
                title="chance the tag blocks",
                axis=alt.Axis(format="%"),
                scale=alt.Scale(domain=[0, 1]),
            ),
            color=alt.Color("drop:N", title="true regression"),
            tooltip=["n", "drop", alt.Tooltip("power:Q", format=".1%")],
        )
        .properties(title="Power against true regressions", width=300)
    )
    return HConcatChart(hconcat=[left, right]).resolve_scale(color="independent")

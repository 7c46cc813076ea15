"""Altair charts: each function takes Polars frames and returns an ``alt.Chart``.

Save with :func:`save_chart` (HTML always, PNG through vl-convert-python).
"""

from __future__ import annotations

from pathlib import Path

import altair as alt
import polars as pl


def save_chart(chart: alt.TopLevelMixin, path_stem: str | Path, png: bool = True) -> list[Path]:
    """Write ``<stem>.html`` (and ``<stem>.png`` when ``png``); return the written paths."""
    stem = Path(path_stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    written = [stem.with_suffix(".html")]
    chart.save(str(written[0]))
    if png:
        written.append(stem.with_suffix(".png"))
        chart.save(str(written[1]), format="png", scale_factor=1.0)
    return written


# --- paired comparison charts (slices frame from `evalkit.compare.analysis.slices`) ---


def _slice_rows(slices: pl.DataFrame) -> pl.DataFrame:
    return slices.filter(pl.col("n") > 0).with_columns(
        pl.when(pl.col("slice") == "ALL")
        .then(pl.lit("ALL (aggregate)"))
        .otherwise("slice")
        .alias("slice")
    )


def slice_forest(slices: pl.DataFrame, tolerance: float | None = 0.02) -> alt.LayerChart:
    """Forest plot: each slice's paired pass-rate difference (candidate − baseline) with its
    bootstrap interval, the aggregate last; a dashed rule marks ``-tolerance``.

    Examples:
        >>> from evalkit.compare.analysis import slices
        >>> chart = slice_forest(slices(paired))  # doctest: +SKIP
    """
    data = _slice_rows(slices)
    order = data["slice"].to_list()
    y = alt.Y("slice:N", sort=order, title=None)
    base = alt.Chart(data).encode(y=y)
    rule = base.mark_rule().encode(
        x=alt.X(
            "diff_lo:Q",
            title="pass-rate difference, candidate − baseline",
            axis=alt.Axis(format="+%"),
        ),
        x2="diff_hi:Q",
    )
    point = base.mark_point(filled=True, size=60).encode(
        x="diff:Q",
        color=alt.condition(alt.datum.diff_hi < 0, alt.value("#c0392b"), alt.value("#2c3e50")),
        tooltip=[
            "slice",
            "n",
            "broken",
            "fixed",
            alt.Tooltip("diff:Q", format="+.1%"),
            alt.Tooltip("p_value:Q", format=".3g"),
        ],
    )
    layers = [rule, point, alt.Chart(pl.DataFrame({"x": [0.0]})).mark_rule().encode(x="x:Q")]
    if tolerance:
        tol = pl.DataFrame({"x": [-tolerance]})
        layers.append(alt.Chart(tol).mark_rule(strokeDash=[4, 4], color="#c0392b").encode(x="x:Q"))
    return alt.layer(*layers).properties(title="Paired difference per slice", width=420)


def flip_counts(slices: pl.DataFrame) -> alt.Chart:
    """Broken (pass → fail) and fixed (fail → pass) cases per slice, side by side."""
    data = _slice_rows(slices).unpivot(
        index="slice", on=["broken", "fixed"], variable_name="flip", value_name="cases"
    )
    return (
        alt.Chart(data)
        .mark_bar()
        .encode(
            y=alt.Y("slice:N", sort=None, title=None),
            yOffset="flip:N",
            x=alt.X("cases:Q", title="cases"),
            color=alt.Color(
                "flip:N", scale=alt.Scale(domain=["broken", "fixed"], range=["#c0392b", "#27ae60"])
            ),
            tooltip=["slice", "flip", "cases"],
        )
        .properties(title="Flips per slice", width=420)
    )


def pass_rate_by_slice(slices: pl.DataFrame) -> alt.LayerChart:
    """Baseline and candidate pass rates per slice with Wilson intervals."""
    rows = _slice_rows(slices)
    data = pl.concat(
        [
            rows.select(
                "slice",
                pl.lit(run).alias("run"),
                pl.col(f"{p}_pass").alias("pass_rate"),
                pl.col(f"{p}_lo").alias("lo"),
                pl.col(f"{p}_hi").alias("hi"),
            )
            for run, p in (("baseline", "base"), ("candidate", "cand"))
        ]
    )
    enc = {"y": alt.Y("slice:N", sort=None, title=None), "yOffset": "run:N", "color": "run:N"}
    bars = (
        alt.Chart(data)
        .mark_rule()
        .encode(
            x=alt.X(
                "lo:Q", title="pass rate", axis=alt.Axis(format="%"), scale=alt.Scale(zero=False)
            ),
            x2="hi:Q",
            **enc,
        )
    )
    points = (
        alt.Chart(data)
        .mark_point(filled=True)
        .encode(
            x="pass_rate:Q",
            tooltip=["slice", "run", alt.Tooltip("pass_rate:Q", format=".1%")],
            **enc,
        )
    )
    return (bars + points).properties(title="Pass rate by slice", width=420)


def min_detectable_drop(power: pl.DataFrame) -> alt.Chart:
    """Per slice, the smallest drift (at the assumed flip rate) and the smallest collapse (every
    flip a break) it can detect; frame from `evalkit.compare.gate.power_table`. Missing bar =
    cannot."""
    data = power.unpivot(
        index=["slice", "n"],
        on=["min_detectable_drop", "min_detectable_collapse"],
        variable_name="kind",
        value_name="drop",
    ).with_columns(
        pl.col("kind").replace(
            {"min_detectable_drop": "drift, at ψ", "min_detectable_collapse": "collapse"}
        )
    )
    return (
        alt.Chart(data.drop_nulls("drop"))
        .mark_bar()
        .encode(
            y=alt.Y("slice:N", title=None),
            yOffset="kind:N",
            color=alt.Color("kind:N", title="smallest detectable"),
            x=alt.X("drop:Q", title="smallest detectable drop", axis=alt.Axis(format="%")),
            tooltip=["slice", "n", "kind", alt.Tooltip("drop:Q", format=".1%")],
        )
        .properties(title="What each slice can detect", width=420)
    )


def to_svg(chart: alt.TopLevelMixin) -> str:
    """Render a chart to an SVG string offline (vl-convert), for self-contained HTML reports."""
    import vl_convert

    return vl_convert.vegalite_to_svg(chart.to_dict())


# --- judge–human agreement (notebooks/judge_agreement.ipynb) ---------------------------------


def confusion_heatmap(
    conf_long: pl.DataFrame, title: str = "Human label vs judge verdict"
) -> alt.Chart:
    """Heatmap of a long confusion matrix (``human``, ``judge``, ``n``), counts printed in cells.

    Rows are the human label, columns the judge's; both axes keep the frame's label order
    (as :func:`evalkit.judges.agreement.confusion_matrix` returns it). Cells on the diagonal agree.

    Examples:
        >>> from evalkit.judges.agreement import confusion_matrix
        >>> chart = confusion_heatmap(confusion_matrix([1, 2, 2], [1, 2, 1]))
        >>> chart.to_dict()["layer"][0]["mark"]["type"]
        'rect'
    """
    data = conf_long.with_columns(pl.col("human").cast(pl.String), pl.col("judge").cast(pl.String))
    order = data["human"].unique(maintain_order=True).to_list()
    order += [x for x in data["judge"].unique(maintain_order=True).to_list() if x not in order]
    base = alt.Chart(data, title=title).encode(
        x=alt.X("judge:N", sort=order, title="judge", axis=alt.Axis(labelAngle=0)),
        y=alt.Y("human:N", sort=order, title="human"),
    )
    rect = base.mark_rect().encode(
        color=alt.Color("n:Q", scale=alt.Scale(scheme="blues"), title="items"),
        tooltip=["human:N", "judge:N", "n:Q"],
    )
    top = max(int(data["n"].max() or 0), 1)
    text = base.mark_text(fontSize=13).encode(
        text="n:Q",
        color=alt.condition(alt.datum.n > top / 2, alt.value("white"), alt.value("black")),
    )
    return (rect + text).properties(width=60 * len(order), height=60 * len(order))


def agreement_by_slice(
    frame: pl.DataFrame, title: str = "Judge–human agreement by slice"
) -> alt.Chart:
    """Dot-and-interval plot per slice: ``slice, agreement, lo, hi, n`` (e.g. from
    :func:`evalkit.judges.agreement.slice_agreement`), weakest slice at the top; a dashed rule marks
    the pooled agreement over all slices (n-weighted).

    Examples:
        >>> df = pl.DataFrame({"slice": ["a", "b"], "agreement": [0.6, 0.9], "lo": [0.4, 0.8],
        ...                    "hi": [0.8, 0.95], "n": [20, 50]})
        >>> len(agreement_by_slice(df).to_dict()["layer"])
        3
    """
    data = frame.select("slice", "agreement", "lo", "hi", "n").with_columns(
        pl.col("slice").cast(pl.String)
    )
    order = data.sort("agreement", "slice")["slice"].to_list()
    pooled = float((data["agreement"] * data["n"]).sum() / max(int(data["n"].sum()), 1))
    y = alt.Y("slice:N", sort=order, title=None)
    scale = alt.Scale(domain=[0, 1])
    base = alt.Chart(data, title=title)
    rule = base.mark_rule().encode(
        x=alt.X("lo:Q", scale=scale, title="agreement (Wilson interval)"), x2="hi:Q", y=y
    )
    dots = base.mark_point(filled=True, size=60).encode(
        x=alt.X("agreement:Q", scale=scale),
        y=y,
        tooltip=[
            "slice:N",
            "n:Q",
            alt.Tooltip("agreement:Q", format=".3f"),
            alt.Tooltip("lo:Q", format=".3f"),
            alt.Tooltip("hi:Q", format=".3f"),
        ],
    )
    ref = (
        alt.Chart(pl.DataFrame({"pooled": [pooled]}))
        .mark_rule(strokeDash=[4, 4], color="gray")
        .encode(x="pooled:Q")
    )
    return (rule + dots + ref).properties(width=420, height=max(22 * len(order), 60))


def order_consistency(
    frame: pl.DataFrame, title: str = "Judge verdicts in both orders"
) -> alt.Chart:
    """Per slice: accuracy with the outputs shown as given (``accuracy_ab``) and swapped
    (``accuracy_ba``), and the share of items judged the same both ways (``consistency``).

    ``frame`` has one row per slice: ``slice, accuracy_ab, accuracy_ba, consistency``. A grey
    bar joins the two accuracies: its length is the position effect on accuracy.

    Examples:
        >>> df = pl.DataFrame({"slice": ["a"], "accuracy_ab": [0.8], "accuracy_ba": [0.7],
        ...                    "consistency": [0.85]})
        >>> len(order_consistency(df).to_dict()["layer"])
        2
    """
    data = frame.select("slice", "accuracy_ab", "accuracy_ba", "consistency").with_columns(
        pl.col("slice").cast(pl.String)
    )
    names = {
        "accuracy_ab": "accuracy, order a,b",
        "accuracy_ba": "accuracy, order b,a",
        "consistency": "same verdict both orders",
    }
    long = data.unpivot(index="slice", variable_name="measure", value_name="value").with_columns(
        pl.col("measure").replace_strict(names)
    )
    order = data["slice"].to_list()
    y = alt.Y("slice:N", sort=order, title=None)
    gap = (
        alt.Chart(data)
        .mark_rule(color="lightgray", strokeWidth=6)
        .encode(x=alt.X("accuracy_ab:Q"), x2="accuracy_ba:Q", y=y)
    )
    dots = (
        alt.Chart(long)
        .mark_point(filled=True, size=70)
        .encode(
            x=alt.X("value:Q", scale=alt.Scale(domain=[0, 1]), title="share of items"),
            y=y,
            color=alt.Color("measure:N", sort=list(names.values()), title=None),
            tooltip=["slice:N", "measure:N", alt.Tooltip("value:Q", format=".3f")],
        )
    )
    return (gap + dots).properties(title=title, width=420, height=max(26 * len(order), 60))


def flake_rate_by_slice(per_slice: pl.DataFrame) -> alt.Chart:
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
        alt.Chart(per_slice)
        .mark_bar()
        .encode(
            x=alt.X("flake_rate:Q", axis=alt.Axis(format="%"), title="cases that flipped"),
            y=alt.Y("tag:N", sort=order, title=None),
            tooltip=["tag:N", "cases:Q", "flaky:Q", alt.Tooltip("flake_rate:Q", format=".1%")],
        )
        .properties(title="Flake rate by slice", width=420, height=max(22 * len(order), 60))
    )

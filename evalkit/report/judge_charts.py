"""Charts of a judge's agreement with people: the confusion heatmap, agreement per slice and
the judge's consistency across presentation orders (Altair, offline like every evalkit chart:
each displays as Vega-Lite with static SVG and PNG, `evalkit.report.charts.to_mimebundle`; save
with :func:`evalkit.report.charts.save_chart`)."""

from __future__ import annotations

import altair as alt
import polars as pl

from evalkit.report.charts import LayerChart


def confusion_heatmap(
    conf_long: pl.DataFrame, title: str = "Human label vs judge verdict"
) -> LayerChart:
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
    top = max(int(data.select(pl.col("n").max()).item() or 0), 1)
    text = base.mark_text(fontSize=13).encode(
        text="n:Q",
        color=alt.condition(alt.datum.n > top / 2, alt.value("white"), alt.value("black")),
    )
    return LayerChart(layer=[rect, text]).properties(width=60 * len(order), height=60 * len(order))


def agreement_by_slice(
    frame: pl.DataFrame, title: str = "Judge–human agreement by slice"
) -> LayerChart:
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
    return LayerChart(layer=[rule, dots, ref]).properties(
        width=420, height=max(22 * len(order), 60)
    )


def order_consistency(
    frame: pl.DataFrame, title: str = "Judge verdicts in both orders"
) -> LayerChart:
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
    chart = LayerChart(layer=[gap, dots])
    return chart.properties(title=title, width=420, height=max(26 * len(order), 60))

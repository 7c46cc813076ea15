"""How evalkit draws a table: a great_tables table in one house style (missing values as an en
dash, compact rows, left-aligned), shared by the compare reports and the judges' displays.

Examples:
    >>> import polars as pl
    >>> styled_table(pl.DataFrame({"n": [1]}), "t", "A title").as_raw_html()[:6]
    '<div i'
"""

from __future__ import annotations

import polars as pl
from great_tables import GT


def styled_table(
    frame: pl.DataFrame, id: str, title: str | None = None, note: str | None = None
) -> GT:
    """``frame`` as a great_tables table with evalkit's style, a title and a source note."""
    table = GT(frame, id=id).sub_missing(missing_text="–")
    if title:
        table = table.tab_header(title=title)
    if note:
        table = table.tab_source_note(note)
    return table.tab_options(
        table_font_size="13px", data_row_padding="3px", table_margin_left="0px"
    )


#: Float columns shown as percentages by `table`: rates and pass shares, by their names.
_PERCENT_NAMES = ("rate", "_pass", "share", "agreement")


def table(
    frame: pl.DataFrame, title: str | None = None, note: str | None = None, id: str | None = None
) -> GT:
    """``evalkit.table``: any frame in evalkit's house style, for a notebook cell (its id, which
    scopes the table's CSS, made from its title and columns unless given). Float columns named
    as rates (``pass_rate``, ``base_pass``, ``flake_rate``, ...) show as percentages, other
    floats with three significant digits; list columns are joined with commas.

    Examples:
        >>> runs = pl.DataFrame({"label": ["baseline"], "pass_rate": [0.8125]})
        >>> "81.2%" in table(runs, "Runs").as_raw_html()
        True
    """
    import hashlib

    if id is None:
        digest = hashlib.sha256(repr((title, frame.columns)).encode()).hexdigest()[:10]
        id = f"evalkit-{digest}"
    lists = [c for c, t in frame.schema.items() if isinstance(t, pl.List)]
    frame = frame.with_columns(pl.col(c).cast(pl.List(pl.String)).list.join(", ") for c in lists)
    floats = [c for c, t in frame.schema.items() if t.is_float()]
    rates = [c for c in floats if any(part in c for part in _PERCENT_NAMES)]
    shown = styled_table(frame, id, title, note)
    if rates:
        shown = shown.fmt_percent(columns=rates, decimals=1)
    others = [c for c in floats if c not in rates]
    if others:
        shown = shown.fmt_number(columns=others, n_sigfig=3)
    return shown

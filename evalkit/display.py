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


def table(
    frame: pl.DataFrame, title: str | None = None, note: str | None = None, id: str | None = None
) -> GT:
    """``evalkit.table``: any frame in evalkit's house style, for a notebook cell (its id, which
    scopes the table's CSS, made from its title and columns unless given).

    Examples:
        >>> cases = pl.DataFrame({"tag": ["billing"], "cases": [8]})
        >>> table(cases, "Cases per tag").as_raw_html()[:6]
        '<div i'
    """
    import hashlib

    if id is None:
        digest = hashlib.sha256(repr((title, frame.columns)).encode()).hexdigest()[:10]
        id = f"evalkit-{digest}"
    return styled_table(frame, id, title, note)

"""The notebook labelling view: one output at a time with the rubric beside it, a button per
rubric level, Skip and Back, keyboard shortcuts and progress. Every control calls the
:class:`~evalkit.judges.labelling_session.LabellingSession` (which stores the label at once);
the view keeps no state of its own, so what the tests prove of the session holds here.

Keyboard: ipywidgets has no key events, so the view has a small "keys" box; with it focused,
typing a level's digit labels, ``s`` skips, ``b`` goes back (the box empties itself after each).

ipywidgets comes with the ``notebook`` extra (``pip install 'evalkit-gate[notebook]'``) and is
imported on first use; without it :func:`show_labelling` shows the current item as static HTML
and says how to label through ``session.label(...)``.

Examples:
    >>> shortcuts((1, 2, 3, 4, 5))
    {'1': 1, '2': 2, '3': 3, '4': 4, '5': 5, 's': 'skip', 'b': 'back'}
    >>> session = open_labelling("data/demo.duckdb", "baseline", "ana")  # doctest: +SKIP
    >>> show_labelling(session)                                         # doctest: +SKIP
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from evalkit.errors import EvalkitError
from evalkit.judges.labelling import LabellingError

if TYPE_CHECKING:
    from evalkit.judges.labelling_session import LabellingSession

__all__ = [
    "BACK",
    "SKIP",
    "LabellingCard",
    "LabellingView",
    "act",
    "card_html",
    "labelling_widget",
    "press",
    "shortcuts",
    "show_labelling",
]

SKIP, BACK = "skip", "back"
_INSTALL = "pip install 'evalkit-gate[notebook]'"
_PRE = "white-space: pre-wrap; background: #f6f6f6; padding: 0.5em; margin: 0"


def shortcuts(levels: Sequence[int]) -> dict[str, int | str]:
    """Key -> what it does: a single-digit level labels, ``s`` skips, ``b`` goes back."""
    keys: dict[str, int | str] = {str(level): level for level in levels if 0 <= level <= 9}
    return {**keys, "s": SKIP, "b": BACK}


def press(session: LabellingSession, key: str, note: str | None = None) -> str:
    """Do what ``key`` means (see :func:`shortcuts`) and say what happened, in one line; an
    unknown key does nothing."""
    action = shortcuts(session.levels).get(key.strip().lower())
    if action is None:
        return f"key {key!r} does nothing here ({_key_help(session)})"
    return act(session, action, note)


def act(session: LabellingSession, action: int | str, note: str | None = None) -> str:
    """Label with ``action`` (a level), or ``SKIP`` or ``BACK``; say what happened, one line.

    A store or label error comes back as the line: a widget callback's traceback goes to the
    kernel log, where the labeller never looks.
    """
    item = session.current()
    try:
        if action == SKIP:
            session.skip()
            return f"skipped item {item.position}" if item else "nothing left to skip"
        if action == BACK:
            session.back()
            return "back one item"
        session.label(action, note=note or None)
    except EvalkitError as exc:
        return f"not stored: {exc}"
    assert item is not None  # label() raised otherwise
    return f"stored {action} for item {item.position} ({session.progress})"


def _key_help(session: LabellingSession) -> str:
    digits = [k for k, v in shortcuts(session.levels).items() if isinstance(v, int)]
    label = f"{digits[0]}-{digits[-1]} label" if digits else "buttons label"
    return f"keys: {label}, s skip, b back"


def card_html(session: LabellingSession) -> str:
    """The current item as HTML: progress, input, output, the rubric, the keys. It shows the
    rater's own earlier label (after Back) and nothing of the judge's, which the session has
    not got."""
    progress = session.progress
    head = (
        f"<p><b>{html.escape(session.rater)}</b>: {html.escape(str(progress))} "
        f'<progress value="{progress.labelled}" max="{progress.total}"></progress></p>'
    )
    item = session.current()
    if item is None:
        return head + (
            f"<p>All {progress.total} outputs are labelled and stored. Press Back to change "
            "one, or calibrate: <code>evalkit judges calibrate --run "
            f"{html.escape(session.sample.run_id)}</code></p>"
        )
    mine = session.label_of(item)
    earlier = f" · your label: <b>{mine}</b>" if mine is not None else ""
    rubric = session.sample.rubric
    return (
        head + f"<p>item {item.position} · case {html.escape(item.case_id)} · "
        f"{html.escape(item.stratum)}{earlier}</p>"
        + f'<h4>Input</h4><pre style="{_PRE}">{html.escape(item.input)}</pre>'
        + f'<h4>Output</h4><pre style="{_PRE}">{html.escape(item.output)}</pre>'
        + f"<details open><summary>Rubric ({html.escape(rubric.path)})</summary>"
        f'<pre style="{_PRE}">{html.escape(rubric.text.strip())}</pre></details>'
        + f"<p><small>{html.escape(_key_help(session))}</small></p>"
    )


@dataclass(frozen=True)
class LabellingCard:
    """The current item as static HTML, for a kernel without ipywidgets."""

    html: str

    def _repr_html_(self) -> str:
        return self.html


@dataclass(frozen=True, kw_only=True)
class LabellingView:
    """The widgets of one labelling view; it displays as its ``box``."""

    session: LabellingSession
    box: Any  # ipywidgets.VBox
    card: Any  # ipywidgets.HTML: card_html of the session
    buttons: dict[str, Any]  # key (see shortcuts), else the level -> ipywidgets.Button
    keys: Any  # ipywidgets.Text: the keyboard box
    note: Any  # ipywidgets.Text
    status: Any  # ipywidgets.HTML: what the last action did

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.box._repr_mimebundle_(**kwargs)


def labelling_widget(session: LabellingSession) -> LabellingView:
    """The ipywidgets view of ``session`` (display it as a cell's last value).

    Raises:
        LabellingError: ipywidgets is not installed.
    """
    try:
        import ipywidgets as widgets
    except ImportError:
        raise LabellingError(f"the labelling view needs ipywidgets: {_INSTALL}") from None

    card = widgets.HTML(card_html(session))
    status = widgets.HTML("")
    note = widgets.Text(placeholder="note (optional; kept in this session, not in the store)")
    keys = widgets.Text(placeholder=f"click here for keyboard shortcuts ({_key_help(session)})")

    def show(line: str) -> None:
        if line.startswith("stored"):
            note.value = ""  # the next item's note starts empty
        status.value = html.escape(line)
        card.value = card_html(session)

    # a button per level (a level past 9 has no key but still a button), then Skip and Back
    actions: list[int | str] = [*session.levels, SKIP, BACK]
    keyed = {action: key for key, action in shortcuts(session.levels).items()}
    buttons: dict[str, Any] = {}
    for action in actions:
        key = keyed.get(action)
        button = widgets.Button(
            description=str(action).capitalize(), tooltip=f"key {key}" if key else ""
        )
        button.on_click(lambda _button, action=action: show(act(session, action, note.value)))
        buttons[key or str(action)] = button

    def typed(change: dict[str, Any]) -> None:
        if change["new"]:
            keys.value = ""  # fires this again with "", which does nothing
            show(press(session, change["new"][-1], note.value))

    keys.observe(typed, names="value")
    box = widgets.VBox([card, widgets.HBox(list(buttons.values())), note, keys, status])
    return LabellingView(
        session=session, box=box, card=card, buttons=buttons, keys=keys, note=note, status=status
    )


def show_labelling(session: LabellingSession) -> LabellingView | LabellingCard:
    """The widget view, else (no ipywidgets) the current item as HTML with what to do."""
    try:
        return labelling_widget(session)
    except LabellingError as exc:
        hint = (
            f"<p><i>{html.escape(str(exc))}. Meanwhile label here with "
            "<code>session.label(4)</code>, <code>session.skip()</code>, "
            "<code>session.back()</code>, then show <code>show_labelling(session)</code> "
            "again.</i></p>"
        )
        return LabellingCard(card_html(session) + hint)

"""Tool fixtures frozen from a live run, and checked against the live tools for rot.

``record_fixtures`` reads the tool calls a ``kind: live`` run made (the stored trajectories)
and writes each live tool's calls into the case's ``fixtures.tools`` as keyed entries
(``- {args: ..., response: ...}``), keeping the file's comments and layout
(:mod:`evalkit.corpus.fixture_files`). ``check_fixtures`` asks the live tools again for every
keyed entry of a live tool and says which are stale (the live answer differs); a plain entry
(one response for any arguments) cannot be asked again and is listed as unchecked.
``refresh_fixtures`` writes the live answers of stale entries as a reviewed change: the reviewer
and date go into the provenance, and the cases get new hashes, so a gate pairs them only after
their baseline configuration ran on them again (``evalkit gate --rebaseline``).

Examples:
    >>> merge_entries([{"args": {"order_id": 1}, "response": "old"},
    ...                {"args": {"order_id": "2"}, "response": "b"}],
    ...               [{"args": {"order_id": "1"}, "response": "new"}])
    [{'args': {'order_id': '1'}, 'response': 'new'}, {'args': {'order_id': '2'}, 'response': 'b'}]
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from evalkit.corpus.cases import Case, Corpus
from evalkit.corpus.fixture_files import CaseEdit, rewrite_case_file
from evalkit.corpus.suite import Suite
from evalkit.errors import ConfigError, CorpusError, EvalkitError
from evalkit.fixtures import is_keyed, normalize_args
from evalkit.records import canonical_json
from evalkit.run.live_tools import LiveToolError, load_live_tools
from evalkit.store import Store

__all__ = [
    "FixtureState",
    "RecordResult",
    "RefreshResult",
    "check_fixtures",
    "merge_entries",
    "record_fixtures",
    "refresh_fixtures",
]

#: Starts the provenance note evalkit writes; an older one of its own is replaced, not kept.
NOTE_MARK = "tool fixtures "


@dataclass(frozen=True)
class RecordResult:
    """What :func:`record_fixtures` wrote: the cases changed, calls frozen, files rewritten,
    and one line per case (or call) it left alone."""

    run_id: str
    cases: tuple[str, ...]
    calls: int
    files: tuple[str, ...]
    skipped: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class FixtureState:
    """One frozen tool answer against the live tool: ``fresh``, ``stale`` (the answers
    differ), ``error`` (the live tool failed) or ``unchecked`` (a plain fixture has no
    arguments to ask with)."""

    case_id: str
    source: str
    tool: str
    arguments: dict[str, Any] | None
    state: Literal["fresh", "stale", "error", "unchecked"]
    frozen: Any
    live: Any = None
    detail: str = ""


@dataclass(frozen=True)
class RefreshResult:
    """The cases :func:`refresh_fixtures` rewrote (with their old and new hashes), the
    entries it replaced, and the cases that were already fresh."""

    changed: dict[str, tuple[str, str]]
    entries: int
    fresh: tuple[str, ...]


def record_fixtures(
    store: Store, suite: Suite, corpus: Corpus, run: str, who: str | None = None
) -> RecordResult:
    """Freeze the live tool calls of ``run`` into the fixtures of the cases it ran.

    Raises:
        ConfigError: the run is not a live run.
    """
    run_id = store.resolve_run(run)
    manifest = store.manifest(run_id)
    if not manifest.is_live:
        raise ConfigError(
            f"run {run_id} is not a live run (kind: {manifest.kind}): its "
            "tool answers came from the fixtures; run a kind: live configuration and record that"
        )
    live_names = set((manifest.tools or {}).get("live") or ())
    current = {case.id: case for case in corpus.cases}
    skipped: list[str] = []
    asked = {row["case_id"]: row["input"] for row in store.cases(run_id).iter_rows(named=True)}
    calls: dict[str, dict[str, dict[str, dict[str, Any]]]] = defaultdict(dict)
    for case_id in sorted(asked):
        case = current.get(case_id)
        if case is None or asked[case_id] != case.input_json():
            why = "is not in the corpus" if case is None else "has another input than it ran with"
            skipped.append(f"case {case_id} {why}: not recorded")
            current.pop(case_id, None)
    for row in store.outputs(run_id).iter_rows(named=True):
        case_id = row["case_id"]
        if case_id not in current:
            continue
        if row["error"] is not None:
            skipped.append(f"case {case_id} replay {row['replay']} errored: {row['error']}")
            continue
        for call in json.loads(row["tool_calls"] or "[]"):
            if call["name"] not in live_names:
                continue
            entry = {"args": call["arguments"], "response": call["response"]}
            seen = calls[case_id].setdefault(call["name"], {})
            key = normalize_args(call["arguments"])
            if key in seen and canonical_json(seen[key]["response"]) != canonical_json(
                entry["response"]
            ):
                skipped.append(
                    f"case {case_id}: {call['name']}({key}) answered differently within the "
                    "run; the first answer is recorded"
                )
            seen.setdefault(key, entry)
    edits: dict[str, list[CaseEdit]] = defaultdict(list)
    frozen = 0
    today = _today()
    for case_id, by_tool in sorted(calls.items()):
        case = current.get(case_id)
        if case is None:
            continue
        tools = dict(case.fixtures.get("tools") or {})
        for name, entries in sorted(by_tool.items()):
            tools[name] = merge_entries(tools.get(name), list(entries.values()))
            frozen += len(entries)
        if tools == (case.fixtures.get("tools") or {}):
            continue
        note = f"{NOTE_MARK}recorded from live run {run_id} on {today.isoformat()}"
        provenance = _provenance(case, note, today, who, keep_date=True)
        edits[_file(case)].append(CaseEdit(case.id, tools=tools, provenance=provenance))
    _write(corpus, edits)
    changed = tuple(sorted(edit.case_id for file_edits in edits.values() for edit in file_edits))
    return RecordResult(run_id, changed, frozen, tuple(sorted(edits)), tuple(skipped))


def merge_entries(existing: Any, recorded: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """A tool's keyed fixture after recording: existing keyed entries, each replaced by the
    recorded entry for the same normalized arguments, then the new ones. A plain fixture (one
    response for any arguments) gives way to the recorded entries."""
    new = {normalize_args(e["args"]): e for e in recorded}
    merged: list[dict[str, Any]] = []
    for entry in existing if is_keyed(existing) else ():
        key = normalize_args(entry["args"])
        merged.append(new.pop(key, entry))
    return [*merged, *new.values()]


def check_fixtures(
    suite: Suite, corpus: Corpus, ids: Iterable[str] = ()
) -> tuple[FixtureState, ...]:
    """Every frozen answer of a live tool in ``corpus`` (or the cases ``ids``) against what
    the live tool answers now, in case and entry order."""
    live = load_live_tools(suite)
    wanted = set(ids)
    cases = [c for c in corpus.cases if not wanted or c.id in wanted]
    jobs: list[tuple[Case, str, Any]] = [
        (case, name, fixture)
        for case in cases
        for name, fixture in (case.fixtures.get("tools") or {}).items()
        if live.answers(name)
    ]
    semaphore = asyncio.Semaphore(suite.config.concurrency)

    async def ask(case: Case, name: str, entry: dict[str, Any]) -> FixtureState:
        args = entry["args"]
        async with semaphore:
            try:
                answer = await live.call(name, dict(args))
            except LiveToolError as exc:
                return FixtureState(
                    case_id=case.id,
                    source=case.source,
                    tool=name,
                    arguments=args,
                    state="error",
                    frozen=entry["response"],
                    detail=str(exc),
                )
        same = canonical_json(answer) == canonical_json(entry["response"])
        state: Literal["fresh", "stale"] = "fresh" if same else "stale"
        return FixtureState(
            case_id=case.id,
            source=case.source,
            tool=name,
            arguments=args,
            state=state,
            frozen=entry["response"],
            live=answer,
        )

    async def ask_all() -> list[FixtureState]:
        states: list[Any] = []
        for case, name, fixture in jobs:
            if is_keyed(fixture):
                states.extend(ask(case, name, entry) for entry in fixture)
            else:
                detail = "a plain fixture answers any arguments: there are none to ask with"
                states.append(
                    FixtureState(
                        case_id=case.id,
                        source=case.source,
                        tool=name,
                        arguments=None,
                        state="unchecked",
                        frozen=fixture,
                        live=None,
                        detail=detail,
                    )
                )
        pending = [s for s in states if not isinstance(s, FixtureState)]
        done = iter(await asyncio.gather(*pending))
        return [s if isinstance(s, FixtureState) else next(done) for s in states]

    return tuple(asyncio.run(ask_all()))


def refresh_fixtures(
    suite: Suite, corpus: Corpus, ids: Sequence[str], who: str, reason: str | None = None
) -> RefreshResult:
    """Rewrite the stale entries of the cases ``ids`` with the live answers, as a reviewed
    change (``who`` is recorded as the provenance reviewer, with today's date).

    Raises:
        CorpusError: an id that is not in the corpus.
        EvalkitError: a live tool failed on one of the cases' entries (nothing is written).
    """
    current = {case.id: case for case in corpus.cases}
    for case_id in ids:
        if case_id not in current:
            raise CorpusError("no such case in the corpus", path=corpus.root, case_id=case_id)
    states = check_fixtures(suite, corpus, ids)
    failed = [s for s in states if s.state == "error"]
    if failed:
        raise EvalkitError(
            f"case {failed[0].case_id} ({failed[0].source}): {failed[0].detail}; nothing was "
            "refreshed"
        )
    stale: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for s in states:
        if s.state == "stale":
            stale[s.case_id].setdefault(s.tool, {})[normalize_args(s.arguments or {})] = s.live
    today = _today()
    edits: dict[str, list[CaseEdit]] = defaultdict(list)
    entries = 0
    for case_id, by_tool in sorted(stale.items()):
        case = current[case_id]
        tools = dict(case.fixtures.get("tools") or {})
        for name, answers in by_tool.items():
            tools[name] = [
                {**e, "response": answers.get(normalize_args(e["args"]), e["response"])}
                for e in tools[name]
            ]
            entries += len(answers)
        note = f"{NOTE_MARK}refreshed from the live tools on {today.isoformat()}"
        note += f" by {who}" + (f": {reason}" if reason else "")
        provenance = _provenance(case, note, today, who, keep_date=False)
        edits[_file(case)].append(CaseEdit(case_id, tools=tools, provenance=provenance))
    _write(corpus, edits)
    changed: dict[str, tuple[str, str]] = {}
    if edits:
        from evalkit.corpus.cases import load_cases_file

        for rel in edits:
            for case in load_cases_file(corpus.root / rel, corpus.root):
                if case.id in stale:
                    changed[case.id] = (current[case.id].hash, case.hash)
    fresh = tuple(sorted(set(ids) - set(changed)))
    return RefreshResult(dict(sorted(changed.items())), entries, fresh)


def _provenance(
    case: Case, note: str, today: dt.date, who: str | None, *, keep_date: bool
) -> dict[str, Any]:
    """The provenance keys to set: evalkit's note (an older note of its own is replaced, a
    person's is kept before it), the date (a recording keeps an existing one) and the
    reviewer (when named)."""
    old = str(case.provenance.get("note") or "") if case.provenance else ""
    person = old.split(f" | {NOTE_MARK}")[0] if not old.startswith(NOTE_MARK) else ""
    updates: dict[str, Any] = {"note": f"{person} | {note}" if person else note}
    if not (keep_date and case.provenance and case.provenance.get("date")):
        updates["date"] = today
    if who:
        updates["reviewer"] = who
    return updates


def _file(case: Case) -> str:
    return case.source.rsplit(":", 1)[0]


def _write(corpus: Corpus, edits: dict[str, list[CaseEdit]]) -> None:
    for rel, file_edits in sorted(edits.items()):
        rewrite_case_file(corpus.root / rel, file_edits, rel)


def _today() -> dt.date:
    return dt.datetime.now(dt.UTC).date()

"""``evalkit import inspect LOG``: the samples of an Inspect AI eval log as draft cases.

Both log forms are read without Inspect: ``.eval`` (a zip of ``header.json`` and
``samples/*.json``; recent Inspect compresses its members with zstd, read with ``zstandard``) and
``.json`` (one object with ``eval`` and ``samples``). Each sample's input becomes the case's
messages, its target the expectation (by the log's scorer: ``includes``/``match`` ->
``contains``, ``exact`` -> ``exact``, anything else -> ``similar``), its metadata and the
model's output the notes; the log's task and model go into the provenance.

Examples:
    >>> scorers, how = target_scorers("8812", ["includes"])
    >>> how, scorers[0]["args"]
    ('includes -> contains', {'text': '8812', 'ignore_case': True})
    >>> target_scorers(["a", "b"], ["exact"])[0]
    [{'scorer': 'one_of', 'args': {'options': ['a', 'b']}}]
"""

from __future__ import annotations

import io
import json
import re
import struct
import zipfile
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evalkit.corpus.importers.draft_cases import DraftCase, ImportResult
from evalkit.corpus.importers.openai_chat import WHY, read_chat
from evalkit.errors import CorpusError

#: A zip member larger than this is refused (a log is JSON; this bounds a zip bomb).
MAX_MEMBER_BYTES = 64 << 20
_ZSTD = 93  # the zip compression method id Inspect writes (APPNOTE 4.4.5)
_NOTE_CHARS = 1500


def target_scorers(target: Any, scorers: Sequence[str]) -> tuple[list[dict[str, Any]], str]:
    """The evalkit checks for a sample's target under the log's scorers, and how it was mapped."""
    targets = [str(t) for t in (target if isinstance(target, list) else [target]) if str(t)]
    name = next((s for s in scorers if s in ("includes", "match", "exact")), None)
    if not targets:
        return [], ""
    if name in ("includes", "match"):
        if len(targets) == 1:
            args = {"text": targets[0], "ignore_case": True}
            return [{"scorer": "contains", "args": args}], f"{name} -> contains"
        pattern = "|".join(re.escape(t) for t in targets)
        return [{"scorer": "regex", "args": {"pattern": pattern, "flags": "i"}}], f"{name} -> regex"
    if name == "exact":
        if len(targets) == 1:
            return [{"scorer": "exact", "args": {"text": targets[0]}}], "exact -> exact"
        return [{"scorer": "one_of", "args": {"options": targets}}], "exact -> one_of"
    other = scorers[0] if scorers else "no scorer"
    return [{"scorer": "similar", "args": {"reference": targets[0]}}], f"{other} -> similar"


def import_inspect(path: str | Path) -> ImportResult:
    """Read an Inspect ``.eval`` or ``.json`` log into draft cases, one per sample (epoch 1).

    Raises:
        CorpusError: the file is not an Inspect log (names the file and what is missing).
    """
    path = Path(path)
    header, samples = _read_eval(path) if path.suffix == ".eval" else _read_json(path)
    samples = _in_dataset_order(header, samples)
    info = header.get("eval") if isinstance(header.get("eval"), Mapping) else None
    if info is None:
        raise CorpusError("not an Inspect log: no 'eval' header (task, model)", path=path)
    task, model = str(info.get("task", "?")), str(info.get("model", "?"))
    scorers = [str(s.get("name")) for s in info.get("scorers") or () if isinstance(s, Mapping)]
    mapped, unmapped, why = Counter(), Counter(), dict(WHY)
    cases, seen = [], set()
    for sample in samples:
        if sample.get("id") in seen:
            unmapped["later epoch of a sample"] += 1
            why["later epoch of a sample"] = "one case per sample; epochs are evalkit replays"
            continue
        seen.add(sample.get("id"))
        where = f"{path.name} sample {sample.get('id')}"
        turns = sample.get("input")
        turns = [{"role": "user", "content": turns}] if isinstance(turns, str) else turns
        try:
            chat = read_chat(turns or [])
        except ValueError as exc:
            raise CorpusError(f"sample {sample.get('id')}: {exc}", path=path) from None
        unmapped.update(chat.dropped)
        expect, how = target_scorers(sample.get("target"), scorers)
        if not expect:
            unmapped["sample without a target"] += 1
            why["sample without a target"] = "nothing to check against; not imported"
            continue
        mapped[f"target ({how})"] += 1
        mapped["input -> input.messages"] += 1
        metadata = sample.get("metadata") or {}
        tags = [_tag(task)] + [
            _tag(str(metadata[k])) for k in ("category", "tag") if metadata.get(k)
        ]
        cases.append(
            DraftCase(
                {"messages": chat.messages},
                tuple(expect),
                where,
                source_id=f"{task}-{sample.get('id')}",
                tags=tuple(t for t in tags if t),
                notes=_notes(metadata, _output_text(sample.get("output")), model),
            )
        )
    note = f"inspect task {task}, model {model}"
    if info.get("created"):
        note += f", run {info['created']}"
    return ImportResult(
        "inspect",
        path,
        tuple(cases),
        dict(mapped),
        dict(unmapped),
        why,
        provenance_note=note,
        name=task,  # the log's file name is a timestamp and a random id
    )


def _notes(metadata: Mapping[str, Any], output: str, model: str) -> str | None:
    parts = []
    if metadata:
        parts.append("metadata: " + json.dumps(metadata, sort_keys=True, default=str))
    if output:
        clipped = output if len(output) <= _NOTE_CHARS else output[:_NOTE_CHARS] + " [...]"
        parts.append(f"{model} answered:\n{clipped}")
    return "\n".join(parts) or None


def _output_text(output: Any) -> str:
    if not isinstance(output, Mapping):
        return ""
    if isinstance(output.get("completion"), str) and output["completion"]:
        return output["completion"]
    for choice in output.get("choices") or ():
        content = (choice.get("message") or {}).get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return ""


def _tag(text: str) -> str:
    return "_".join(re.findall(r"[a-z0-9]+", text.casefold()))


def _read_json(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CorpusError(f"cannot read: {exc.strerror}", path=path) from None
    except ValueError as exc:
        raise CorpusError(f"not JSON: {exc}", path=path) from None
    if not isinstance(data, dict):
        raise CorpusError("not an Inspect log: expected a JSON object", path=path)
    return data, [s for s in data.get("samples") or () if isinstance(s, dict)]


def _read_eval(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    try:
        archive = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as exc:
        raise CorpusError(f"not an Inspect .eval log (a zip): {exc}", path=path) from None
    with archive:
        names = archive.namelist()
        if "header.json" not in names:
            raise CorpusError("not an Inspect .eval log: no header.json", path=path)
        header = json.loads(_member(archive, path, "header.json"))
        members = sorted(
            (n for n in names if n.startswith("samples/") and n.endswith(".json")),
            key=lambda n: (_epoch(n), n),
        )
        samples = [json.loads(_member(archive, path, n)) for n in members]
    return header, samples


def _in_dataset_order(header: Mapping[str, Any], samples: list[dict]) -> list[dict]:
    """Samples by epoch, then in the dataset's order (a log lists them as they finished)."""
    dataset = (header.get("eval") or {}).get("dataset") or {}
    order = {sid: i for i, sid in enumerate(dataset.get("sample_ids") or ())}
    return sorted(samples, key=lambda s: (s.get("epoch", 1), order.get(s.get("id"), len(order))))


def _epoch(name: str) -> int:
    match = re.search(r"_epoch_(\d+)\.json$", name)
    return int(match.group(1)) if match else 0


def _member(archive: zipfile.ZipFile, path: Path, name: str) -> bytes:
    info = archive.getinfo(name)
    if info.file_size > MAX_MEMBER_BYTES:
        raise CorpusError(f"{name} is larger than {MAX_MEMBER_BYTES >> 20} MiB", path=path)
    if info.compress_type != _ZSTD:
        return archive.read(name)
    try:
        import zstandard
    except ImportError:
        raise CorpusError(
            "this .eval log is zstd-compressed: pip install zstandard (or convert it with "
            "`inspect log convert --to json` and import the .json)",
            path=path,
        ) from None
    # The stdlib zipfile of Python < 3.14 cannot decompress zstd members: read the member's raw
    # bytes after its local header (30 bytes + name + extra field) and decompress them here.
    with path.open("rb") as handle:
        handle.seek(info.header_offset)
        local = handle.read(30)
        name_len, extra_len = struct.unpack("<HH", local[26:30])
        handle.seek(info.header_offset + 30 + name_len + extra_len)
        raw = handle.read(info.compress_size)
    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(raw), read_across_frames=True)
    chunks, size = [], 0
    while chunk := reader.read(1 << 20):
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_MEMBER_BYTES:
            raise CorpusError(f"{name} is larger than {MAX_MEMBER_BYTES >> 20} MiB", path=path)
    return b"".join(chunks)

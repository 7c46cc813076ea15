"""``evalkit cases import inspect LOG``: the samples of an Inspect AI eval log as draft cases.

Both log forms are read without Inspect: ``.eval`` (a zip of ``header.json`` and
``samples/*.json``; recent Inspect compresses its members with zstd, read with ``zstandard``) and
``.json`` (one object with ``eval`` and ``samples``). Each sample's input becomes the case's
messages, its target the expectation (by the log's scorer: ``includes``/``match`` ->
``contains``, ``exact`` -> ``exact``, anything else -> ``similar``), its metadata and the
model's output the notes; the log's task and model go into the provenance.

A log is someone else's file: each member (and a ``.json`` log whole) is one bounded JSON
document (:mod:`evalkit.corpus.json_input`), the members together may decompress to at most
:data:`MAX_TOTAL_BYTES`, and of each sample only what a case takes is kept while the next is
read. A bad member (a CRC error, not JSON, not a sample) is a one-line refusal naming it.

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
import zlib
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from evalkit.corpus.importers.draft_cases import DraftCase, ImportResult
from evalkit.corpus.importers.openai_chat import WHY, read_chat
from evalkit.corpus.json_input import MAX_DOCUMENT_BYTES, json_value, read_document
from evalkit.errors import CorpusError

#: A zip member larger than this is refused (a log is JSON; this bounds a zip bomb).
MAX_MEMBER_BYTES = MAX_DOCUMENT_BYTES
#: What all the members of one log may decompress to together.
MAX_TOTAL_BYTES = 128 << 20
#: What a case takes from a sample; the rest (events, scores, the model's messages) is dropped.
_SAMPLE_KEYS = ("id", "epoch", "input", "target", "metadata")
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
    info = header.get("eval") if isinstance(header.get("eval"), Mapping) else None
    if info is None:
        raise CorpusError("not an Inspect log: no 'eval' header (task, model)", path=path)
    samples = _in_dataset_order(info, samples)
    task, model = str(info.get("task", "?")), str(info.get("model", "?"))
    scorers = [str(s.get("name")) for s in info.get("scorers") or () if isinstance(s, Mapping)]
    mapped: Counter[str] = Counter()
    unmapped: Counter[str] = Counter()
    why = dict(WHY)
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
                input={"messages": chat.messages},
                expect=tuple(expect),
                source=where,
                source_id=f"{task}-{sample.get('id')}",
                tags=tuple(t for t in tags if t),
                notes=_notes(metadata, sample.get("output_text", ""), model),
            )
        )
    note = f"inspect task {task}, model {model}"
    if info.get("created"):
        note += f", run {info['created']}"
    return ImportResult(
        format="inspect",
        source=path,
        cases=tuple(cases),
        mapped=dict(mapped),
        unmapped=dict(unmapped),
        why=why,
        provenance_note=note,
        name=task,
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
    data = read_document(path)
    if not isinstance(data, dict):
        raise CorpusError("not an Inspect log: expected a JSON object", path=path)
    samples = data.get("samples") or ()
    if not isinstance(samples, list):
        raise CorpusError("not an Inspect log: samples is not a list", path=path)
    return data, [
        _kept(s, f"{path}: sample {n}") for n, s in enumerate(samples) if isinstance(s, dict)
    ]


def _read_eval(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    try:
        archive = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as exc:
        raise CorpusError(f"not an Inspect .eval log (a zip): {exc}", path=path) from None
    budget = [MAX_TOTAL_BYTES]
    with archive:
        names = archive.namelist()
        if "header.json" not in names:
            raise CorpusError("not an Inspect .eval log: no header.json", path=path)
        header = _json_member(archive, path, "header.json", budget)
        if not isinstance(header, dict):
            raise CorpusError("header.json is not a JSON object", path=path)
        members = sorted(
            (n for n in names if n.startswith("samples/") and n.endswith(".json")),
            key=lambda n: (_epoch(n), n),
        )
        samples = []
        for name in members:
            sample = _json_member(archive, path, name, budget)
            if not isinstance(sample, dict):
                raise CorpusError(f"{name} is not a sample (a JSON object)", path=path)
            samples.append(_kept(sample, f"{path}: {name}"))
    return header, samples


def _kept(sample: dict[str, Any], where: str) -> dict[str, Any]:
    """What a case takes of a sample: its own keys and the model's answer as text.

    Raises:
        CorpusError: an id that is not a string or number, an epoch that is not a number.
    """
    kept = {k: sample[k] for k in _SAMPLE_KEYS if k in sample}
    if not isinstance(kept.get("id"), str | int) or isinstance(kept.get("id"), bool):
        raise CorpusError(f"sample id {str(kept.get('id'))[:40]!r} is not a string or number",
                          path=where)  # fmt: skip
    if not isinstance(kept.setdefault("epoch", 1), int):
        raise CorpusError(f"sample {kept['id']}: epoch is not a number", path=where)
    if not isinstance(kept.get("metadata") or {}, Mapping):
        raise CorpusError(f"sample {kept['id']}: metadata is not an object", path=where)
    kept["output_text"] = _output_text(sample.get("output"))
    return kept


def _json_member(archive: zipfile.ZipFile, path: Path, name: str, budget: list[int]) -> Any:
    data = _member(archive, path, name, budget)
    return json_value(data, f"{path}: {name}")


def _in_dataset_order(info: Mapping[str, Any], samples: list[dict]) -> list[dict]:
    """Samples by epoch, then in the dataset's order (a log lists them as they finished)."""
    dataset = info["dataset"] if isinstance(info.get("dataset"), Mapping) else {}
    ids = dataset["sample_ids"] if isinstance(dataset.get("sample_ids"), list) else []
    order: dict[Any, int] = {sid: i for i, sid in enumerate(ids) if isinstance(sid, str | int)}
    return sorted(samples, key=lambda s: (s.get("epoch", 1), order.get(s.get("id"), len(order))))


def _epoch(name: str) -> int:
    match = re.search(r"_epoch_(\d+)\.json$", name)
    return int(match.group(1)) if match else 0


def _member(
    archive: zipfile.ZipFile, path: Path, name: str, budget: list[int] | None = None
) -> bytes:
    """A member's bytes, decompressed a chunk at a time: refused past ``MAX_MEMBER_BYTES`` or
    past what is left of ``budget`` (one item: the bytes the whole log may still take)."""
    info = archive.getinfo(name)
    allowed = min(MAX_MEMBER_BYTES, budget[0] if budget else MAX_MEMBER_BYTES)
    if info.file_size > allowed:
        raise CorpusError(_too_much(name, budget, allowed), path=path)
    try:
        chunks = _decompressed(archive, path, info)
        data, size = [], 0
        for chunk in chunks:
            size += len(chunk)
            if size > allowed:
                raise CorpusError(_too_much(name, budget, allowed), path=path)
            data.append(chunk)
    except (zipfile.BadZipFile, EOFError, OSError, zlib.error) as exc:
        raise CorpusError(f"{name}: a broken zip member ({exc})", path=path) from None
    except zstandard_error() as exc:
        raise CorpusError(f"{name}: a broken zstd member ({exc})", path=path) from None
    if budget:
        budget[0] -= size
    return b"".join(data)


def _too_much(name: str, budget: list[int] | None, allowed: int) -> str:
    if budget and allowed < MAX_MEMBER_BYTES:
        return (
            f"{name}: the log decompresses to more than {MAX_TOTAL_BYTES >> 20} MiB; import a "
            "log of fewer samples"
        )
    return f"{name} is larger than {MAX_MEMBER_BYTES >> 20} MiB"


def zstandard_error() -> type[Exception]:
    """zstandard's error type, when the package is there (else one nothing raises)."""
    try:
        import zstandard
    except ImportError:
        return _NoError
    return zstandard.ZstdError


class _NoError(Exception):
    pass


def _decompressed(archive: zipfile.ZipFile, path: Path, info: zipfile.ZipInfo) -> Iterator[bytes]:
    if info.compress_type != _ZSTD:
        with archive.open(info) as member:
            while chunk := member.read(1 << 20):
                yield chunk
        return
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
        if len(local) < 30:
            raise zipfile.BadZipFile("truncated local header")
        name_len, extra_len = struct.unpack("<HH", local[26:30])
        handle.seek(info.header_offset + 30 + name_len + extra_len)
        raw = handle.read(info.compress_size)
    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(raw), read_across_frames=True)
    crc = 0
    while chunk := reader.read(1 << 20):
        crc = zlib.crc32(chunk, crc)
        yield chunk
    if crc != info.CRC:
        raise zipfile.BadZipFile(f"Bad CRC-32 for file {info.filename!r}")

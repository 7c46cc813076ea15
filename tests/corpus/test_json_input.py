"""Hostile files for ``evalkit cases import`` and ``evalkit traces sample``, driven through the CLI:
each ends in one refusal line naming the file (and line), exit 2 and nothing written, and the
large ones are measured from outside the process: peak RSS under 500 MB.

The inputs are small on disk and quick to read; each exceeds one of the whole-file bounds
(:mod:`evalkit.corpus.json_input`, ``inspect_log.MAX_TOTAL_BYTES``, ``otlp.MAX_SPANS``, the YAML
node budget) that a per-part cap let through.
"""

from __future__ import annotations

import io
import json
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import psutil
import pytest
import zstandard

from evalkit.cli import main
from evalkit.corpus.importers.inspect_log import MAX_TOTAL_BYTES
from evalkit.corpus.json_input import MAX_CSV_CELL_CHARS, MAX_DOCUMENT_BYTES
from evalkit.corpus.traces.otlp import MAX_SPANS

PEAK_LIMIT_MB = 500
HEADER = {"eval": {"task": "hostile", "model": "m", "scorers": [{"name": "includes"}]}}
SAMPLE = {"id": "s1", "epoch": 1, "input": "hi", "target": "hello"}
DEEP = 100_000


def _zip(members: dict[str, bytes], method: int = 0, crc: int | None = None) -> bytes:
    """A zip of ``members`` (raw content), written by hand: ``method`` 93 stores zstd frames as
    Inspect writes them (stdlib zipfile cannot), 0 stores them as they are; ``crc`` overrides
    every member's checksum."""
    out, central = io.BytesIO(), []
    for name, raw in members.items():
        data = zstandard.ZstdCompressor(level=1).compress(raw) if method == 93 else raw
        digest = zlib.crc32(raw) if crc is None else crc
        offset, encoded = out.tell(), name.encode()
        fields = (method, 0, 0, digest, len(data), len(raw), len(encoded))
        out.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, 63, 0, *fields, 0) + encoded + data)
        entry = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 63, 63, 0, *fields, 0, 0, 0, 0, 0,
                            offset)  # fmt: skip
        central.append(entry + encoded)
    directory, start = b"".join(central), out.tell()
    out.write(directory)
    count = len(central)
    out.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count, count, len(directory), start, 0))
    return out.getvalue()


def _measured(args: list[str], timeout_s: float = 90) -> tuple[int, str, float]:
    """(exit code, stderr, peak RSS in MB) of ``evalkit ARGS`` in its own process, watched from
    outside: the kernel's high-water mark of its resident set (``VmHWM``, reset at exec, so the
    forked copy of this process does not count), polled until it exits; killed past the
    limit."""
    process = subprocess.Popen(
        [sys.executable, "-m", "evalkit.cli", *args], stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    watched, peak, deadline = psutil.Process(process.pid), 0.0, time.monotonic() + timeout_s
    while process.poll() is None:
        try:
            status = Path(f"/proc/{process.pid}/status").read_text()
            high = next(line for line in status.splitlines() if line.startswith("VmHWM:"))
            peak = max(peak, int(high.split()[1]) / 1e3, watched.memory_info().rss / 1e6)
        except (OSError, StopIteration, psutil.NoSuchProcess):
            pass
        if peak > PEAK_LIMIT_MB * 1.2 or time.monotonic() > deadline:
            process.kill()
        time.sleep(0.01)
    assert process.stderr is not None
    err = process.stderr.read()
    process.stderr.close()
    return process.returncode, err, peak


def _refused(code: int, err: str, path: Path, out: Path, words: str) -> None:
    assert code == 2, (code, err[-2000:])
    assert err.count("\n") == 1 and "Traceback" not in err, err[-2000:]
    assert err.startswith(f"evalkit: error: {path}") and words in err, err
    assert not out.exists() or not any(out.iterdir())  # nothing written


@pytest.fixture
def project(project_factory) -> Path:
    return project_factory().config


# --------------------------------------------------------------------------- bounded memory


def test_an_eval_log_is_bounded_by_its_total_decompressed_size(tmp_path: Path) -> None:
    """40 zstd members, each well under the member cap, decompress to 3x the whole-log budget;
    on main every parsed sample was held at once."""
    member = json.dumps({**SAMPLE, "input": "a" * (15 << 20)}).encode()
    assert len(member) < MAX_DOCUMENT_BYTES and 40 * len(member) > 3 * MAX_TOTAL_BYTES
    members = {"header.json": json.dumps(HEADER).encode()}
    members |= {f"samples/s{i:02d}_epoch_1.json": member for i in range(40)}
    log, out = tmp_path / "bomb.eval", tmp_path / "cases"
    log.write_bytes(_zip(members, method=93))
    assert log.stat().st_size < 4 << 20
    code, err, peak = _measured(["cases", "import", "inspect", str(log), "--out", str(out)])
    assert peak < PEAK_LIMIT_MB, f"peak RSS {peak:.0f} MB"
    _refused(code, err, log, out, f"decompresses to more than {MAX_TOTAL_BYTES >> 20} MiB")


def test_a_promptfoo_alias_bomb_is_refused_before_it_grows(tmp_path: Path) -> None:
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    levels += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    config, out = tmp_path / "promptfooconfig.yaml", tmp_path / "cases"
    config.write_text(
        "\n".join(levels) + "\nprompts: ['{{q}}']\n"
        "tests: [{vars: {q: *a8}, assert: [{type: contains, value: x}]}]\n"
    )
    code, err, peak = _measured(
        ["cases", "import", "promptfoo", str(config), "--out", str(out)], 60
    )
    assert peak < PEAK_LIMIT_MB, f"peak RSS {peak:.0f} MB"
    _refused(code, err, config, out, "values")


def test_a_jsonl_line_longer_than_a_document_is_refused_unread(tmp_path: Path) -> None:
    rows, out = tmp_path / "rows.jsonl", tmp_path / "cases"
    good = {"question": "hi", "answer": "hello"}
    with rows.open("w") as handle:
        handle.write(json.dumps(good) + "\n")
        handle.write(json.dumps({**good, "question": "q" * (MAX_DOCUMENT_BYTES + 1)}) + "\n")
    args = ["cases", "import", "jsonl", str(rows), "--map", "input=question", "--map",
            "expect.contains=answer", "--out", str(out)]  # fmt: skip
    code, err, peak = _measured(args)
    assert peak < PEAK_LIMIT_MB, f"peak RSS {peak:.0f} MB"
    _refused(code, err, rows, out, f"{rows}:2: line is longer than 16 MiB")


def test_an_otlp_export_is_bounded_by_its_span_count(tmp_path: Path, project: Path) -> None:
    spans = [{"traceId": f"t{i}", "name": "chat"} for i in range(MAX_SPANS + 1)]
    export = {"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}
    traces, out = tmp_path / "spans.jsonl", tmp_path / "drafts"
    traces.write_text(json.dumps(export) + "\n")
    args = ["traces", "sample", str(traces), "--config", str(project), "--out", str(out)]
    code, err, peak = _measured(args)
    assert peak < PEAK_LIMIT_MB, f"peak RSS {peak:.0f} MB"
    _refused(code, err, traces, out, f"more than {MAX_SPANS:,} spans in one file")


# --------------------------------------------------------------------------- malformed files


def _eval(tmp_path: Path, members: dict[str, bytes], crc: int | None = None) -> Path:
    log = tmp_path / "log.eval"
    log.write_bytes(_zip({"header.json": json.dumps(HEADER).encode(), **members}, crc=crc))
    return log


def _sample_member(value: object) -> dict[str, bytes]:
    return {"samples/s1_epoch_1.json": json.dumps(value).encode()}


_CHAT = (
    b'{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}]}\n'
)


def _deep(opening: str = "[", closing: str = "]") -> str:
    return opening * DEEP + closing * DEEP


MALFORMED_IMPORTS = {
    "eval-bad-crc": (
        lambda d: _eval(d, _sample_member(SAMPLE), crc=1234),
        ["inspect"],
        "broken zip member",
    ),
    "eval-header-not-json": (
        lambda d: (d / "h.eval").write_bytes(_zip({"header.json": b"{not json"})) and d / "h.eval",
        ["inspect"],
        "header.json: invalid JSON",
    ),
    "eval-sample-is-a-list": (
        lambda d: _eval(d, _sample_member([SAMPLE])),
        ["inspect"],
        "is not a sample",
    ),
    "eval-sample-too-deep": (
        lambda d: _eval(d, {"samples/s1_epoch_1.json": _deep().encode()}),
        ["inspect"],
        "nested deeper than 64 levels",
    ),
    "inspect-json-too-deep": (
        lambda d: _write(d / "log.json", '{"eval": {}, "samples": ' + _deep() + "}"),
        ["inspect"],
        "nested deeper than 64 levels",
    ),
    "jsonl-too-deep": (
        lambda d: _write(d / "rows.jsonl", '{"messages": ' + _deep() + "}\n"),
        ["jsonl"],
        ":1: JSON nested deeper than 64 levels",
    ),
    "jsonl-not-utf8": (
        lambda d: _write(d / "rows.jsonl", _CHAT + b'{"q": "\xff"}\n'),
        ["jsonl"],
        ":2: not UTF-8 text",
    ),
    "yaml-too-deep": (
        lambda d: _write(d / "promptfooconfig.yaml", "prompts: ['{{q}}']\ntests: " + _deep()),
        ["promptfoo"],
        "YAML nesting too deep",
    ),
    "csv-cell-too-long": (
        lambda d: _write(d / "t.csv", "question,answer\nhi," + "a" * (MAX_CSV_CELL_CHARS + 1)),
        ["csv", "--map", "input=question", "--map", "expect.contains=answer"],
        f":2: a cell is longer than {MAX_CSV_CELL_CHARS:,} characters",
    ),
    "csv-row-too-deep": (
        lambda d: _write(d / "t.csv", 'question,answer\nhi,"' + _deep() + '"\n'),
        ["csv", "--map", "input=question", "--map", "expect.contains=answer"],
        ":2: a cell is longer than",
    ),
    "csv-not-utf8": (
        lambda d: _write(d / "t.csv", b"question,answer\nhi,ok\nbye,\xfe\xff\n"),
        ["csv", "--map", "input=question", "--map", "expect.contains=answer"],
        ":3: not UTF-8 text",
    ),
}


def _write(path: Path, content: str | bytes) -> Path:
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


@pytest.mark.parametrize("name", sorted(MALFORMED_IMPORTS))
def test_a_malformed_import_is_one_line_exit_2_and_nothing_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    make, command, words = MALFORMED_IMPORTS[name]
    path, out = make(tmp_path), tmp_path / "cases"
    assert main(["cases", "import", command[0], str(path), *command[1:], "--out", str(out)]) == 2
    _refused(2, capsys.readouterr().err, path, out, words)


MALFORMED_TRACES = {
    "otlp-too-deep": (
        '{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "t", "attributes": '
        + _deep()
        + "}]}]}]}\n",
        ":1: JSON nested deeper than 64 levels",
    ),
    "otlp-not-utf8": (
        b'{"resourceSpans": []}\n{"resourceSpans": [{"x": "\xff"}]}\n',
        ":2: not UTF-8 text",
    ),
    "otlp-spans-not-objects": ('{"resourceSpans": [1, 2]}\n', "a list of objects expected"),
    "openai-log-not-utf8": (
        b'{"messages": [{"role": "user", "content": "\xc3"}]}\n',
        ":1: not UTF-8 text",
    ),
}


@pytest.mark.parametrize("name", sorted(MALFORMED_TRACES))
def test_a_malformed_trace_file_is_one_line_exit_2_and_nothing_written(
    tmp_path: Path, project: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    content, words = MALFORMED_TRACES[name]
    path, out = _write(tmp_path / "traces.jsonl", content), tmp_path / "drafts"
    args = ["traces", "sample", str(path), "--config", str(project), "--out", str(out)]
    assert main(args) == 2
    _refused(2, capsys.readouterr().err, path, out, words)

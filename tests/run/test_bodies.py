"""Response bodies under ``system.max_response_mb`` (evalkit.run.providers.bodies): every
encoding decodes exactly; past the cap, on the wire or decompressed, the read stops with one
clear error, having never held much more than the cap."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalkit.corpus.cases import load_corpus
from evalkit.corpus.manifest import build_manifest
from evalkit.corpus.suite import load_suite
from evalkit.errors import ConfigError, ProviderError
from evalkit.run.providers import make_provider
from evalkit.run.providers.bodies import BoundedBody

MB = 2**20
REPO = Path(__file__).resolve().parents[2]


def _encode(data: bytes, encoding: str) -> bytes:
    if encoding in ("gzip", "x-gzip"):
        return gzip.compress(data)
    if encoding == "deflate":
        return zlib.compress(data)
    if encoding == "raw-deflate":
        packer = zlib.compressobj(wbits=-zlib.MAX_WBITS)
        return packer.compress(data) + packer.flush()
    return data


def _pieces(wire: bytes, size: int) -> Iterator[bytes]:
    return (wire[i : i + size] for i in range(0, len(wire), size))


def _read(body: BoundedBody, wire: bytes, size: int) -> bytes:
    return b"".join([*(body.feed(piece) for piece in _pieces(wire, size)), body.finish()])


@settings(max_examples=120, deadline=None)
@given(
    data=st.binary(max_size=3000),
    encoding=st.sampled_from(["", "identity", "gzip", "x-gzip", "deflate", "raw-deflate"]),
    size=st.integers(1, 700),
)
def test_every_encoding_decodes_exactly_in_any_pieces(
    data: bytes, encoding: str, size: int
) -> None:
    header = "deflate" if encoding == "raw-deflate" else encoding
    assert _read(BoundedBody(header, max_mb=1), _encode(data, encoding), size) == data


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "raw-deflate"])
def test_a_bomb_stops_at_the_cap_never_holding_more(encoding: str) -> None:
    """64 MiB of spaces compress to about 64 KiB: the read stops just past 1 MiB decoded,
    and no piece it handed back was larger than the cap's worth (plus one byte)."""
    packer = zlib.compressobj(
        9, zlib.DEFLATED, {"gzip": 31, "deflate": 15, "raw-deflate": -15}[encoding]
    )
    wire = b"".join(packer.compress(b" " * MB) for _ in range(64)) + packer.flush()
    assert len(wire) < MB // 4
    body = BoundedBody("deflate" if encoding == "raw-deflate" else encoding, max_mb=1)
    decoded = 0
    with pytest.raises(ProviderError) as caught:
        for piece in _pieces(wire, 1 << 16):
            out = body.feed(piece)
            assert len(out) <= MB + 1
            decoded += len(out)
    assert decoded <= MB
    assert caught.value.cause == (
        "response body exceeds system.max_response_mb = 1 MB (decompressed)"
    )
    assert caught.value.retryable is False  # the same server sends the same body again


def test_an_endless_plain_body_stops_at_the_cap_on_the_wire() -> None:
    body = BoundedBody(None, max_mb=0.5)
    fed = 0
    with pytest.raises(ProviderError, match=r"= 0.5 MB \(on the wire\)"):
        while fed < 10 * MB:  # "endless": far past the cap
            body.feed(b"x" * 4096)
            fed += 4096
    assert fed == MB // 2  # exactly the cap is read; the next piece, crossing it, raises


def test_a_declared_length_past_the_cap_reads_nothing() -> None:
    with pytest.raises(ProviderError, match=r"\(on the wire\)"):
        BoundedBody("gzip", max_mb=1, declared_length=str(MB + 1))
    BoundedBody("gzip", max_mb=1, declared_length=str(MB))  # exactly the cap is fine
    BoundedBody(None, max_mb=1, declared_length="not a number")  # the stream decides


def test_unknown_or_broken_encodings_are_errors_not_garbage() -> None:
    with pytest.raises(ProviderError, match="Content-Encoding 'br', which evalkit did not ask"):
        BoundedBody("br", max_mb=1)
    with pytest.raises(ProviderError, match="does not decompress"):
        BoundedBody("gzip", max_mb=1).feed(b"this is not gzip at all")


def test_max_response_mb_is_validated_recorded_and_reaches_the_provider() -> None:
    config = REPO / "corpus" / "evalkit.yaml"
    for bad in ("0", "-1", "nan", "5000"):
        with pytest.raises(ConfigError, match="max_response_mb"):
            load_suite(config, overrides=[f"system.max_response_mb={bad}"])
    suite = load_suite(config, overrides=["system.max_response_mb=2.5"])
    assert make_provider(suite.config.system)._max_response_mb == 2.5
    corpus = load_corpus(suite.root)
    manifest = build_manifest(suite, corpus, run_id="r", label="l", selection={})
    default = build_manifest(load_suite(config), corpus, run_id="r", label="l", selection={})
    # recorded with the other request limits (timeout_s, max_retries), never hashed: a cap
    # changes no answer it lets through
    assert (manifest.requests["max_response_mb"], default.requests["max_response_mb"]) == (
        2.5,
        32,
    )
    assert manifest.config_hash == default.config_hash

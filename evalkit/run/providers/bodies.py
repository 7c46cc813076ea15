"""Response bodies read under a cap (``system.max_response_mb``): on the wire and decompressed.

Both transports of :mod:`evalkit.run.providers.openai_api` hand the raw bytes they receive to
a :class:`BoundedBody` (:func:`read_bounded` for the lean transport's aiohttp responses,
:func:`bounded_stream_type` for the official client's httpx streams) and inflate nothing
themselves. It inflates ``gzip`` and ``deflate`` (the
only encodings evalkit asks for, :data:`ACCEPT_ENCODING`) with zlib's ``max_length``, so a gzip
bomb stops after the cap's worth of output instead of inflating to hundreds of times its size
first, and an
endless chunked body stops after the cap's worth of wire. Past the cap, the body is that case's
stored error (never retried: the server would send the same body again, and never cached).

Examples:
    >>> import gzip
    >>> body = BoundedBody("gzip", max_mb=0.01)
    >>> body.feed(gzip.compress(b'{"ok": 1}')) + body.finish()
    b'{"ok": 1}'
    >>> BoundedBody("gzip", max_mb=0.01).feed(gzip.compress(b" " * 20_000))
    Traceback (most recent call last):
    ...
    evalkit.errors.ProviderError: response body exceeds system.max_response_mb = 0.01 MB (decompressed)
"""  # noqa: E501

from __future__ import annotations

import functools
import zlib
from typing import Any

from evalkit.errors import ProviderError

#: What both transports send as ``Accept-Encoding``: what :class:`BoundedBody` can inflate.
ACCEPT_ENCODING = "gzip, deflate"
#: The default of ``system.max_response_mb`` (a judge's responses are bounded by it too).
DEFAULT_MAX_RESPONSE_MB = 32.0
_GZIP = zlib.MAX_WBITS | 16  # a gzip header and trailer
_ZLIB, _RAW = zlib.MAX_WBITS, -zlib.MAX_WBITS  # HTTP "deflate": zlib-wrapped, or raw from some
_READ_CHUNK = 1 << 16  # bytes per read of an aiohttp body


class BoundedBody:
    """One response body as it arrives: :meth:`feed` each raw chunk, then :meth:`finish`; both
    return the decoded bytes so far and raise a :class:`ProviderError` past ``max_mb`` MB
    (2**20 bytes) of wire or of decoded bytes, or on an encoding it cannot read."""

    def __init__(
        self, encoding: str | None, max_mb: float, declared_length: str | int | None = None
    ) -> None:
        self._max_mb = max_mb
        self._limit = int(max_mb * 2**20)
        self._wire = self._decoded = 0
        self._inflate: zlib._Decompress | None = None
        self._deflate_head: bytes | None = None  # "deflate": held until it says which kind
        coding = (encoding or "").strip().lower()
        if coding in ("gzip", "x-gzip"):
            self._inflate = zlib.decompressobj(_GZIP)
        elif coding == "deflate":
            self._deflate_head = b""
        elif coding not in ("", "identity"):
            raise ProviderError(
                f"response body has Content-Encoding {coding[:40]!r}, which evalkit did not ask "
                f"for (Accept-Encoding: {ACCEPT_ENCODING})",
                retryable=False,
            )
        declared = str(declared_length or "")
        if declared.isdigit() and int(declared) > self._limit:  # said up front: read nothing
            raise self._too_large("on the wire")

    def feed(self, chunk: bytes) -> bytes:
        """The decoded bytes of ``chunk``, the next raw bytes of the body."""
        self._wire += len(chunk)
        if self._wire > self._limit:
            raise self._too_large("on the wire")
        if self._deflate_head is not None:
            chunk = self._deflate_head + chunk
            if len(chunk) < 2:
                self._deflate_head = chunk
                return b""
            self._deflate_head = None
            wrapped = chunk[0] & 0x0F == 8 and (chunk[0] << 8 | chunk[1]) % 31 == 0
            self._inflate = zlib.decompressobj(_ZLIB if wrapped else _RAW)
        if self._inflate is None:
            return self._count(chunk)
        try:
            # One byte of room past the cap: output that fills it is over the cap, and zlib
            # never makes more than asked for (the rest of the input waits in unconsumed_tail).
            return self._count(self._inflate.decompress(chunk, self._limit - self._decoded + 1))
        except zlib.error as exc:
            raise ProviderError(
                f"response body does not decompress: {exc}", retryable=False
            ) from None

    def finish(self) -> bytes:
        """The decoded bytes still held once the body has ended."""
        if self._deflate_head:
            raise ProviderError("response body does not decompress: truncated", retryable=False)
        if self._inflate is None:
            return b""
        try:
            return self._count(self._inflate.flush())
        except zlib.error as exc:
            raise ProviderError(
                f"response body does not decompress: {exc}", retryable=False
            ) from None

    def _count(self, decoded: bytes) -> bytes:
        self._decoded += len(decoded)
        if self._decoded > self._limit:
            raise self._too_large("decompressed")
        return decoded

    def _too_large(self, where: str) -> ProviderError:
        return ProviderError(
            f"response body exceeds system.max_response_mb = {self._max_mb:g} MB ({where})",
            retryable=False,
        )


async def read_bounded(response: Any, max_mb: float) -> bytes:
    """An aiohttp response's body, decoded, under ``max_mb`` on the wire and decompressed."""
    headers = response.headers
    body = BoundedBody(headers.get("Content-Encoding"), max_mb, headers.get("Content-Length"))
    parts = [body.feed(chunk) async for chunk in response.content.iter_chunked(_READ_CHUNK)]
    parts.append(body.finish())
    return b"".join(parts)


@functools.cache
def bounded_stream_type(base: type) -> type:
    """A subclass of ``base`` (an httpx ``AsyncByteStream``) yielding a raw stream's bytes
    decoded by a :class:`BoundedBody`, which raises past the cap."""

    class BoundedStream(base):
        def __init__(self, raw: Any, body: BoundedBody) -> None:
            self._raw, self._body = raw, body

        async def __aiter__(self) -> Any:
            async for chunk in self._raw:
                if decoded := self._body.feed(chunk):
                    yield decoded
            if rest := self._body.finish():
                yield rest

        async def aclose(self) -> None:
            await self._raw.aclose()

    return BoundedStream

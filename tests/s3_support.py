"""S3 for the store tests: moto's server on 127.0.0.1, keys only in the environment.

The parts (pyarrow.fs), the shared store's warehouse (pyiceberg) and the unreachable-store
tests all need the same three things: test keys in the environment (never in a URI: the store
must find them where a team's CI puts them), a moto server on a free loopback port, and a bucket
in it named as a shared-store URI's warehouse.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

#: What CI would put in the environment; moto accepts any.
TEST_KEYS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}


def set_test_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in TEST_KEYS.items():
        monkeypatch.setenv(name, value)


@contextmanager
def moto_server() -> Iterator[Any]:
    """moto's ThreadedMotoServer on a free loopback port, stopped after (stopping it sooner
    is the test's business: ``stop_once`` makes a second stop harmless)."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    stopped: list[bool] = []

    def stop_once() -> None:
        if not stopped:
            stopped.append(True)
            server.stop()

    server.stop_once = stop_once
    try:
        yield server
    finally:
        stop_once()


def endpoint(server: Any) -> str:
    """``http://host:port`` of a running moto server."""
    host, port = server.get_host_and_port()
    return f"http://{host}:{port}"


def warehouse_uri(catalog: str, endpoint_url: str, bucket: str) -> str:
    """A shared-store URI: ``catalog`` (a SQLAlchemy URL, no query) with its warehouse in a new
    ``bucket`` of the moto server at ``endpoint_url``."""
    import pyarrow.fs as pafs

    fs = pafs.S3FileSystem(
        endpoint_override=endpoint_url.removeprefix("http://"), scheme="http",
        region="us-east-1", allow_bucket_creation=True,
    )  # fmt: skip
    fs.create_dir(bucket)
    return (
        f"{catalog}?warehouse=s3://{bucket}/evalkit&s3.endpoint={endpoint_url}&s3.region=us-east-1"
    )

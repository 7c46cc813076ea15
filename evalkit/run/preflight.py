"""Fail fast on a dead endpoint: before the first case, is anything listening there?

A wrong ``base_url`` used to cost every case its full retry schedule (connection refused is
retried) before an all-errored summary. One TCP connection
per endpoint, at most ``timeout_s`` each, answers the question first: when no endpoint of the
system accepts one, the run stops before anything is recorded, with the cause and the fix. It
sends no request (nothing is asked, nothing is paid), and it stands aside where it could be
wrong: behind a proxy (the proxy connects, not evalkit) and for a python system (no endpoint).
With replicas, one reachable replica is enough: the router's breaker handles the others.

Examples:
    >>> reachable("http://127.0.0.1:1/v1", timeout_s=1.0)  # nothing listens on port 1
    'connection refused'
"""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Sequence
from urllib.parse import urlsplit

from evalkit.errors import EvalkitError
from evalkit.redact import strip_userinfo

TIMEOUT_S = 3.0


def reachable(url: str, timeout_s: float = TIMEOUT_S) -> str | None:
    """Why nothing accepts a TCP connection at ``url``'s host and port, or None when something
    does (or when it cannot be told: behind a proxy, or a URL without a host)."""
    parts = urlsplit(url)
    if not parts.hostname:
        return None
    if _proxied(url, parts.hostname):
        return None
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout_s):
            return None
    except ConnectionRefusedError:
        return "connection refused"
    except socket.gaierror as exc:
        return f"host {parts.hostname!r} not found ({exc.strerror or exc})"
    except TimeoutError:
        return f"no answer to a connection within {timeout_s:g} s"
    except OSError as exc:
        return exc.strerror or type(exc).__name__


def check_endpoints(urls: Sequence[str], timeout_s: float = TIMEOUT_S) -> None:
    """Raise `EvalkitError` naming each endpoint and why, when none of ``urls`` is reachable."""
    if not urls:
        return
    problems = [(url, reachable(url, timeout_s)) for url in urls]
    if any(why is None for _, why in problems):
        return
    shown = "; ".join(f"{strip_userinfo(url)}: {why}" for url, why in problems)
    fix = (
        "start the server (the demo: `evalkit demo serve --port 0 --detach`) or point "
        "system.base_url at a running one (`--set system.base_url=URL`)"
    )
    raise EvalkitError(f"cannot reach the system under test ({shown}): nothing was run; {fix}")


def _proxied(url: str, host: str) -> bool:
    """Whether the environment sends requests to ``url`` through a proxy (then the proxy, not
    evalkit, connects: a direct connection proves nothing either way)."""
    scheme = urlsplit(url).scheme or "http"
    proxies = urllib.request.getproxies()
    return scheme in proxies and not urllib.request.proxy_bypass(host)

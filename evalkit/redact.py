"""Secret redaction: API keys and Authorization values never reach a stored or printed string.

Keys the process uses are registered (:func:`register_secret`; providers register theirs, and
variables of the environment whose names say they hold a key, token, secret or password are
registered on first use). A registered key is removed wherever it shows up, and so are its common
masked forms: a prefix of it, a run of ``*`` (or ``•``, ``…``, ``...``), then a suffix of it, as
in ``sk-evalk*****0e1f`` or ``custkey-****aa90``.

Two strengths: :func:`redact_known` removes only registered keys and their masked forms (so it
changes no other byte: used on model outputs and cached responses), :func:`redact_secrets` also
masks anything that looks like a key or an Authorization header, and drops the userinfo of every
URL (used on errors and reasons).

:func:`strip_userinfo` is the one place a URL loses its ``user:password@``: every URL evalkit
records (manifests, cache keys) or shows (notes, errors, progress, summaries, reports, echoed
``--set`` options) goes through it.
"""

from __future__ import annotations

import os
import re
from typing import overload

_VALUE = r"[^\s\"',;&}]+"  # a header or query-string value, up to its delimiter
_SECRET_PATTERNS = (
    # "Authorization: Bearer x", "'authorization': 'Basic x'", "x-api-key: x", "api_key=x"
    re.compile(
        r"(?i)((?:authorization|api[-_]?key)[\"']?\s*[:=]\s*[\"']?)(?:bearer\s+|basic\s+)?" + _VALUE
    ),
    re.compile(r"(?i)\b(bearer\s+)" + _VALUE),
    re.compile(r"\b(sk-)[A-Za-z0-9*._-]{6,}"),  # OpenAI-style keys, masked ones included
)
# A URL in a text, up to a character no URL in a config or a message holds (space, quote,
# bracket, comma): "[http://u:p@a/v1, http://b/v1]" is two URLs.
_URL = re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://[^\s\"'<>\[\]{},]*")
_MASKED = re.compile(r"([A-Za-z0-9_.\-]*?)(?:\*{2,}|•{2,}|…|\.{3,})+([A-Za-z0-9_\-]*)")
_MASK_CHARS = ("**", "••", "…", "...")
_SECRET_NAME = re.compile(
    r"(?i)(api[_-]?key|(^|_)key$|token|secret|passw(or)?d|credential|(^|_)auth$)"
)
_KNOWN_SECRETS: set[str] = set()
_ENVIRONMENT_READ = False
REDACTED = "[redacted]"


def register_secret(value: str) -> None:
    """Remember an API key so :func:`redact_secrets` removes it wherever it shows up."""
    if value and len(value) >= 8:
        _KNOWN_SECRETS.add(value)


def register_environment_secrets(environ: dict[str, str] | None = None) -> None:
    """Register the values of variables named like keys (``*_API_KEY``, ``*_TOKEN``,
    ``*SECRET*``, ``*PASSWORD*``, ...); called on the first redaction with ``os.environ``."""
    global _ENVIRONMENT_READ
    _ENVIRONMENT_READ = True
    for name, value in (os.environ if environ is None else environ).items():
        if _SECRET_NAME.search(name):
            register_secret(value)


def has_secrets() -> bool:
    """Whether any key is registered (callers skip scrubbing entirely when none is)."""
    if not _ENVIRONMENT_READ:
        register_environment_secrets()
    return bool(_KNOWN_SECRETS)


def redact_known(text: str) -> str:
    """``text`` without registered keys and their masked forms; every other byte is kept.

    Examples:
        >>> register_secret("custkey-7d01e5a3aa90")
        >>> redact_known("key custkey-7d01e5a3aa90, shown as custkey-****aa90 in the log")
        'key [redacted], shown as [redacted] in the log'
    """
    if not has_secrets() or not text:
        return text
    for secret in _KNOWN_SECRETS:
        if secret in text:
            text = text.replace(secret, REDACTED)
    if any(mask in text for mask in _MASK_CHARS) and any(
        secret[:3] in text or secret[-3:] in text for secret in _KNOWN_SECRETS
    ):  # a masked form keeps 3+ characters of one end (see _unmask): no end, no masked form
        text = _MASKED.sub(_unmask, text)
    return text


def redact_secrets(text: str) -> str:
    """``text`` without API keys, Authorization values or the userinfo of a URL.

    Examples:
        >>> redact_secrets("HTTP 401: bad key sk-proj-abc123xyz in Authorization: Bearer tok9")
        'HTTP 401: bad key sk-[redacted] in Authorization: [redacted]'
    """
    text = strip_userinfo(redact_known(text))
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(r"\1" + REDACTED, text)
    return text


@overload
def strip_userinfo(text: str) -> str: ...
@overload
def strip_userinfo(text: None) -> None: ...
def strip_userinfo(text: str | None) -> str | None:
    """``text`` with every URL in it shown without its ``user:password@`` (a key in a URL is
    still a key): a URL, or a message or ``--set`` option quoting one.

    The userinfo ends at the *last* ``@`` of the authority, as urllib, yarl and httpx read it:
    a password holding a raw ``@`` loses all of it, not just its head.

    Examples:
        >>> strip_userinfo("https://me:sk-abc@proxy.example/v1")
        'https://proxy.example/v1'
        >>> strip_userinfo("http://user:x@SECRET@gw.local:8000/v1")
        'http://gw.local:8000/v1'
        >>> strip_userinfo("system.base_urls=[http://u:pw@a:1/v1, http://b:2/v1]")
        'system.base_urls=[http://a:1/v1, http://b:2/v1]'
        >>> strip_userinfo("mail me@example.org about http://example.org/@scope/pkg")
        'mail me@example.org about http://example.org/@scope/pkg'
    """
    if not text or "@" not in text or "://" not in text:
        return text
    return _URL.sub(_without_userinfo, text)


def _without_userinfo(match: re.Match[str]) -> str:
    scheme, _, rest = match.group().partition("://")
    end = min((i for i in map(rest.find, "/?#") if i >= 0), default=len(rest))
    return f"{scheme}://{rest[:end].rpartition('@')[2]}{rest[end:]}"


def _unmask(match: re.Match[str]) -> str:
    left, right = match.group(1), match.group(2)
    if len(left) + len(right) < 3:
        return match.group(0)
    for secret in _KNOWN_SECRETS:
        if (
            secret.startswith(left)
            and secret.endswith(right)
            and len(left) + len(right) < len(secret)
            and (len(left) >= 3 or len(right) >= 3)
        ):
            return REDACTED
    return match.group(0)

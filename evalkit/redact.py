"""Secret redaction: API keys and Authorization values never reach a stored or printed string.

Keys the process uses are registered (:func:`register_secret`); anything that looks like a key or
an Authorization header is masked by pattern as well.
"""

from __future__ import annotations

import re

_VALUE = r"[^\s\"',;&}]+"  # a header or query-string value, up to its delimiter
_SECRET_PATTERNS = (
    # "Authorization: Bearer x", "'authorization': 'Basic x'", "x-api-key: x", "api_key=x"
    re.compile(
        r"(?i)((?:authorization|api[-_]?key)[\"']?\s*[:=]\s*[\"']?)(?:bearer\s+|basic\s+)?" + _VALUE
    ),
    re.compile(r"(?i)\b(bearer\s+)" + _VALUE),
    re.compile(r"\b(sk-)[A-Za-z0-9*._-]{6,}"),  # OpenAI-style keys, masked ones included
)
_KNOWN_SECRETS: set[str] = set()


def register_secret(value: str) -> None:
    """Remember an API key so :func:`redact_secrets` removes it wherever it shows up."""
    if value and len(value) >= 8:
        _KNOWN_SECRETS.add(value)


def redact_secrets(text: str) -> str:
    """``text`` without API keys or Authorization values.

    Examples:
        >>> redact_secrets("HTTP 401: bad key sk-proj-abc123xyz in Authorization: Bearer tok9")
        'HTTP 401: bad key sk-[redacted] in Authorization: [redacted]'
    """
    for secret in _KNOWN_SECRETS:
        text = text.replace(secret, "[redacted]")
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(r"\1[redacted]", text)
    return text

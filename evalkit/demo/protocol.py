"""What the simulator's personas share: model ids, request errors, the request hash, seeded draws
and the token estimate."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

MODEL_ID = "demo-support-1"
OWNER = "evalkit-simulator"

Message = Mapping[str, Any]


class InvalidRequestError(ValueError):
    """The request body is not a chat completion request the simulator can answer (HTTP 400)."""


class UnknownModelError(LookupError):
    """The request names a model the simulator does not serve (HTTP 404)."""


def request_sha256(body: Mapping[str, Any] | Sequence[Message]) -> str:
    """sha256 of a canonical JSON serialisation (sorted keys) of a request body or message list."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def seeded_draw(seed: int, salt: str, sha: str, occurrence: int) -> float:
    """A uniform draw in [0, 1) that depends only on its arguments (no global RNG, no order).

    Examples:
        >>> seeded_draw(0, "noise", "ab", 1) == seeded_draw(0, "noise", "ab", 1)
        True
    """
    digest = hashlib.sha256(f"{seed}|{salt}|{sha}|{occurrence}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def count_tokens(text: str) -> int:
    """The simulator's token estimate: 1.3 tokens per whitespace-separated word, rounded up."""
    return math.ceil(len(text.split()) * 1.3)

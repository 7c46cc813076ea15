"""``redact_known`` skips the masked-form search when no registered key's first or last three
characters are in the text (markdown bold, ``**``, is in most model replies): the shortcut
must never keep a masked key the full search removes. ``strip_userinfo`` drops the userinfo of
every URL in a text, up to its last "@", as clients read it."""

from __future__ import annotations

from urllib.parse import urlsplit

from hypothesis import given, settings
from hypothesis import strategies as st

from evalkit import redact
from evalkit.redact import REDACTED, redact_known, redact_secrets, register_secret, strip_userinfo

KEY = "custkey-7d01e5a3aa90"

#: Pieces a reply is made of: words, markdown, mask runs, and both ends of the key.
_PIECES = st.sampled_from(
    ["order", " ", "**", "*", "...", "…", "••", "-", "cus", "custkey", "aa90", "a90", "7d0",
     "key", "x", "\n", "ust", "e5a3"]
)  # fmt: skip


def _full_search(text: str) -> str:
    """What redact_known did before the shortcut: the masked-form search whenever a mask
    character run is present."""
    for secret in redact._KNOWN_SECRETS:
        text = text.replace(secret, REDACTED)
    if any(mask in text for mask in redact._MASK_CHARS):
        text = redact._MASKED.sub(redact._unmask, text)
    return text


@settings(max_examples=400, deadline=None)
@given(st.lists(_PIECES, max_size=14).map("".join))
def test_the_shortcut_agrees_with_the_full_search(text: str) -> None:
    register_secret(KEY)
    assert redact_known(text) == _full_search(text)


def test_masked_keys_are_still_removed_and_bold_text_is_kept() -> None:
    register_secret(KEY)
    assert redact_known("shown as custkey-****aa90 and cu***a90") == (
        f"shown as {REDACTED} and {REDACTED}"
    )
    assert redact_known("I checked **order 10001** for you") == "I checked **order 10001** for you"


# A userinfo as people write them: letters, digits, marks, a raw "@" or ":" (not "/?#", which
# end the authority, nor the space, quote, bracket or comma that end a URL in a message).
_USERINFO = st.text(alphabet=st.sampled_from("abcXYZ019-._~!$&()*+;=:@%"), min_size=1, max_size=24)


@settings(max_examples=300, deadline=None)
@given(userinfo=_USERINFO)
def test_strip_userinfo_drops_every_userinfo_the_way_clients_read_it(userinfo: str) -> None:
    bare = "http://gw.example:8080/v1?api-version=1"
    url = bare.replace("http://", f"http://{userinfo}@")
    assert urlsplit(url).hostname == "gw.example"  # what a client connects to
    assert strip_userinfo(url) == bare
    message = f"connection error at {url}, {url} (after 3 attempts)"
    assert strip_userinfo(message) == f"connection error at {bare}, {bare} (after 3 attempts)"
    assert redact_secrets(message) == strip_userinfo(message)

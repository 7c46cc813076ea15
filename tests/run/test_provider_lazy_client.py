"""The official client is built on first use: a judge whose verdicts all come from the cache (a
rescore) never imports openai."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SCRIPT = """
import sys
from evalkit.run.providers.openai_api import OpenAIProvider

provider = OpenAIProvider(base_url="http://127.0.0.1:9/v1", api_key="k", transport="openai")
before = "openai" in sys.modules
client = provider._client  # the first use builds it, with the endpoint it was given
print(before, "openai" in sys.modules, str(client.base_url))
"""


def test_the_official_client_is_imported_and_built_only_when_first_used() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True", "http://127.0.0.1:9/v1/"]

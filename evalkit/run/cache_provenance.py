"""Who answered a shared response-cache entry, and whether this run may take it.

A cache key names the endpoint by its URL, and a URL is not a server: ``http://127.0.0.1:8000/v1``
is a stub on a laptop and a real model on a CI runner, and a server at the same URL can be
replaced. So each entry a run publishes records its *publisher*: the host, run and commit, the
endpoint URL and whether it is loopback, and what the endpoint said it was (its ``/models``
entry for the model: id, owner, created), beside what each answer says (``model``, the served
model, and ``system_fingerprint`` where the API gives one, inside the entry). Before a run
takes another's entry it asks its own endpoint's ``/models`` (a GET: nothing generated,
nothing paid) and takes the entry only when:

- a publisher is recorded (an entry appended by hand or by an older evalkit is not);
- the entry was not published for a loopback endpoint by another host (another machine's
  127.0.0.1 is another server);
- the publisher's endpoint reported what this run's endpoint reports.

Examples:
    >>> me = Consumer(host="ci-7", reported={"id": "m", "owned_by": "vllm"})
    >>> stub = Publisher(host="laptop", run="r1", commit=None,
    ...     endpoint="http://127.0.0.1:8000/v1", loopback=True, reported={"id": "m"})
    >>> refusal(stub.to_json(), me)
    "published for another machine's loopback endpoint (host laptop)"
    >>> same = Publisher(host="ci-7", run="r2", commit="abc",
    ...     endpoint="http://127.0.0.1:8000/v1", loopback=True,
    ...     reported={"id": "m", "owned_by": "vllm"})
    >>> refusal(same.to_json(), me) is None
    True
"""

from __future__ import annotations

import json
import socket
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from evalkit.run_manifest import ModelInfo, ProviderInfo, RunManifest

if TYPE_CHECKING:
    from evalkit.corpus.suite import SystemConfig

#: Seconds the ``/models`` question may take before the endpoint counts as reporting nothing.
REPORT_TIMEOUT_S = 5.0
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


@dataclass(frozen=True, kw_only=True)
class Publisher:
    """Who published a shared cache entry and what its endpoint said it was."""

    host: str
    run: str | None
    commit: str | None
    endpoint: str | None
    loopback: bool
    reported: dict[str, Any] | None  # the endpoint's /models entry of the model (None: none)
    # a pull-request job's entries serve only that job: another job's runs may gate
    pull_request: bool = False
    job: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


@dataclass(frozen=True)
class Consumer:
    """A run about to take shared entries: its host and what its endpoint reports."""

    host: str
    reported: dict[str, Any] | None
    job: str | None = None  # the CI job this run is part of (provenance.ci_context)


def this_host() -> str:
    return socket.gethostname()


def is_loopback(url: str | None) -> bool:
    """Whether ``url`` names this machine's loopback interface.

    Examples:
        >>> is_loopback("http://127.0.0.1:9/v1"), is_loopback("https://api.openai.com/v1")
        (True, False)
    """
    host = urlsplit(url or "").hostname or ""
    return host in _LOOPBACK or host.startswith("127.")


def report_endpoint(system: SystemConfig, timeout_s: float = REPORT_TIMEOUT_S) -> dict | None:
    """What the endpoint of ``system`` says it serves as ``system.model``: its ``/models``
    entry's ``id``, ``owned_by`` and ``created`` (None: a python system, an endpoint that lists
    no such model, or one that does not answer the question)."""
    from evalkit.run.providers import api_key_for

    url = system.effective_endpoint().url
    if system.provider == "python" or not url:
        return None
    try:
        key = api_key_for(system)
    except Exception:
        return None
    return report_endpoint_at(url, system.model, key, timeout_s)


def report_of_manifest(manifest: RunManifest) -> dict[str, Any] | None:
    """:func:`report_endpoint` for the endpoint and model a run's ``manifest`` records (a
    merge, which has no suite: the key from ``OPENAI_API_KEY``, a placeholder for loopback)."""
    import os

    from evalkit.run.providers import PLACEHOLDER_KEY

    provider, model_info = manifest.provider or ProviderInfo(), manifest.model or ModelInfo()
    url, model = provider.base_url, model_info.id
    if provider.name == "python" or not url or not model:
        return None
    key = os.environ.get("OPENAI_API_KEY") or PLACEHOLDER_KEY
    return report_endpoint_at(url, model, key)


def report_endpoint_at(
    url: str, model: str, key: str, timeout_s: float = REPORT_TIMEOUT_S
) -> dict[str, Any] | None:
    """The ``/models`` entry of ``model`` at endpoint ``url`` (``id``, ``owned_by``,
    ``created``), or None."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        url.rstrip("/") + "/models", headers={"Authorization": f"Bearer {key}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:
            body = json.loads(answer.read(1 << 20))
    except (OSError, ValueError, urllib.error.URLError):
        return None
    listed = body.get("data") if isinstance(body, dict) else None
    for entry in listed if isinstance(listed, list) else []:
        if isinstance(entry, dict) and entry.get("id") == model:
            return {k: entry.get(k) for k in ("id", "owned_by", "created")}
    return None


def publisher_of(
    run_id: str | None, manifest: RunManifest | None, reported: dict[str, Any] | None
) -> Publisher:
    """This host as the publisher of run ``run_id``'s entries (``manifest``: the run's, None
    when unknown)."""
    import os

    from evalkit.provenance import ci_context

    manifest = manifest or RunManifest()
    endpoint = manifest.provider.base_url if manifest.provider else None
    commit = manifest.run.git_sha
    ci = ci_context(os.environ)
    return Publisher(
        host=this_host(),
        run=run_id,
        commit=commit,
        endpoint=endpoint,
        loopback=is_loopback(endpoint),
        reported=reported,
        pull_request=bool(ci.get("pull_request")),
        job=ci.get("job"),
    )


def this_job() -> str | None:
    """The CI job this process runs in (None outside CI)."""
    import os

    from evalkit.provenance import ci_context

    return ci_context(os.environ).get("job")


def refusal(publisher: str | None, consumer: Consumer) -> str | None:
    """Why ``consumer`` may not take an entry ``publisher`` (JSON) published, or None."""
    if not publisher:
        return "no publisher recorded"
    try:
        record = json.loads(publisher)
    except ValueError:
        return "no publisher recorded"
    if not isinstance(record, dict):
        return "no publisher recorded"
    if record.get("pull_request") and (not record.get("job") or record["job"] != consumer.job):
        return "published by a pull-request job (its answers serve only that job)"
    if record.get("loopback") and record.get("host") != consumer.host:
        return f"published for another machine's loopback endpoint (host {record.get('host')})"
    if record.get("reported") != consumer.reported:
        return "its endpoint reported another served identity than this run's"
    return None


def publisher_host(publisher: str | None) -> str | None:
    """The host named by a publisher record (JSON), or None."""
    try:
        record = json.loads(publisher or "null")
    except ValueError:
        return None
    return record.get("host") if isinstance(record, dict) else None

"""The run manifest: everything that produced a run, pinned.

``config_hash`` is the sha256 of the manifest's canonical form minus run-specific fields, so two
runs with the same hash are replays of one configuration; ``manifest_diff`` names the comparable
fields two manifests differ in. API keys never enter it (only the names of their variables).

Examples:
    >>> config_hash({"suite": "s", "run": {"run_id": "a"}}) == config_hash({"suite": "s"})
    True
"""

from __future__ import annotations

import datetime as dt
import hashlib
import platform
import subprocess
import threading
from collections.abc import Iterable, Sequence
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalkit.corpus.cases import Corpus
from evalkit.corpus.fact_rows import FactRows
from evalkit.corpus.fingerprint import code_fingerprint, fingerprint_digest
from evalkit.corpus.repo_tree import env_digests, repo_tree
from evalkit.corpus.scorer_modules import scorer_module_hashes
from evalkit.corpus.suite import Suite
from evalkit.records import canonical_json
from evalkit.redact import strip_userinfo
from evalkit.run_manifest import COMPARABLE_FIELDS, MANIFEST_VERSION, RunManifest, as_manifest
from evalkit.version import __version__

if TYPE_CHECKING:  # a plain run records loaded cases: the index reader stays unimported
    from evalkit.corpus.case_facts import CorpusFacts


def _sha(text: str | None) -> str | None:
    return hashlib.sha256(text.encode()).hexdigest() if text is not None else None


def build_manifest(
    suite: Suite,
    corpus: Corpus | CorpusFacts,
    *,
    run_id: str,
    label: str,
    selection: dict[str, Any],
    judge_rubrics: dict[str, str] | None = None,
) -> RunManifest:
    """Everything that produced a run (never keys), plus its ``config_hash``.

    ``corpus`` may be the facts of a corpus read through its case index (a shard builds only
    its share): they give the same corpus hash, file hashes, judge rubric hashes and scorer
    names as the loaded cases, so the manifest, and its ``config_hash``, are the same."""
    system = suite.config.system
    if judge_rubrics is None:
        judge_rubrics = {
            path: digest
            for scorers in _scorer_lists(corpus)
            for scorer in scorers
            if scorer.tier == 3
            for path, digest in scorer.file_hashes.items()
        }
    template_hash = _sha(
        canonical_json({"system": suite.system_prompt, "user": system.user_template})
    )
    judge = suite.config.judge
    endpoint = system.effective_endpoint()  # what make_provider connects to and the cache keys on
    git, clients = _host_facts(suite.root)
    manifest: dict[str, Any] = {
        "version": MANIFEST_VERSION,
        "suite": suite.config.suite,
        "kind": suite.config.kind,  # "live": reported only, never promoted or gated
        "provider": {
            "name": system.provider,
            # The effective endpoint: base_url, else OPENAI_BASE_URL where the official client
            # reads it, else the OpenAI API; a password in the URL is a key, never recorded.
            # Where it came from is recorded, not hashed, under requests.base_url_from: the same
            # endpoint named by the config or by the environment gives the same answers.
            "base_url": endpoint.recorded,
            "function": system.function,
            "simulator": system.provider == "demo" or system.model.startswith("demo-"),
        },
        "system": system_identity(suite),
        "model": {"id": system.model, "snapshot": system.snapshot or system.model},
        "prompt": {
            "version": system.prompt_version
            or (Path(system.prompt).stem if system.prompt else None),
            "template_hash": template_hash,
            "system_prompt_hash": _sha(suite.system_prompt),
            "user_template_hash": _sha(system.user_template),
        },
        "tools": {
            "hash": _sha(canonical_json(suite.tools)) if suite.tools is not None else None,
            "names": sorted(t.get("function", {}).get("name", "?") for t in suite.tools or []),
            "max_steps": system.max_steps,
            "offer": system.offer_tools,
            # `kind: live`: calls to these tools were answered by the live callables, not the
            # fixtures; hashed (a live run is another configuration), absent otherwise
            **({"live": dict(sorted(suite.config.tools.items()))} if _live(suite) else {}),
        },
        "sampling": system.sampling.model_dump(),
        "judge": None
        if judge is None
        else {
            "model": judge.model,
            "snapshot": judge.snapshot or judge.model,
            "provider": judge.provider,
            "rubric_hashes": dict(sorted((judge_rubrics or {}).items())),
        },
        "replays": suite.config.replays,
        "scorer_files": {**corpus.file_hashes, **scorer_module_hashes(suite.config.scorers)},
        "harness": {"evalkit": __version__},
        "corpus": {"hash": corpus.hash, "n_cases": len(corpus.cases)},
        # What the gate decides under (recorded, not hashed: it changes no answer); a promoted
        # baseline pins it, so a pull request cannot loosen the policy it is judged by.
        "gate_policy": gate_policy(suite),
        # Enough to ask this configuration again on new or edited cases (`evalkit gate
        # --rebaseline`): the texts behind the prompt and tool hashes above (never keys).
        "rerun": rerun_config(suite),
        "selection": selection,
        "requests": {**request_settings(suite), "base_url_from": endpoint.source},
        "client": clients,
        "run": {
            "run_id": run_id,
            "label": label,
            "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "concurrency": suite.config.concurrency,
            "cache": suite.config.cache,
            # Where the suite was loaded from (recorded, not hashed): a promotion pins the
            # corpus found there as the exam (evalkit.corpus.pinned, issue 42).
            "config": str(Path(suite.path).resolve()),
            **git,
        },
    }
    if any(scorer.name == "python_tests" for s in _scorer_lists(corpus) for scorer in s):
        # What contained the model's code on this machine (recorded, not hashed): the
        # namespaces, the system-call filter, and which mechanism held the memory and process
        # budget (README "Executable scorers").
        from evalkit.scorers.sandbox import isolation_description

        manifest["sandbox"] = isolation_description()
    manifest["warnings"] = _warnings(suite)
    manifest["config_hash"] = config_hash(manifest)
    return RunManifest.from_stored(manifest)


def system_identity(suite: Suite) -> dict[str, Any]:
    """What identifies the system under test beyond the request: its code, version and index."""
    system = suite.config.system
    function = system.function if system.provider == "python" else None
    code = code_fingerprint(function, system.code_paths, suite.root)
    identity: dict[str, Any] = {
        "code": code,
        "code_fingerprint": fingerprint_digest(code),
        "version": system.version,
        "index": system.index.model_dump() if system.index else None,
    }
    if function is not None:  # what else a python system can read (evalkit.corpus.repo_tree)
        identity["repo"] = repo_tree(suite.root).to_manifest()
    if system.env:
        identity["env"] = env_digests(system.env)
    return identity


def gate_policy(suite: Suite) -> dict[str, Any]:
    """The suite's gate policy as written: ``critical_tags``, ``gate:``, ``budgets:``, tiers."""
    config = suite.config
    return {
        "critical_tags": list(config.critical_tags),
        "gate": dict(config.gate),
        "budgets": dict(config.budgets),
        "tiers": {name: tier.model_dump() for name, tier in sorted(config.tiers.items())},
        # replays: pass rules decide each case's verdict; absent when majority (as before)
        **({} if config.pass_rules.is_default else {"pass_rules": config.pass_rules.model_dump()}),
    }


def rerun_config(suite: Suite) -> dict[str, Any]:
    """The system under test as it asked: prompt texts, tool schemas and the request fields
    that shape an answer, so the same configuration can be run on cases it never saw."""
    system = suite.config.system
    return {
        "system_prompt": suite.system_prompt,
        "user_template": system.user_template,
        "tools": suite.tools,
        "prompt_version": system.prompt_version,
        "prompt": system.prompt,
    }


def request_settings(suite: Suite) -> dict[str, Any]:
    """How requests were made (recorded, not hashed: they change no answer)."""
    config = suite.config
    system = config.system.model_dump()
    keep = ("transport", "timeout_s", "max_retries", "max_retry_after_s", "max_response_mb")
    settings = {
        **{k: system[k] for k in keep if k in system},
        "transport": config.system.resolved_transport(),  # what was used, "auto" resolved
        "concurrency": config.concurrency,
        "rate_limit": config.rate_limit.model_dump() if config.rate_limit else None,
    }
    if config.system.base_urls:
        settings["replicas"] = [
            {"url": strip_userinfo(r.url), "max_in_flight": r.max_in_flight}
            for r in config.system.replicas
        ]
    return settings


def _live(suite: Suite) -> bool:
    return suite.config.kind == "live"


def _warnings(suite: Suite) -> list[str]:
    live = [
        f"LIVE run (kind: live): calls to {', '.join(sorted(suite.config.tools))} were answered "
        "by the live tools, not the fixtures; reported only, never promoted as a baseline or "
        "gated (`evalkit fixtures record RUN` freezes its answers into the cases)"
    ] if _live(suite) else []  # fmt: skip
    judge = suite.config.judge
    if judge is None:
        return live
    from evalkit.scorers.judge_client import model_family  # a judged suite's alone

    family = model_family(judge.model)
    if family == model_family(suite.config.system.model):
        return [
            *live,
            f"judge {judge.model} and the system under test {suite.config.system.model} share "
            f"the model family {family!r}: expect self-preference; prefer another family",
        ]
    return live


def config_hash(manifest: RunManifest | dict[str, Any]) -> str:
    """sha256 over the comparable fields only (run id, time, git state, corpus are excluded),
    as recorded (a manifest being built is still its JSON form)."""
    read = manifest.recorded if isinstance(manifest, RunManifest) else manifest.get
    return hashlib.sha256(
        canonical_json({k: read(k) for k in COMPARABLE_FIELDS}).encode()
    ).hexdigest()


def manifest_diff(a: RunManifest | dict[str, Any], b: RunManifest | dict[str, Any]) -> list[str]:
    """Names of the comparable fields in which two manifests differ.

    Examples:
        >>> manifest_diff({"model": {"id": "a"}}, {"model": {"id": "b"}})
        ['model']
    """
    a, b = as_manifest(a), as_manifest(b)
    return [
        k
        for k in COMPARABLE_FIELDS
        if canonical_json(a.recorded(k)) != canonical_json(b.recorded(k))
    ]


def prefetch_host_facts(where: Path) -> None:
    """Start reading, in a thread, what :func:`build_manifest` records of the machine: the git
    commit and dirtiness of ``where`` (the suite's folder) and the client library versions.

    Two ``git`` processes and the installed packages' metadata: mostly waiting on other
    processes and on files, which ``evalkit run`` otherwise did in turn once the store was
    open, just before the run is recorded. Begun once the corpus is loaded, they run while the
    store opens; the manifest of a suite in ``where`` takes the answers (once), and any other
    build asks as before. Nothing is written and nothing is sent.
    """
    probe = _HostProbe(Path(where))
    probe.start()
    with _probes_lock:  # a probe left by a run refused earlier in this process is replaced
        _probes[probe.where] = probe


class _HostProbe(threading.Thread):
    """:func:`prefetch_host_facts`'s thread: the answers, once it has finished."""

    def __init__(self, where: Path) -> None:
        # Not a daemon: a run refused meanwhile exits once git has answered (at most its
        # timeout), never with a child process left to nobody.
        super().__init__(name="evalkit-host-facts")
        self.where = where
        self.git: dict[str, Any] | None = None
        self.clients: dict[str, str] | None = None

    def run(self) -> None:
        self.git = _read_git_state(self.where)
        self.clients = _read_client_versions()


#: Probes started by prefetch_host_facts and not taken yet, by the folder they read.
_probes: dict[Path, _HostProbe] = {}
_probes_lock = threading.Lock()


def _host_facts(where: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """The git state of ``where`` and the client versions: a prefetch's answers when one was
    started for ``where`` (waiting for it to finish), else read now."""
    with _probes_lock:
        probe = _probes.pop(Path(where), None)
    if probe is not None:
        probe.join()
        if probe.git is not None and probe.clients is not None:
            return probe.git, probe.clients
    return _read_git_state(where), _read_client_versions()


def _read_client_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for package in ("openai", "duckdb", "polars", "httpx", "aiohttp"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    return versions


def _read_git_state(where: Path) -> dict[str, Any]:
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=5
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=where,
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return {"git_sha": None, "git_dirty": None}
    if sha.returncode != 0:
        return {"git_sha": None, "git_dirty": None}
    return {"git_sha": sha.stdout.strip(), "git_dirty": bool(dirty.stdout.strip())}


def _scorer_lists(corpus: Corpus | CorpusFacts) -> Iterable[Sequence[Any]]:
    """Each case's scorers, or (facts as columns) each distinct list of them: the manifest
    reads which scorers and files there are, never which case has them."""
    if isinstance(corpus.cases, FactRows):
        return corpus.cases.scorer_lists()
    return (case.scorers for case in corpus.cases)

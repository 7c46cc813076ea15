"""Who wrote a decision record and from where, and whether the gate may trust it.

Promotions, policy promotions, flake lists, overrides and judge calibrations decide verdicts.
Each is stored with a :class:`Writer`: the person (``--who``) or login, the host, the git commit
and branch, and in CI the provider's event, job and refs read from its environment (GitHub
Actions, GitLab CI, or the generic ``EVALKIT_CI_*`` variables). A record from before evalkit
recorded writers reads as an unknown writer (None).

:func:`why_untrusted` is the one rule, named by the pinned policy's ``gate.trusted_writers``
(default ``[base_branch, person]``):

* ``base_branch``: a CI job that is not a pull request's, on the base branch;
* ``person``: a person's record outside any pull-request job (a laptop, a manually started job);
* ``ref:NAME``: a CI job that is not a pull request's, on branch NAME;
* ``who:NAME``: that person only, outside any pull-request job;
* ``unknown``: records that name no writer (written before evalkit recorded one).

A pull-request job never writes a trusted record (its own overrides, flake lists and
promotions excuse nothing), with one exception the gate checks itself: a promotion whose run
is provably the base branch's (the run's commit is the base branch's, with a clean tree).
Outside a pull-request job every record except one written by a pull-request job is trusted.

Examples:
    >>> pr = current_writer(environ={"EVALKIT_CI_EVENT": "pull_request", "EVALKIT_CI_JOB": "7",
    ...     "EVALKIT_CI_BASE_REF": "main", "EVALKIT_CI_HEAD_REF": "fix"})
    >>> pr.pull_request, pr.job
    (True, '7')
    >>> why_untrusted(pr, pr)
    'written by this pull-request job (ci job 7, fix → main)'
    >>> nightly = Writer(ci="github", event="schedule", ci_ref="refs/heads/main")
    >>> why_untrusted(nightly, pr) is None
    True
"""

from __future__ import annotations

import datetime as dt
import getpass
import json
import os
import socket
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

#: ``gate.trusted_writers`` when the pinned policy names none.
DEFAULT_TRUSTED = ("base_branch", "person")
#: CI events a person starts by hand: a named person there is a person, not the pipeline.
MANUAL_EVENTS = frozenset({"workflow_dispatch", "web", "api", "manual"})
#: The ``why_untrusted`` reason of a record that names no writer.
UNKNOWN_WRITER = "unknown writer (recorded before evalkit recorded who wrote what)"


@dataclass(frozen=True)
class Writer:
    """Who wrote a record and from where (every field optional: what could be read)."""

    who: str | None = None  # the person named with --who
    user: str | None = None  # the login the process ran as
    host: str | None = None
    commit: str | None = None  # git HEAD where it was written
    branch: str | None = None
    dirty: bool | None = None
    ci: str | None = None  # github | gitlab | the EVALKIT_CI_PROVIDER name; None: not CI
    event: str | None = None  # pull_request, push, schedule, merge_request_event ...
    job: str | None = None  # the provider's run/job id
    ci_ref: str | None = None  # GITHUB_REF / CI_COMMIT_REF_NAME
    head_ref: str | None = None  # a pull request's source branch
    base_ref: str | None = None  # a pull request's target branch
    ci_sha: str | None = None
    change: str | None = None  # the pull/merge request's number
    pull_request: bool = False
    written_at: str | None = None

    def to_json(self) -> str:
        """The stored form (JSON, keys sorted, empty fields left out)."""
        return json.dumps({k: v for k, v in asdict(self).items() if v not in (None, False)},
                          sort_keys=True)  # fmt: skip

    @classmethod
    def from_json(cls, text: str | None) -> Writer | None:
        """The writer of a stored record; None when it names none (or is unreadable)."""
        if not text:
            return None
        try:
            data = json.loads(text)
        except ValueError:
            return None
        if not isinstance(data, dict):
            return None
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    @property
    def branch_name(self) -> str | None:
        """The branch a CI job ran on (``refs/heads/`` dropped), else the checkout's."""
        ref = self.ci_ref or self.branch
        return ref.removeprefix("refs/heads/") if ref else None

    def describe(self) -> str:
        """One line for the report: ``ana on laptop (main@3f9a1c2)`` or ``ci job 7 ...``."""
        if self.ci:
            what = f"{self.ci} job {self.job or '?'}"
            if self.pull_request:
                what += f", {self.head_ref or self.ci_ref or '?'} → {self.base_ref or '?'}"
            else:
                what += f", {self.event or '?'} on {self.branch_name or '?'}"
            return f"{self.who} in {what}" if self.who else what
        where = f"{self.branch or '?'}@{(self.commit or '?')[:7]}"
        return f"{self.who or self.user or '?'} on {self.host or '?'} ({where})"


def current_writer(
    who: str | None = None, where: Path | None = None, environ: Mapping[str, str] | None = None
) -> Writer:
    """The writer of a record made now by this process: ``who`` (``--who``), the login, the
    host, git's state at ``where`` (default: the working directory) and the CI context read
    from ``environ`` (default: ``os.environ``)."""
    env = os.environ if environ is None else environ
    ci = ci_context(env)
    commit, branch, dirty = _git_state(where or Path.cwd())
    return Writer(
        who=who.strip() if who and who.strip() else None, user=_login(), host=socket.gethostname(),
        commit=commit, branch=branch, dirty=dirty, **ci,
        written_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    )  # fmt: skip


def ci_context(env: Mapping[str, str]) -> dict[str, Any]:
    """The CI fields of :class:`Writer` from a job's environment (empty outside CI): the
    generic ``EVALKIT_CI_*`` variables first, then GitHub Actions, then GitLab CI."""
    get = lambda name: (env.get(name) or "").strip() or None  # noqa: E731
    if get("EVALKIT_CI_EVENT") or get("EVALKIT_CI_PROVIDER") or get("EVALKIT_CI_JOB"):
        event = get("EVALKIT_CI_EVENT")
        pr = (get("EVALKIT_CI_PULL_REQUEST") or "").lower() in ("1", "true", "yes")
        return {
            "ci": get("EVALKIT_CI_PROVIDER") or "ci", "event": event, "job": get("EVALKIT_CI_JOB"),
            "ci_ref": get("EVALKIT_CI_REF"), "head_ref": get("EVALKIT_CI_HEAD_REF"),
            "base_ref": get("EVALKIT_CI_BASE_REF"), "ci_sha": get("EVALKIT_CI_SHA"),
            "change": get("EVALKIT_CI_CHANGE"),
            "pull_request": pr or _is_pr_event(event) or bool(get("EVALKIT_CI_BASE_REF")),
        }  # fmt: skip
    if get("GITHUB_ACTIONS") == "true" or get("GITHUB_EVENT_NAME"):
        event, ref = get("GITHUB_EVENT_NAME"), get("GITHUB_REF")
        change = ref.split("/")[2] if ref and ref.startswith("refs/pull/") else None
        job = get("GITHUB_RUN_ID")
        return {
            "ci": "github", "event": event,
            "job": f"{job}/{get('GITHUB_JOB')}" if job and get("GITHUB_JOB") else job,
            "ci_ref": ref, "head_ref": get("GITHUB_HEAD_REF"), "base_ref": get("GITHUB_BASE_REF"),
            "ci_sha": get("GITHUB_SHA"), "change": change,
            "pull_request": _is_pr_event(event) or bool(get("GITHUB_BASE_REF")),
        }  # fmt: skip
    if get("GITLAB_CI") == "true" or get("CI_PIPELINE_SOURCE"):
        event = get("CI_PIPELINE_SOURCE")
        return {
            "ci": "gitlab", "event": event, "job": get("CI_JOB_ID"),
            "ci_ref": get("CI_COMMIT_REF_NAME"),
            "head_ref": get("CI_MERGE_REQUEST_SOURCE_BRANCH_NAME"),
            "base_ref": get("CI_MERGE_REQUEST_TARGET_BRANCH_NAME"),
            "ci_sha": get("CI_COMMIT_SHA"), "change": get("CI_MERGE_REQUEST_IID"),
            "pull_request": event == "merge_request_event" or bool(get("CI_MERGE_REQUEST_IID")),
        }  # fmt: skip
    return {}


def _is_pr_event(event: str | None) -> bool:
    return event is not None and (
        event.startswith("pull_request") or event == "merge_request_event"
    )


def trusted_rules(policy: Mapping[str, Any] | None) -> tuple[str, ...]:
    """``gate.trusted_writers`` of a policy in its manifest form (the default without one).

    Examples:
        >>> trusted_rules({"gate": {"trusted_writers": ["who:ana"]}})
        ('who:ana',)
        >>> trusted_rules(None)
        ('base_branch', 'person')
    """
    rules = ((policy or {}).get("gate") or {}).get("trusted_writers")
    return tuple(rules) if rules is not None else DEFAULT_TRUSTED


def same_job(writer: Writer, context: Writer) -> bool:
    """Whether ``writer`` is the pull-request job ``context`` (the same job, or the same
    pull request's ref)."""
    if not context.pull_request or not writer.ci:
        return False
    if writer.job and writer.job == context.job:
        return True
    if not writer.pull_request:
        return False
    same = [(writer.change, context.change), (writer.head_ref, context.head_ref)]
    return any(a is not None and a == b for a, b in same) or (
        writer.ci_ref is not None and writer.ci_ref == context.ci_ref
    )


def why_untrusted(
    writer: Writer | None, context: Writer, rules: Sequence[str] = DEFAULT_TRUSTED
) -> str | None:
    """Why the gate running in ``context`` may not trust a record ``writer`` wrote under the
    pinned ``rules`` (``gate.trusted_writers``); None: it may."""
    if writer is None:
        return None if "unknown" in rules or not context.pull_request else UNKNOWN_WRITER
    if context.pull_request and same_job(writer, context):
        return f"written by this pull-request job ({writer.describe()})"
    if writer.pull_request:
        return f"written by a pull-request job ({writer.describe()})"
    if not context.pull_request:
        return None  # outside a pull-request job: everything a pull request did not write
    if writer.ci and writer.event not in MANUAL_EVENTS:  # a pipeline, not a person
        branch, base = writer.branch_name, context.base_ref
        if "base_branch" in rules and branch is not None and branch == base:
            return None
        if branch is not None and f"ref:{branch}" in rules:
            return None
        return f"written by a CI job on {branch or 'an unknown branch'}, not the base branch"
    person = writer.who or (None if writer.ci else writer.user)
    if person and ("person" in rules or f"who:{person}" in rules):
        return None
    named = f"written by {person}" if person else "written by no named person"
    return f"{named}, not a trusted writer ({', '.join(rules) or 'none'})"


def base_commit(context: Writer, where: Path | None = None) -> str | None:
    """The commit of the pull request's base branch as this checkout knows it
    (``EVALKIT_CI_BASE_SHA``, else ``origin/<base>``, else ``<base>``); None outside one."""
    if not context.pull_request or not context.base_ref:
        return None
    given = (os.environ.get("EVALKIT_CI_BASE_SHA") or "").strip()
    if given:
        return given
    for ref in (f"refs/remotes/origin/{context.base_ref}", f"refs/heads/{context.base_ref}"):
        found = _git(where or Path.cwd(), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
        if found:
            return found
    return None


def _login() -> str | None:
    try:
        return getpass.getuser()
    except (OSError, KeyError, ImportError):
        return None


def _git_state(where: Path) -> tuple[str | None, str | None, bool | None]:
    commit = _git(where, "rev-parse", "HEAD")
    if commit is None:
        return None, None, None
    branch = _git(where, "rev-parse", "--abbrev-ref", "HEAD")
    status = _git(where, "status", "--porcelain", "--untracked-files=no", empty_ok=True)
    return commit, (None if branch == "HEAD" else branch), (None if status is None else
                                                            bool(status))  # fmt: skip


def _git(where: Path, *args: str, empty_ok: bool = False) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=where, capture_output=True, text=True,
                              timeout=10)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    out = done.stdout.strip()
    return out if out or empty_ok else None

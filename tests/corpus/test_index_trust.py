"""A case index that git tracks is never read (evalkit.corpus.index_trust): an entry's list of
cases is not derived again from its file, so a forged entry committed by a pull request could
leave a case out of every shard. A directory git tracks a file in is treated as absent (the
scan makes its entries in a private directory, and says so on stderr); an untracked one is
read as before; outside a repository git is not run at all. Counts, never timers."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest
from test_case_index import _generated

from evalkit.corpus import case_facts, index_trust
from evalkit.corpus.case_facts import scan_corpus
from evalkit.corpus.case_index import CaseIndex, FileFacts
from evalkit.corpus.cases import load_corpus

INDEX = Path(".evalkit") / "case-index"


def _git(where: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=where, check=True, capture_output=True, text=True,
    )  # fmt: skip
    return done.stdout


def _forge(root: Path) -> tuple[str, Path]:
    """Warm ``root``'s index, then rewrite one file's entry without its first case: intact
    (its own sha256), of the file's exact bytes and of this reader. The left-out case's id
    and the entry's path."""
    scan_corpus(root)
    index = CaseIndex(root / INDEX, case_facts._reader_fingerprint())
    rel = "cases/gen-0.yaml"
    sha = hashlib.sha256((root / rel).read_bytes()).hexdigest()
    entry = index.read(rel, sha, sealed=False)
    assert entry is not None and len(entry.cases) > 1
    index.write(FileFacts(rel, sha, entry.sealed, entry.sliceable, entry.cases[1:]))
    return entry.cases[0].id, index.entry_path(rel)


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git repository whose ``corpus/`` (60 cases in 3 files) is committed; the working
    directory is the repository's top."""
    top = tmp_path / "repo"
    _generated(top / "corpus", n=60)
    _git(top, "init", "-q")
    _git(top, "add", "corpus")
    _git(top, "commit", "-q", "-m", "corpus")
    monkeypatch.chdir(top)
    return top


def test_a_forged_entry_git_tracks_is_not_read(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The pull request's entry (force-added past the directory's .gitignore) leaves a case
    out; the scan reads no entry of that directory, makes its own in a private one, and the
    left-out case is there: a cold shard builds it."""
    root = repo / "corpus"
    omitted, forged = _forge(root)
    _git(repo, "add", "-f", str(forged.relative_to(repo)))
    _git(repo, "commit", "-q", "-m", "a forged case index entry")
    capsys.readouterr()
    forged_bytes = forged.read_bytes()

    facts = scan_corpus(root, index_only=True)
    counts = facts.counts
    assert (counts.entries_used, counts.files_parsed, counts.entries_written) == (0, 3, 3)
    assert counts.cases_indexed == 60 and counts.cases_built == 0
    assert omitted in {c.id for c in facts.cases}
    assert facts.hash == load_corpus(root).hash
    built = facts.load({omitted}).cases
    assert [c.id for c in built] == [omitted] and counts.cases_built == 1
    assert facts.builder is not None
    private = facts.builder.index.directory
    assert not private.is_relative_to(repo)
    assert forged.read_bytes() == forged_bytes  # the tracked directory is not written to
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(
        "evalkit: case index under corpus/.evalkit/case-index is tracked by git (1 files, e.g. "
    )
    assert lines[0].endswith(
        f"; not trusted, rebuilt privately in {private} (removed at exit; "
        "`git rm -r corpus/.evalkit/case-index`, a cache, to use one again)"
    )

    again = scan_corpus(root, index_only=True)  # the same private directory, warm now
    assert again.builder is not None and again.builder.index.directory == private
    assert (again.counts.entries_used, again.counts.files_parsed) == (3, 0)
    assert omitted in {c.id for c in again.cases}
    assert capsys.readouterr().err == ""  # said once per process


def test_a_directory_git_tracks_any_file_in_is_not_read(repo: Path) -> None:
    """Only the directory's .gitignore committed (its entries made on this machine): git
    tracks a file there, so none of its entries is read either."""
    root = repo / "corpus"
    scan_corpus(root)
    _git(repo, "add", "-f", "corpus/.evalkit/case-index/.gitignore")
    facts = scan_corpus(root)  # staged is enough: git tracks it
    assert (facts.counts.entries_used, facts.counts.files_parsed) == (0, 3)


def test_an_entry_git_does_not_track_is_read_as_before(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same forged entry, made on this machine and not committed: read (the index is a
    cache of this machine's; every case built from it is still checked against its file)."""
    root = repo / "corpus"
    omitted, _ = _forge(root)
    assert _git(repo, "ls-files", "corpus/.evalkit") == ""
    capsys.readouterr()
    facts = scan_corpus(root, index_only=True)
    assert (facts.counts.entries_used, facts.counts.files_parsed) == (3, 0)
    assert omitted not in {c.id for c in facts.cases}
    assert facts.builder is not None and facts.builder.index.directory == root / INDEX
    assert capsys.readouterr().err == ""


def test_outside_a_repository_git_is_not_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _generated(tmp_path / "corpus", n=60)
    scan_corpus(root)
    calls: list[object] = []
    monkeypatch.setattr(index_trust.subprocess, "run", lambda *a, **k: calls.append(a))
    facts = scan_corpus(root, index_only=True)
    assert (facts.counts.entries_used, facts.counts.files_parsed) == (3, 0)
    assert calls == [] and capsys.readouterr().err == ""


def test_no_git_installed_is_nothing_tracked(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = repo / "corpus"
    scan_corpus(root)
    _git(repo, "add", "-f", "corpus/.evalkit")
    monkeypatch.setenv("PATH", str(repo / "no-such-bin"))
    facts = scan_corpus(root)
    assert (facts.counts.entries_used, facts.counts.files_parsed) == (3, 0)


def test_a_repository_git_cannot_list_is_not_trusted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A ``.git`` git cannot read: whether the entries are tracked cannot be checked, so they
    are not read (a check that cannot be made does not pass)."""
    root = _generated(tmp_path / "corpus", n=60)
    scan_corpus(root)
    (tmp_path / ".git").write_text("gitdir: /nonexistent/evalkit-test\n")
    facts = scan_corpus(root)
    assert (facts.counts.entries_used, facts.counts.files_parsed) == (0, 3)
    err = capsys.readouterr().err
    assert "could not be checked with git ls-files" in err and "not trusted" in err


def test_a_project_evalkit_init_writes_ignores_the_case_index(tmp_path: Path) -> None:
    """Before any scan made the directory (and its own ``.gitignore``): the project's ignores."""
    from evalkit.cli.init import project_files

    for rel, text in project_files().items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    _git(tmp_path, "init", "-q")
    entry = ".evalkit/case-index/0123.json"
    assert _git(tmp_path, "check-ignore", "--no-index", entry).strip() == entry

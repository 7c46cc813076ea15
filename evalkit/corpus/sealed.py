"""The sealed slice rotates: a reproducible share of the corpus is held out in ``sealed/``.

`sealed_sample` picks which cases are sealed from the seed alone: per primary tag (a case's
first tag), the ``share`` of its eligible cases whose ``sha256(seed, id)`` ranks lowest. The same
seed on the same corpus always seals the same cases, whatever is sealed now and however the
files are ordered, and a case added later moves few others. must_pass cases and drafts are
never sealed (must_pass is absolute in the gate; a draft is never gated anyway).

`plan_rotation` says which cases move, `apply_rotation` moves their YAML text: each case's
block (with the comment lines directly above it) is cut from ``cases/F.yaml`` and appended to
``sealed/F.yaml``, and back, so a round trip returns every case to the file it came from, its
text (and so its hash) unchanged. A file left without cases is removed.

Examples:
    >>> from types import SimpleNamespace as NS
    >>> cases = [NS(id=f"b{i}", tags=("billing",), criticality="normal", review=None)
    ...          for i in range(10)]
    >>> sorted(sealed_sample(cases, 0.2, seed=1)) == sorted(sealed_sample(cases[::-1], 0.2, 1))
    True
    >>> len(sealed_sample(cases, 0.2, seed=1))
    2
"""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from evalkit.corpus.cases import CASE_GLOBS, MAX_CASE_FILE_BYTES
from evalkit.corpus.yaml_files import find_yaml_files, read_yaml_file
from evalkit.errors import ConfigError, CorpusError

LIVE, SEALED = "cases", "sealed"


class _CaseLike(Protocol):  # what sampling reads of evalkit.corpus.cases.Case
    # Read-only properties: a frozen Case's tuple of tags then matches Sequence[str] (a plain
    # attribute would be settable, so invariant).
    @property
    def id(self) -> str: ...
    @property
    def tags(self) -> Sequence[str]: ...
    @property
    def criticality(self) -> str: ...
    @property
    def review(self) -> Any: ...


def parse_share(text: str | float) -> float:
    """``10%``, ``0.1`` or ``10`` (a percentage when above 1) as a share in (0, 1).

    Raises:
        ConfigError: not a number, or outside (0, 100%).

    Examples:
        >>> parse_share("10%"), parse_share("0.25"), parse_share(5)
        (0.1, 0.25, 0.05)
    """
    raw = str(text).strip()
    try:
        value = float(raw.removesuffix("%"))
    except ValueError:
        raise ConfigError(f"--share {raw}: not a share; write 10% or 0.1") from None
    share = value / 100 if raw.endswith("%") or value > 1 else value
    if not 0 < share < 1:
        raise ConfigError(f"--share {raw}: the sealed share must be above 0 and below 100%")
    return share


def _rank(seed: int, case_id: str) -> str:
    return hashlib.sha256(f"{seed}\0{case_id}".encode()).hexdigest()


def sealed_sample(cases: Iterable[_CaseLike], share: float, seed: int) -> frozenset[str]:
    """The ids sealed at ``share`` under ``seed``: per primary tag, round(share × n) of its
    eligible cases (at least one case stays live in every stratum)."""
    strata: dict[str, list[str]] = defaultdict(list)
    for case in cases:
        if case.criticality == "must_pass" or case.review == "draft":
            continue
        strata[case.tags[0] if case.tags else ""].append(case.id)
    chosen: set[str] = set()
    for ids in strata.values():
        k = min(math.floor(share * len(ids) + 0.5), len(ids) - 1)
        chosen.update(sorted(ids, key=lambda i: _rank(seed, i))[: max(k, 0)])
    return frozenset(chosen)


@dataclass(frozen=True)
class Move:
    """One case's YAML block moving between ``cases/`` and ``sealed/`` (paths relative to the
    corpus root)."""

    case_id: str
    source: str
    target: str

    @property
    def sealing(self) -> bool:
        return self.target.startswith(f"{SEALED}/")


@dataclass(frozen=True)
class Rotation:
    """What `plan_rotation` found: the target sealed set and the moves that reach it."""

    share: float
    seed: int
    sealed: tuple[str, ...]  # after the rotation, sorted
    moves: tuple[Move, ...]

    @property
    def n_sealing(self) -> int:
        return sum(m.sealing for m in self.moves)

    @property
    def n_unsealing(self) -> int:
        return len(self.moves) - self.n_sealing

    def summary(self) -> str:
        """One line for the person.

        Examples:
            >>> moved = (Move("a", "cases/x.yaml", "sealed/x.yaml"),)
            >>> Rotation(0.1, 7, ("a", "b"), moved).summary()
            'seed 7, share 10%: 2 cases sealed; 1 moved to sealed/, 0 back to cases/'
        """
        return (
            f"seed {self.seed}, share {100 * self.share:g}%: {len(self.sealed)} cases sealed; "
            f"{self.n_sealing} moved to {SEALED}/, {self.n_unsealing} back to {LIVE}/"
        )


@dataclass(frozen=True)
class _Block:
    case_id: str
    start: int  # first line (0-based) of its text, comments above it included
    end: int  # one past its last line


def _blocks(path: Path, rel: str) -> tuple[list[str], list[_Block]]:
    """A case file's lines and each case's line span."""
    data, node = read_yaml_file(path, rel, MAX_CASE_FILE_BYTES)
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    if data is None:
        return lines, []
    if not isinstance(data, list):
        raise CorpusError("a case file must be a YAML list of cases", path=rel, line=1)
    starts: list[tuple[str, int]] = []
    for raw, item in zip(data, node.value, strict=True):
        line = item.start_mark.line
        if not isinstance(raw, dict) or "id" not in raw:
            raise CorpusError("a case without an id cannot be moved", path=rel, line=line + 1)
        if starts and starts[-1][1] >= line:
            raise CorpusError(
                "two cases start on one line: put each on its own lines to rotate them",
                path=rel, line=line + 1, case_id=str(raw["id"]),
            )  # fmt: skip
        starts.append((str(raw["id"]), line))
    # The dash opens the block; comment lines right above it travel with it (above the first
    # case they are the file's header, and stay).
    heads = []
    for n, (_, line) in enumerate(starts):
        head = line
        while n and head > 0 and lines[head - 1].lstrip().startswith("#"):
            head -= 1
        heads.append(head)
    ends = [*heads[1:], len(lines)]
    blocks = [_Block(i, h, e) for (i, _), h, e in zip(starts, heads, ends, strict=True)]
    return lines, blocks


def _case_files(root: Path) -> dict[str, Path]:
    """Every case file under cases/ and sealed/, by path relative to the root."""
    files = {}
    for directory in (LIVE, SEALED):
        for path in find_yaml_files(root / directory, root, CASE_GLOBS):
            files[path.relative_to(root).as_posix()] = path
    return files


def _counterpart(rel: str) -> str:
    top, _, rest = rel.partition("/")
    return f"{SEALED if top == LIVE else LIVE}/{rest}"


def plan_rotation(
    root: str | Path, cases: Sequence[_CaseLike], share: float, seed: int
) -> Rotation:
    """The moves that make ``sealed/`` hold exactly `sealed_sample` of ``cases`` (every case
    of the corpus, sealed ones included: ``load_corpus(root, sealed=True).cases``).

    Raises:
        CorpusError: a case file whose cases cannot be cut apart line by line.
    """
    root = Path(root).resolve()
    target = sealed_sample(cases, share, seed)
    moves = []
    for rel, path in sorted(_case_files(root).items()):
        in_sealed = rel.startswith(f"{SEALED}/")
        for block in _blocks(path, rel)[1]:
            if (block.case_id in target) != in_sealed:
                moves.append(Move(block.case_id, rel, _counterpart(rel)))
    return Rotation(share, seed, tuple(sorted(target)), tuple(moves))


def apply_rotation(root: str | Path, rotation: Rotation) -> None:
    """Move each case's YAML text as `plan_rotation` planned (plan and apply on one checkout).

    Every file is rewritten whole after all blocks are cut, so a failure leaves each file
    either as it was or as it should be.
    """
    root = Path(root).resolve()
    by_source: dict[str, set[str]] = defaultdict(set)
    for move in rotation.moves:
        by_source[move.source].add(move.case_id)
    kept: dict[str, str] = {}
    appended: dict[str, list[str]] = defaultdict(list)
    for rel, ids in sorted(by_source.items()):
        lines, blocks = _blocks(root / rel, rel)
        cut = [b for b in blocks if b.case_id in ids]
        if len(cut) != len(ids):
            missing = sorted(ids - {b.case_id for b in cut})
            raise CorpusError(
                "case not found: plan the rotation again", path=rel, case_id=missing[0]
            )
        drop = {n for b in cut for n in range(b.start, b.end)}
        kept[rel] = "".join(line for n, line in enumerate(lines) if n not in drop)
        for b in cut:
            text = "".join(lines[b.start : b.end]).rstrip("\n") + "\n"
            appended[_counterpart(rel)].append(text)
    writes: dict[str, str] = dict(kept)
    for rel, texts in appended.items():
        base = writes.get(rel)
        if base is None:
            path = root / rel
            base = path.read_text(encoding="utf-8") if path.exists() else _header(rel)
        base = base.rstrip("\n") + "\n\n" if base.strip() else base
        writes[rel] = base + "\n".join(texts)
    for rel, text in sorted(writes.items()):
        path = root / rel
        if not _has_cases(text):
            path.unlink(missing_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def _header(rel: str) -> str:
    if rel.startswith(f"{SEALED}/"):
        return "# Sealed slice (evalkit cases seal): reported, never gated; runs with --sealed.\n"
    return ""


def _has_cases(text: str) -> bool:
    return any(line.lstrip().startswith("- ") for line in text.splitlines())

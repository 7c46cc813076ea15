"""The sealed slice rotates (issue 24 item 4): ``evalkit cases seal --share S --seed N``
seals the same cases for the same seed whatever was sealed before, moves case YAML text between
cases/ and sealed/ without changing it, never seals must_pass cases or drafts, and refuses a
rotation that would leave a critical tag too small to gate."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace as NS

import pytest
from projects import make_project

from evalkit.cli import main
from evalkit.corpus.cases import load_corpus
from evalkit.corpus.sealed import (
    _blocks,
    apply_rotation,
    parse_share,
    plan_rotation,
    sealed_sample,
)
from evalkit.errors import ConfigError, CorpusError

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    root = tmp_path / "corpus"
    make_project(root, demo=True)
    return root


def _rotate(root: Path, share: float, seed: int) -> None:
    apply_rotation(root, plan_rotation(root, load_corpus(root, sealed=True).cases, share, seed))


def _sealed_ids(root: Path) -> set[str]:
    return {c.id for c in load_corpus(root, sealed=True).cases if c.sealed}


def _texts(root: Path) -> dict[str, str]:
    """Each case's YAML text, wherever it lives (comment lines above it included)."""
    out = {}
    for path in sorted([*root.glob("cases/*.yaml"), *root.glob("sealed/*.yaml")]):
        lines, blocks = _blocks(path, path.name)
        for b in blocks:
            out[b.case_id] = "".join(lines[b.start : b.end]).strip("\n")
    return out


def test_the_same_seed_seals_the_same_cases_whatever_was_sealed_before(tmp_path: Path) -> None:
    firsts = []
    for name, before in (("a", None), ("b", 4), ("c", 11)):
        root = tmp_path / name
        make_project(root, demo=True)
        if before is not None:
            _rotate(root, 0.2, before)  # another seed first: a different starting point
        _rotate(root, 0.1, 3)
        firsts.append(_sealed_ids(root))
    assert firsts[0] == firsts[1] == firsts[2]
    root = tmp_path / "a"
    _rotate(root, 0.1, 4)
    assert _sealed_ids(root) != firsts[0]  # another seed, another sample


def test_rotating_moves_text_unchanged_and_back_and_hashes_stay(corpus: Path) -> None:
    hashes = {c.id: c.hash for c in load_corpus(corpus, sealed=True).cases}
    texts = _texts(corpus)
    plan = plan_rotation(corpus, load_corpus(corpus, sealed=True).cases, 0.1, 3)
    assert plan.n_sealing and plan.n_unsealing  # the demo's own sealed cases rotate back
    apply_rotation(corpus, plan)
    after = load_corpus(corpus, sealed=True)
    assert sorted(c.id for c in after.cases if c.sealed) == list(plan.sealed)
    assert {c.id: c.hash for c in after.cases} == hashes
    for move in plan.moves:  # the block moved to the file of the same name on the other side
        source = next(c.source for c in after.cases if c.id == move.case_id)
        assert source.startswith(move.target + ":")
    _rotate(corpus, 0.1, 4)
    _rotate(corpus, 0.1, 3)
    assert _sealed_ids(corpus) == set(plan.sealed)
    assert _texts(corpus) == texts  # each case's text, comments included, byte for byte
    assert not plan_rotation(corpus, load_corpus(corpus, sealed=True).cases, 0.1, 3).moves
    header = (corpus / "cases" / "billing.yaml").read_text().splitlines()[0]
    assert header.startswith("# Billing")  # the file's header stays with the file


def test_must_pass_cases_and_drafts_are_never_sealed_and_each_tag_keeps_its_share() -> None:
    cases = [NS(id=f"b{i}", tags=("billing",), criticality="normal", review=None)
             for i in range(40)]  # fmt: skip
    cases += [NS(id=f"m{i}", tags=("billing",), criticality="must_pass", review=None)
              for i in range(10)]  # fmt: skip
    cases += [NS(id=f"d{i}", tags=("tone",), criticality="normal", review="draft")
              for i in range(10)]  # fmt: skip
    cases += [NS(id=f"t{i}", tags=("tone", "billing"), criticality="normal", review=None)
              for i in range(20)]  # fmt: skip
    chosen = sealed_sample(cases, 0.25, seed=9)
    assert not {i for i in chosen if i[0] in "md"}
    assert sum(i.startswith("b") for i in chosen) == 10  # 25% of 40, by primary tag
    assert sum(i.startswith("t") for i in chosen) == 5
    assert sealed_sample(cases, 0.25, seed=9) == chosen
    assert sealed_sample(list(reversed(cases)), 0.25, seed=9) == chosen  # file order: no matter


def test_shares_parse_and_bad_ones_are_refused() -> None:
    assert parse_share("10%") == pytest.approx(0.1) and parse_share("0.3") == 0.3
    for bad in ("0", "100%", "ten", "-5%"):
        with pytest.raises(ConfigError, match="--share"):
            parse_share(bad)


def test_cases_sharing_a_line_cannot_be_cut_apart(corpus: Path) -> None:
    path = corpus / "cases" / "flow.yaml"
    case = "{id: f-%d, input: {messages: [{role: user, content: hi}]}, expect: [{contains: a}]}"
    path.write_text(f"[{case % 1}, {case % 2}]\n")
    with pytest.raises(CorpusError, match=r"cases/flow.yaml:1: case f-2: two cases start"):
        plan_rotation(corpus, load_corpus(corpus, sealed=True).cases, 0.5, 1)


def test_the_command_rotates_dry_runs_and_refuses_a_share_that_starves_a_critical_tag(
    corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = str(corpus / "evalkit.yaml")
    before = _texts(corpus), _sealed_ids(corpus)
    assert main(["cases", "seal", "--config", config, "--share", "10%", "--seed", "3",
                 "--dry-run"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "seed 3, share 10%: " in out and "dry run: nothing moved" in out
    assert (_texts(corpus), _sealed_ids(corpus)) == before
    assert main(["cases", "seal", "--config", config, "--share", "60%", "--seed", "3"]) == 2
    assert "critical tag" in capsys.readouterr().err
    assert (_texts(corpus), _sealed_ids(corpus)) == before  # refused: nothing moved
    assert main(["cases", "seal", "--config", config, "--share", "10%", "--seed", "3"]) == 0
    assert _sealed_ids(corpus) == set(
        plan_rotation(corpus, load_corpus(corpus, sealed=True).cases, 0.1, 3).sealed
    )
    assert main(["cases", "lint", "--config", config, "--sealed"]) == 0

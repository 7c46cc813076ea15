"""The gate policy is checked before any model call, the same way by lint, run and gate."""

from __future__ import annotations

from pathlib import Path

import yaml
from projects import make_project

from evalkit.cli import main

REPO = Path(__file__).resolve().parents[2]


def _suite(tmp_path: Path, **changes: object) -> Path:
    """A copy of the demo suite with its evalkit.yaml changed."""

    root = tmp_path / "corpus"
    make_project(root, demo=True)
    config = yaml.safe_load((root / "evalkit.yaml").read_text())
    config.update(changes)
    (root / "evalkit.yaml").write_text(yaml.safe_dump(config))
    return root / "evalkit.yaml"


def test_lint_exits_2_on_five_critical_tags(tmp_path: Path, capsys) -> None:
    config = _suite(tmp_path, critical_tags=["billing", "injection", "policy", "account", "orders"])
    assert main(["cases", "lint", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "critical_tags lists 5 tags; at most 4" in err and str(config) in err


def test_lint_names_an_unknown_critical_tag_with_a_did_you_mean(tmp_path: Path, capsys) -> None:
    config = _suite(tmp_path, critical_tags=["biling"])
    assert main(["cases", "lint", "--config", str(config)]) == 2
    assert "no case has the tag 'biling'; did you mean 'billing'?" in capsys.readouterr().err


def test_run_refuses_a_bad_policy_before_any_model_call(tmp_path: Path, capsys) -> None:
    config = _suite(tmp_path, critical_tags=["biling"])
    # a base_url nothing listens on: the refusal must come before any request is tried
    args = ["run", "--config", str(config), "--db", str(tmp_path / "x.duckdb"), "--no-progress",
            "--set", "system.base_url=http://127.0.0.1:9/v1"]  # fmt: skip
    assert main(args) == 2
    assert "no case has the tag 'biling'" in capsys.readouterr().err
    assert not (tmp_path / "x.duckdb").exists()


def test_a_tier_run_warns_about_critical_tags_it_cannot_gate(
    tmp_path: Path, demo_server, capsys
) -> None:
    args = ["run", "--config", str(REPO / "corpus" / "evalkit.yaml"), "--tier", "smoke",
            "--db", str(tmp_path / "s.duckdb"), "--no-progress",
            "--set", f"system.base_url={demo_server.base_url}"]  # fmt: skip
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "critical tag 'billing' has 3 case(s) in this selection" in err


def test_the_demo_corpus_policy_passes_lint(capsys) -> None:
    args = ["cases", "lint", "--config", str(REPO / "corpus" / "evalkit.yaml")]
    assert main(args) == 0, capsys.readouterr().err


def test_a_critical_tag_short_only_in_an_incomplete_candidate_says_so() -> None:
    """A candidate holding 5 of the baseline's 10 cases of a critical tag (a shard not merged)
    is refused as incomplete, not told to add cases; a tag the baseline is short of too keeps
    the sizing refusal."""
    import polars as pl
    import pytest

    from evalkit.compare.policy import GatePolicy
    from evalkit.errors import ConfigError

    def tagged(n: int) -> pl.DataFrame:
        return pl.DataFrame({"tags": [["billing"]] * n})

    policy = GatePolicy(critical_tags=("billing",))
    with pytest.raises(ConfigError) as short:
        policy.validate_pair(tagged(10), tagged(5), None, "cand-7")
    assert "10 cases in the baseline but 5 in candidate cand-7" in str(short.value)
    assert "did not run them all" in str(short.value) and "add cases" not in str(short.value)
    with pytest.raises(ConfigError, match="add cases or drop it"):
        policy.validate_pair(tagged(5), tagged(5), None, "cand-7")
    policy.validate_pair(tagged(10), tagged(10), None, "cand-7")  # sized: no refusal
    policy.validate_pair(tagged(10), tagged(5), {"tier": "smoke"}, "cand-7")  # partial: none

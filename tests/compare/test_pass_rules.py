"""Replay pass rules (issue 25 item 4): ``replays.pass_rule`` per suite, tag or case decides
each case's verdict from its replays, the gate's paired statistics use it, the report names it
with pass@k and pass^k per slice, and a judge deciding a critical tag on fewer than 5 replays is
warned about (seed 003)."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import polars as pl
import pytest
from projects import make_project
from synthetic_runs import MANIFEST, C, make_run, write_store

from evalkit.compare.analysis import compare
from evalkit.compare.gate import decide
from evalkit.compare.pass_rules import (
    MAJORITY,
    PassRules,
    parse_rule,
    pass_at_k,
    pass_hat_k,
    replay_slices,
)
from evalkit.compare.pin import gate_pair
from evalkit.compare.policy import GatePolicy, policy_changes
from evalkit.compare.replay_checks import replay_findings
from evalkit.compare.verdicts import verdicts
from evalkit.corpus.manifest import gate_policy
from evalkit.corpus.suite import load_suite
from evalkit.errors import ConfigError
from evalkit.report.build import build_report, to_dict, to_text
from evalkit.report.html import section, to_html
from evalkit.report.markdown import md, to_markdown

REPO = Path(__file__).resolve().parents[2]
K4_OF_5 = PassRules.from_config({"pass_rule": "k_of_n: 4/5"})
#: Hand-built replays (p pass, f fail, e provider error) -> (majority, k_of_n 4/5).
HAND_BUILT = {
    "all-pass": ("ppppp", True, True),
    "one-fail": ("ppppf", True, True),
    "two-fail": ("pppff", True, False),  # 3 of 5: a majority, not 4 of 5
    "three-fail": ("ppfff", False, False),
    "errored-4-of-4": ("ppppe", True, True),  # 4 decided, all pass
    "errored-3-of-4": ("pppfe", True, False),  # 3 of 4 decided: 15 < 16
    "tie": ("ppffe", False, False),  # a tie fails under majority
    "all-errored": ("eeeee", None, None),
}


def _hand_built_run(run_id: str = "r") -> object:
    return make_run(run_id, [C(i, r, ["billing"]) for i, (r, _, _) in HAND_BUILT.items()])


def _passed(frame: pl.DataFrame) -> dict[str, bool | None]:
    return dict(frame.select("case_id", "passed").iter_rows())


# --- the rules themselves -----------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 3, 5, 10])
def test_each_rule_is_its_threshold_on_every_count_of_passes(n: int) -> None:
    for n_pass in range(n + 1):
        n_fail = n - n_pass
        assert MAJORITY.passes(n_pass, n_fail) is (n_pass > n_fail)
        assert parse_rule("all").passes(n_pass, n_fail) is (n_fail == 0)
        assert parse_rule("any").passes(n_pass, n_fail) is (n_pass > 0)
        assert parse_rule("k_of_n: 4/5").passes(n_pass, n_fail) is (5 * n_pass >= 4 * n)
    assert parse_rule("4/5").passes(0, 0) is None


def test_spellings_parse_and_bad_ones_say_what_is_accepted() -> None:
    for spelling in ("k_of_n: 4/5", "k_of_n 4/5", "4/5", {"k_of_n": "4/5"}):
        assert parse_rule(spelling).name == "k_of_n 4/5"
    for bad in ("most", "0/5", "6/5", "k_of_n: 4", {"k": 1}):
        with pytest.raises(ConfigError, match="use majority, all, any or k_of_n"):
            parse_rule(bad)


def test_pass_at_k_and_pass_hat_k_equal_enumerating_every_draw_of_k_replays() -> None:
    for n in range(1, 7):
        for c in range(n + 1):
            replays = [True] * c + [False] * (n - c)
            for k in range(1, n + 1):
                draws = list(itertools.combinations(replays, k))
                assert pass_at_k(n, c, k) == pytest.approx(sum(map(any, draws)) / len(draws))
                assert pass_hat_k(n, c, k) == pytest.approx(sum(map(all, draws)) / len(draws))
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)


# --- verdicts ------------------------------------------------------------------------------


def test_k_of_n_4_of_5_changes_a_case_verdict_exactly_where_it_should() -> None:
    run = _hand_built_run()
    majority = _passed(verdicts(run.outputs, run.scores, run.cases))
    strict = _passed(verdicts(run.outputs, run.scores, run.cases, K4_OF_5))
    assert majority == {i: m for i, (_, m, _) in HAND_BUILT.items()}
    assert strict == {i: k for i, (_, _, k) in HAND_BUILT.items()}
    assert {i for i in majority if majority[i] != strict[i]} == {"two-fail", "errored-3-of-4"}


def test_a_tag_rule_overrides_the_default_the_strictest_tag_wins_and_a_case_rule_wins_all() -> None:
    cases = [
        C("tone-1", "ppppf", ["tone"]),  # all: fails
        C("plain-1", "ppppf", ["other"]),  # default majority: passes
        C("both-1", "ppfff", ["tone", "lenient"]),  # all is stricter than any: fails
        C("lenient-1", "ppfff", ["lenient"]),  # any: passes
        C("own-1", "ppppf", ["tone"]),  # its own rule k_of_n 4/5 beats the tag's all
    ]
    run = make_run("r", cases)
    rules = PassRules.from_config(
        {"tags": {"tone": "all", "lenient": "any"}, "cases": {"own-1": {"k_of_n": "4/5"}}}
    )
    assert _passed(verdicts(run.outputs, run.scores, run.cases, rules)) == {
        "tone-1": False, "plain-1": True, "both-1": False, "lenient-1": True, "own-1": True,
    }  # fmt: skip
    for case in cases:
        one = rules.for_case(case.id, case.tags).passes(
            case.replays.count("p"), case.replays.count("f")
        )
        assert _passed(verdicts(run.outputs, run.scores, run.cases, rules))[case.id] is one
    # Without the cases frame there are no tags: only the default and the case rules apply.
    untagged = _passed(verdicts(run.outputs, run.scores, None, rules))
    assert untagged["tone-1"] is True and untagged["own-1"] is True


# --- the gate's paired statistics ----------------------------------------------------------


def _pair() -> tuple[object, object]:
    """Ten billing cases: the candidate passes 3 of 5 replays where the baseline passed 5."""
    base = make_run("base", [C(f"b{i}", "ppppp", ["billing"]) for i in range(10)], label="base")
    cand = make_run("cand", [C(f"b{i}", "pppff", ["billing"]) for i in range(10)], label="cand")
    return base, cand


def test_the_gate_blocks_under_k_of_n_where_majority_sees_no_flip() -> None:
    base, cand = _pair()
    majority = GatePolicy(critical_tags=("billing",))
    strict = GatePolicy(critical_tags=("billing",), pass_rules=K4_OF_5)
    cmp = compare(base, cand)
    assert decide(cmp.paired, majority).status == "PASSED"
    cmp = compare(base, cand, pass_rules=strict.pass_rules)
    decision = decide(cmp.paired, strict)
    assert decision.status == "BLOCKED"
    (state,) = decision.critical
    assert (state.broken, state.fixed) == (10, 0)


def _replayed(manifest_policy: dict | None) -> dict:
    out = {**MANIFEST, "replays": 5}
    return out | ({"gate_policy": manifest_policy} if manifest_policy else {})


def test_gate_pair_decides_under_the_pinned_rule_and_the_report_names_it(tmp_path: Path) -> None:
    base, cand = _pair()
    pinned = {"critical_tags": ["billing"], "pass_rules": {"pass_rule": "k_of_n: 4/5"}}
    base = make_run("base", [C(f"b{i}", "ppppp", ["billing"]) for i in range(10)],
                    _replayed(pinned), "base")  # fmt: skip
    cand = make_run("cand", [C(f"b{i}", "pppff", ["billing"]) for i in range(10)],
                    _replayed(pinned), "cand")  # fmt: skip
    db = tmp_path / "s.duckdb"
    write_store(db, [base, cand])
    from evalkit.store import open_store

    with open_store(db, write=True) as store:
        cmp, decision = gate_pair(store, "base", "cand", None, with_siblings=False)
    assert decision.status == "BLOCKED"
    assert decision.policy.pass_rules == K4_OF_5
    report = build_report(cmp, decision)
    line = "replays: 5 per case; verdict per case: k_of_n 4/5"
    assert report.replay_line() == line
    assert line in to_text(report).split("Broken")[0]
    assert md(line) in to_markdown(report).split("###")[0]
    assert line in section(report, "decision") and line in to_html(report, charts=False)
    assert "pass@k and pass^k (k = 5)" in to_text(report)
    assert "pass@k and pass^k (k = 5; verdict per case: k_of_n 4/5)" in section(report, "slices")
    assert "| billing | 10 | 100.0% | 100.0% | 100.0% | 0.0% |" in to_markdown(report)
    assert to_dict(report)["replays"]["pass_rule"] == "k_of_n 4/5"
    assert to_dict(report)["decision"]["policy"]["pass_rules"]["pass_rule"] == "k_of_n: 4/5"


def test_one_replay_and_majority_add_nothing_to_the_first_screen() -> None:
    cases = [C(f"b{i}", "p", ["billing"]) for i in range(10)]
    cmp = compare(make_run("b", cases), make_run("c", cases))
    report = build_report(cmp, decide(cmp.paired, GatePolicy()))
    assert report.replay_line() is None and report.replay_slices is None
    assert "verdict per case" not in to_text(report) + to_markdown(report)


def test_pass_at_k_per_slice_counts_only_cases_with_k_decided_replays() -> None:
    run = _hand_built_run()
    table = replay_slices(verdicts(run.outputs, run.scores, run.cases), 5)
    five = [r for _, (r, _, _) in HAND_BUILT.items() if "e" not in r]  # 4 cases, 5 decided each
    row = table.filter(pl.col("slice") == "billing").row(0, named=True)
    assert row["cases"] == len(five)
    assert row["pass_at_k"] == pytest.approx(sum("p" in r for r in five) / len(five))
    assert row["pass_hat_k"] == pytest.approx(sum("f" not in r for r in five) / len(five))


# --- the pin, the config and the judge warning ---------------------------------------------


def test_a_changed_pass_rule_is_a_looser_policy_until_promoted() -> None:
    pinned = {"critical_tags": [], "pass_rules": {"pass_rule": "all"}}
    changes = policy_changes(pinned, {"critical_tags": []})
    assert changes.looser == (
        "replays pass rules all → majority (looser: any change counts: the setting could be "
        "chosen until the gate passes)",
    )
    assert not policy_changes(pinned, dict(pinned)).any


def test_the_config_spells_rules_under_replays_and_the_manifest_pins_them(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    make_project(corpus, demo=True)
    config = corpus / "evalkit.yaml"
    text = config.read_text()
    default = load_suite(config)
    assert "pass_rules" not in gate_policy(default)  # majority: manifests as before
    rules = "replays:\n  n: 5\n  pass_rule: {k_of_n: 4/5}\n  tags: {billing: all}\n"
    config.write_text(re.sub(r"^replays: 1\n", rules, text, flags=re.M))
    suite = load_suite(config)
    assert suite.config.replays == 5
    pinned = gate_policy(suite)["pass_rules"]
    assert PassRules.from_config(pinned).describe() == "k_of_n 4/5 (tag billing: all)"
    config.write_text(re.sub(r"^replays: 1\n", rules.replace("billing: all", "billing: 7/5"),
                             text, flags=re.M))  # fmt: skip
    with pytest.raises(ConfigError, match=r"evalkit\.yaml:\d+: invalid value for 'replays\.tags'"):
        load_suite(config)


def test_a_judge_deciding_a_critical_tag_on_few_replays_is_warned_about() -> None:
    paired = pl.DataFrame({
        "case_id": ["a", "b", "c"], "tags": [["billing"], ["billing"], ["tone"]],
        "sealed": [False, False, False], "cand_judge_level": [4.0, None, 3.0],
    })  # fmt: skip
    policy = GatePolicy(critical_tags=("billing",))
    (finding,) = replay_findings(paired, policy, 3)
    assert finding.severity == "warn" and finding.slice == "billing"
    assert finding.statistic == {"replays": 3, "min_replays": 5, "judged": 1}
    assert "on 3 replays per case (< 5)" in finding.message
    assert replay_findings(paired, policy, 5) == []  # enough replays
    assert replay_findings(paired.drop("cand_judge_level"), policy, 1) == []  # no judge gates
    assert replay_findings(paired, GatePolicy(critical_tags=("tone",)), 3)[0].slice == "tone"


def test_a_k_of_n_rule_on_another_replay_count_says_what_it_needs() -> None:
    paired = pl.DataFrame({"case_id": ["a"], "tags": [["x"]]})
    (note,) = replay_findings(paired, GatePolicy(pass_rules=K4_OF_5), 10)
    assert note.severity == "info" and note.statistic["needed"] == 8
    assert replay_findings(paired, GatePolicy(pass_rules=K4_OF_5), 5) == []

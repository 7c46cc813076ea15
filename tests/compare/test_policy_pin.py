"""The gate policy is pinned with the baseline: how a proposed policy differs from the pin (and
which way), which one the gate decides under, the policy a promotion stores, and the runs
`baseline promote` refuses (issue 22, items 3 and 5)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from synthetic_runs import MANIFEST, OLD_RUNS_DDL, C, make_run, write_store

from evalkit.cli import main
from evalkit.compare.policy import (
    GatePolicy,
    effective_policy,
    load_policy_dict,
    pinned_policy,
    policy_changes,
)
from evalkit.errors import ConfigError
from evalkit.store import open_store

PINNED = {"critical_tags": ["billing"], "gate": {}, "budgets": {}, "tiers": {}}


def _changes(pinned: dict, proposed: dict) -> tuple[tuple[str, ...], tuple[str, ...]]:
    found = policy_changes(pinned, proposed)
    return found.looser, found.stricter


# -- policy_changes: one test per rule family ------------------------------------------------


def test_policies_equal_once_defaults_are_filled_in_are_no_change() -> None:
    written = {"critical_tags": ["policy", "billing"], "gate": {"alpha": 0.05, "tolerance": 0.02,
               "siblings": "block", "max_changed_share": 0.1},
               "budgets": {"mean_latency_ms": 2000}}  # fmt: skip
    full = {"critical_tags": ["billing", "policy"], "gate": {},
            "budgets": {"mean_latency_ms": {"limit": 2000.0, "action": "block"}}}  # fmt: skip
    assert not policy_changes(written, full).any
    assert not policy_changes({}, {"gate": {"alpha": 0.05}}).any
    assert policy_changes({}, {"gate": {"alpha": 0.04}}).any


def test_a_dropped_critical_tag_is_looser_and_an_added_one_stricter() -> None:
    looser, stricter = _changes(PINNED, {"critical_tags": ["policy"]})
    assert looser == ("critical_tags: 'billing' dropped (looser: it no longer blocks)",)
    assert stricter == ("critical_tags: 'policy' added (stricter: it blocks)",)


@pytest.mark.parametrize(
    ("key", "pinned", "proposed"),
    [
        ("alpha", 0.05, 0.01),
        ("tolerance", 0.02, 0.05),
        ("max_error_rate", 0.0, 0.1),
        ("level", 0.95, 0.99),
        ("judge_kappa_min", 0.6, 0.4),
        ("judge_min_labels", 100, 30),
        ("judge_tolerance_levels", 0.5, 1.0),
        ("judge_tolerance_levels", 0.5, None),
        ("max_changed_share", 0.1, 0.5),
        ("siblings", "block", "report"),
    ],
)
def test_each_threshold_loosens_one_way_and_tightens_the_other(
    key: str, pinned: object, proposed: object
) -> None:
    looser, stricter = _changes({"gate": {key: pinned}}, {"gate": {key: proposed}})
    assert stricter == () and len(looser) == 1
    assert looser[0].startswith(f"gate.{key} ") and "(looser: " in looser[0]
    back_looser, back_stricter = _changes({"gate": {key: proposed}}, {"gate": {key: pinned}})
    assert back_looser == () and len(back_stricter) == 1 and "(stricter: " in back_stricter[0]


def test_the_alpha_line_reads_as_the_change_it_is() -> None:
    looser, _ = _changes({"gate": {}}, {"gate": {"alpha": 0.01}})
    assert looser == ("gate.alpha 0.05 → 0.01 (looser: the exact test blocks less)",)
    looser, _ = _changes({"gate": {}}, {"gate": {"judge_tolerance_levels": None}})
    assert looser == (
        "gate.judge_tolerance_levels 0.5 → null (looser: the judge-level rule is off)",
    )


@pytest.mark.parametrize(
    ("key", "pinned", "proposed"),
    [("power", 0.8, 0.9), ("power", 0.8, 0.7), ("bootstrap_iters", 10_000, 20_000),
     ("bootstrap_iters", 10_000, 2_000), ("bootstrap_seed", 0, 7)],
)  # fmt: skip
def test_any_change_to_power_or_the_bootstrap_is_looser(
    key: str, pinned: object, proposed: object
) -> None:
    looser, stricter = _changes({"gate": {key: pinned}}, {"gate": {key: proposed}})
    assert stricter == () and len(looser) == 1
    assert looser[0].startswith(f"gate.{key} {pinned} → {proposed} (looser: any change counts")


def test_budgets_removed_raised_or_warned_are_looser_and_the_reverse_stricter() -> None:
    latency = {"mean_latency_ms": {"limit": 2000, "action": "block"}}
    assert _changes({"budgets": latency}, {"budgets": {}}) == (
        ("budgets.mean_latency_ms removed (looser: it is no longer limited)",),
        (),
    )
    looser, stricter = _changes({"budgets": {}}, {"budgets": latency})
    assert looser == () and stricter[0].startswith("budgets.mean_latency_ms added (stricter")
    looser, stricter = _changes({"budgets": latency}, {"budgets": {"mean_latency_ms": 3000}})
    assert looser == ("budgets.mean_latency_ms.limit 2000 → 3000 (looser: a higher mean passes)",)
    assert _changes({"budgets": {"mean_latency_ms": 3000}}, {"budgets": latency})[0] == ()
    warn = {"mean_latency_ms": {"limit": 2000, "action": "warn"}}
    looser, stricter = _changes({"budgets": latency}, {"budgets": warn})
    assert looser == (
        "budgets.mean_latency_ms.action block → warn (looser: an overrun only warns)",
    )
    assert _changes({"budgets": warn}, {"budgets": latency}) == (
        (),
        ("budgets.mean_latency_ms.action warn → block (stricter: an overrun blocks)",),
    )
    # a tokens budget is another budget: adding one while dropping latency is still looser
    tokens = {"mean_total_tokens": 500}
    looser, stricter = _changes({"budgets": latency}, {"budgets": tokens})
    assert len(looser) == 1 and len(stricter) == 1


def test_a_tier_added_removed_or_redefined_is_looser_and_an_identical_one_no_change() -> None:
    smoke = {"tags": ["smoke"], "exclude_tags": [], "skip_scorers": [], "sealed": False}
    wider = {**smoke, "tags": ["smoke", "fast"]}
    assert _changes({"tiers": {"smoke": smoke}}, {"tiers": {"smoke": dict(smoke)}}) == ((), ())
    assert _changes({"tiers": {}}, {"tiers": {"smoke": smoke}})[0][0].startswith(
        "tiers.smoke added (looser"
    )
    assert _changes({"tiers": {"smoke": smoke}}, {})[0][0].startswith("tiers.smoke removed")
    (line,), stricter = _changes({"tiers": {"smoke": smoke}}, {"tiers": {"smoke": wider}})
    assert stricter == () and line.startswith("tiers.smoke redefined: tags ['smoke'] → ")


def test_a_policy_that_does_not_validate_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"the proposed policy: gate\.alhpa: unknown key"):
        policy_changes(PINNED, {"gate": {"alhpa": 0.01}})


def test_the_new_gate_keys_are_validated_like_the_others() -> None:
    policy = GatePolicy.from_suite([], {"max_changed_share": 0.25, "siblings": "block"})
    assert (policy.max_changed_share, policy.siblings) == (0.25, "block")
    assert (GatePolicy().max_changed_share, GatePolicy().siblings) == (0.1, "block")
    with pytest.raises(ConfigError, match=r"gate\.max_changed_share: invalid"):
        GatePolicy.from_suite([], {"max_changed_share": 1.5})
    with pytest.raises(ConfigError, match=r"gate\.siblings: invalid"):
        GatePolicy.from_suite([], {"siblings": "always"})
    pinned = GatePolicy.from_manifest({"critical_tags": ["billing"], "gate": {"alpha": 0.01},
                                       "budgets": {"mean_cost_usd": 0.1}, "tiers": {}})  # fmt: skip
    assert pinned.critical_tags == ("billing",) and pinned.alpha == 0.01
    assert pinned.budgets[0].metric == "mean_cost_usd"


# -- effective_policy ------------------------------------------------------------------------


def test_a_stricter_proposed_policy_applies_at_once() -> None:
    proposed = {"critical_tags": ["billing", "policy"], "gate": {"alpha": 0.1}}
    policy, changes = effective_policy(PINNED, proposed, "pr/evalkit.yaml")
    assert policy.critical_tags == ("billing", "policy") and policy.alpha == 0.1
    assert changes.looser == () and len(changes.stricter) == 2


def test_a_looser_proposed_policy_leaves_the_pinned_one_in_force_and_lists_the_changes() -> None:
    proposed = {"critical_tags": ["billing", "policy"], "gate": {"alpha": 0.01}}  # mixed
    policy, changes = effective_policy(PINNED, proposed, "pr/evalkit.yaml")
    assert policy == GatePolicy.from_manifest(PINNED)
    assert policy.critical_tags == ("billing",) and policy.alpha == 0.05
    assert changes.looser == ("gate.alpha 0.05 → 0.01 (looser: the exact test blocks less)",)
    assert changes.stricter == ("critical_tags: 'policy' added (stricter: it blocks)",)
    dropped, changes = effective_policy(PINNED, {"critical_tags": []})
    assert dropped.critical_tags == ("billing",) and changes.looser


def test_without_a_pin_the_proposed_policy_applies_and_nothing_changed() -> None:
    policy, changes = effective_policy(None, {"gate": {"alpha": 0.01}}, "pr/evalkit.yaml")
    assert policy.alpha == 0.01 and not changes.any
    policy, changes = effective_policy(None, None)
    assert policy == GatePolicy() and not changes.any
    policy, changes = effective_policy(PINNED, None)
    assert policy.critical_tags == ("billing",) and not changes.any
    with pytest.raises(ConfigError, match=r"^pr/evalkit\.yaml: gate\.alpha: invalid"):
        effective_policy(None, {"gate": {"alpha": 2.0}}, "pr/evalkit.yaml")


# -- the store ---------------------------------------------------------------------------------


def _cases(n_billing: int = 10, verdict: str = "p") -> list[C]:
    return [C(f"billing-{i:02d}", verdict, ["billing"]) for i in range(n_billing)] + [
        C(f"general-{i:02d}", verdict, ["general"]) for i in range(10)
    ]


def _run(run_id: str, verdict: str = "p", **manifest: object):
    return make_run(run_id, _cases(verdict=verdict), {**MANIFEST, **manifest}, label=run_id)


def test_a_promoted_policy_round_trips_and_the_newest_pinning_promotion_wins(
    tmp_path: Path,
) -> None:
    db = tmp_path / "s.duckdb"
    write_store(db, [_run("b1", gate_policy=PINNED), _run("b0")])
    looser = {**PINNED, "gate": {"alpha": 0.01}}
    with open_store(db, write=True) as store:
        assert store.pinned_policy("b1") is None
        pin = pinned_policy(store, "b1")
        assert pin.policy == PINNED and pin.source == "recorded in baseline run b1's manifest"
        assert pinned_policy(store, "b0").policy is None
        assert pinned_policy(store, "b0").source.startswith("none (the baseline predates")
        store.promote_baseline("demo", "b1", "ana", "v1 shipped", policy=PINNED)
        store.promote_baseline("demo", "b1", "bo", "alpha agreed", policy=looser)
        store.promote_baseline("demo", "b1", "cy", "re-promoted, no policy")
        policy, row = store.pinned_policy("b1")
        assert policy == looser and (row["who"], row["reason"]) == ("bo", "alpha agreed")
        assert row["promoted_at"] is not None
        history = store.baselines("demo")
        assert history["who"].to_list() == ["cy", "bo", "ana"]
        assert history["policy"].null_count() == 1 and '"alpha": 0.01' in history["policy"][1]
        pin = pinned_policy(store, "b1")
        assert pin.policy == looser
        assert pin.source.startswith("promoted by bo on 20") and pin.source.endswith(
            ": alpha agreed"
        )


def test_a_read_only_store_from_before_policy_pinning_reads_as_no_policy(tmp_path: Path) -> None:
    db = tmp_path / "old.duckdb"
    con = duckdb.connect(str(db))
    con.execute(OLD_RUNS_DDL)
    con.execute("CREATE TABLE baselines (suite VARCHAR, run_id VARCHAR, who VARCHAR, "
                "reason VARCHAR, promoted_at TIMESTAMPTZ, tier VARCHAR)")  # fmt: skip
    con.execute("INSERT INTO baselines VALUES ('demo', 'b1', 'ana', 'v1', now(), NULL)")
    con.close()
    with open_store(db, read_only=True) as store:
        assert store.pinned_policy("b1") is None
        history = store.baselines()
        assert history.height == 1 and history["policy"].to_list() == [None]


# -- baseline promote ------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run the CLI where no evalkit.yaml is found unless a test writes one."""
    monkeypatch.chdir(tmp_path)


def _promote(db: Path, run: str, *extra: str) -> int:
    return main(["baseline", "promote", run, "--db", str(db), "--who", "ana", "--reason",
                 "v1 shipped", *extra])  # fmt: skip


def test_promoting_a_partial_tag_run_is_refused_with_what_to_do(tmp_path: Path, capsys) -> None:
    db = tmp_path / "p.duckdb"
    selection = {"tier": None, "tags": ["billing"], "exclude_tags": []}
    excluded = {"tier": None, "tags": [], "exclude_tags": ["general"]}
    write_store(db, [_run("t1", selection=selection), _run("x1", selection=excluded)])
    assert _promote(db, "t1") == 2
    err = capsys.readouterr().err
    assert "run t1 ran only part of the suite (--tag billing)" in err
    assert "evalkit run --tier NAME" in err and len(err.strip().splitlines()) == 1
    assert _promote(db, "x1") == 2
    assert "(--exclude-tag general)" in capsys.readouterr().err
    with open_store(db, write=True) as store:
        assert store.baselines().is_empty()


def test_promoting_an_all_errored_run_is_refused(tmp_path: Path, capsys) -> None:
    db = tmp_path / "e.duckdb"
    write_store(db, [_run("e1", "e", gate_policy=PINNED)])
    assert _promote(db, "e1") == 2
    err = capsys.readouterr().err
    assert "run e1 errored on 20 of 20 outputs (100.0%), above gate.max_error_rate 0" in err
    with open_store(db, write=True) as store:
        assert store.baselines().is_empty()


def test_the_error_rate_a_promotion_tolerates_is_that_of_the_policy_it_pins(
    tmp_path: Path, capsys
) -> None:
    db = tmp_path / "r.duckdb"
    cases = _cases()
    cases[0] = C("billing-00", "e", ["billing"])
    tolerant = {**PINNED, "gate": {"max_error_rate": 0.1}}
    runs = [make_run(r, cases, {**MANIFEST, "gate_policy": p}, label=r)
            for r, p in (("s1", PINNED), ("s2", tolerant))]  # fmt: skip
    write_store(db, runs)
    assert _promote(db, "s1") == 2
    assert "errored on 1 of 20 outputs (5.0%)" in capsys.readouterr().err
    assert _promote(db, "s2") == 0


def test_a_tier_run_is_promoted_as_that_tiers_baseline(tmp_path: Path, capsys) -> None:
    db = tmp_path / "t.duckdb"
    selection = {"tier": "smoke", "tags": ["billing"], "exclude_tags": []}
    write_store(db, [_run("k1", selection=selection, gate_policy=PINNED)])
    assert _promote(db, "k1") == 0
    out = capsys.readouterr().out
    assert "baseline of suite 'demo' tier 'smoke' is now k1" in out
    assert "policy pinned: recorded in run k1's manifest" in out
    with open_store(db, write=True) as store:
        assert store.current_baseline("demo", "smoke") == "k1"
        assert store.current_baseline("demo") is None
        assert store.pinned_policy("k1")[0] == PINNED


def test_an_old_run_pins_no_policy_and_show_says_so(tmp_path: Path, capsys) -> None:
    db = tmp_path / "o.duckdb"
    write_store(db, [_run("o1"), _run("n1", gate_policy=PINNED)])
    assert _promote(db, "o1") == 0
    assert "no policy pinned: run o1 predates policy pinning" in capsys.readouterr().out
    assert _promote(db, "n1") == 0
    out = capsys.readouterr().out
    assert "policy pinned: recorded in run n1's manifest" in out
    assert "no policy was pinned before" in out
    assert main(["baseline", "show", "--db", str(db)]) == 0
    shown = [
        line for line in capsys.readouterr().out.splitlines() if " o1 " in line or " n1 " in line
    ]
    assert any("n1" in line and "pinned" in line for line in shown)
    assert any("o1" in line and "none" in line for line in shown)


def _config(path: Path, suite: str = "demo", **policy: str) -> Path:
    lines = [
        f"suite: {suite}",
        "system:",
        "  model: demo-model",
        "  base_url: http://127.0.0.1:9/v1",
    ]
    lines += [f"{key}: {value}" for key, value in policy.items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_promote_policy_pins_the_config_policy_and_prints_what_it_loosens(
    tmp_path: Path, capsys
) -> None:
    db = tmp_path / "c.duckdb"
    write_store(db, [_run("b1", gate_policy=PINNED)])
    assert _promote(db, "b1") == 0
    capsys.readouterr()
    config = _config(tmp_path / "evalkit.yaml", critical_tags="[]", gate="{alpha: 0.01}")
    proposed = load_policy_dict(str(config))
    with open_store(
        db, write=True
    ) as store:  # before: the pull request's policy is looser than the pin
        _, changes = effective_policy(pinned_policy(store, "b1").policy, proposed)
        assert len(changes.looser) == 2
    assert _promote(db, "b1", "--policy") == 0  # --config found in the working directory
    out = capsys.readouterr().out
    assert "policy pinned: evalkit.yaml (--policy)" in out
    assert "policy changes against the previous pin (promoted by ana on 20" in out
    assert "\n    critical_tags: 'billing' dropped (looser: it no longer blocks)\n" in out
    assert "\n    gate.alpha 0.05 → 0.01 (looser: the exact test blocks less)\n" in out
    with open_store(db, write=True) as store:
        pin = pinned_policy(store, "b1")
        assert pin.policy == proposed and pin.source.startswith("promoted by ana on ")
        policy, changes = effective_policy(pin.policy, proposed)  # now promoted: no change
        assert policy.alpha == 0.01 and not changes.any
    assert _promote(db, "b1", "--policy", "--config", str(config)) == 0
    assert "policy unchanged from the previous pin" in capsys.readouterr().out


def test_promote_policy_refuses_another_suites_config_and_a_bad_policy(
    tmp_path: Path, capsys
) -> None:
    db = tmp_path / "w.duckdb"
    write_store(db, [_run("b1", gate_policy=PINNED)])
    other = _config(tmp_path / "other.yaml", suite="shop")
    assert _promote(db, "b1", "--policy", "--config", str(other)) == 2
    assert "is suite 'shop' but the run is of suite 'demo'" in capsys.readouterr().err
    thin = _config(tmp_path / "thin.yaml", critical_tags="[general, nosuch]")
    assert _promote(db, "b1", "--policy", "--config", str(thin)) == 2
    assert "critical tag 'nosuch' has 0 cases" in capsys.readouterr().err
    assert _promote(db, "b1", "--policy") == 2  # no evalkit.yaml here
    assert "suite config not found" in capsys.readouterr().err
    with open_store(db, write=True) as store:
        assert store.baselines().is_empty()

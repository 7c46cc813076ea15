"""What a thin comparison (the gate's) holds of each run (issue 48, item 4): its outputs without
the usage figures, which only verdicts read, a range of cases at a time, from the store; the
run's repeated strings as categoricals. The decision, the verdicts (usage means included), the
ungated judges' pairing and the report are the same as the whole-run path's."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from synthetic_runs import MANIFEST, C, make_run, write_store
from test_bounded_gate import _decided, _seeded_pair, _write_pair

from evalkit.compare import pin, verdicts
from evalkit.compare.analysis import (
    REPEATED_STRING_COLUMNS,
    USAGE_DETAIL_COLUMNS,
    compact_strings,
    load_comparison,
)
from evalkit.store import Store


def _output_reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, bool]]:
    """Every read of a run's outputs that is not a read-back of named cases: its rows and
    whether it carried the usage figures."""
    reads: list[tuple[int, bool]] = []
    read = Store.outputs

    def counted(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        frame = read(self, *args, **kwargs)
        if kwargs.get("case_ids") is None:
            reads.append((frame.height, "latency_ms" in frame.columns))
        return frame

    monkeypatch.setattr(Store, "outputs", counted)
    return reads


def _whole(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        pin, "load_comparison", lambda *a, **k: load_comparison(*a, **{**k, "thin": False})
    )


@pytest.mark.parametrize("judged", [False, True], ids=["checks", "ungated-judge"])
def test_a_thin_gate_reads_usage_figures_a_range_of_cases_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, judged: bool
) -> None:
    db, config = _write_pair(tmp_path, judged=judged)
    monkeypatch.setattr(verdicts, "VERDICT_CASES", 17)
    reads = _output_reads(monkeypatch)
    thin_cmp, thin, thin_report = _decided(db, config)

    per_run = 240 * 3  # cases x replays, every one stored
    held = [n for n, usage in reads if not usage]
    figures = [n for n, usage in reads if usage]
    assert held == [per_run, per_run]  # each run's outputs once, without their figures ...
    assert max(figures) <= 17 * 3 < per_run / 10  # ... which are read a range at a time
    assert sum(figures) == 2 * per_run * (2 if judged else 1)  # every row (judges: again)
    for run in (thin_cmp.base, thin_cmp.cand):
        assert not set(USAGE_DETAIL_COLUMNS) & set(run.outputs.columns)
        for frame in (run.outputs, run.cases):
            kept = [c for c in REPEATED_STRING_COLUMNS if c in frame.columns]
            assert kept and all(frame.schema[c] == pl.Categorical for c in kept)

    reads.clear()
    _whole(monkeypatch)
    whole_cmp, whole, whole_report = _decided(db, config)
    assert [usage for _, usage in reads] == [True, True]  # the whole path: each run once
    assert thin.to_dict() == whole.to_dict()
    assert thin_report == whole_report
    for name in ("base_verdicts", "cand_verdicts", "paired", "changes", "delta"):
        assert getattr(thin_cmp, name).equals(getattr(whole_cmp, name)), name
    usage = [c for c in thin_cmp.paired.columns if c.endswith(("latency_ms", "cost_usd"))]
    assert usage and thin_cmp.paired[usage].null_count().sum_horizontal()[0] == 0
    if judged:
        assert thin_cmp.judge_paired is not None and thin_cmp.judge_paired.height
        assert thin_cmp.judge_paired.equals(whole_cmp.judge_paired)
        assert thin_cmp.judge_paired["base_latency_ms"].null_count() == 0


def test_a_thin_gate_reads_the_changed_cases_sources_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base_cases, cand_cases = _seeded_pair()
    cand_cases[3] = C(cand_cases[3].id, "ppp", cand_cases[3].tags, hash="edited")
    cand_cases.insert(0, C("added-000", "ppp", ["billing"]))  # every source shifts by one
    del cand_cases[-1]  # removed: the baseline's source
    manifest = {**MANIFEST, "replays": 3}
    db = tmp_path / "e.duckdb"
    runs = [make_run("base-run", base_cases, manifest, "base")]
    write_store(db, [*runs, make_run("cand-run", cand_cases, manifest, "cand")])
    config = tmp_path / "evalkit.yaml"
    config.write_text("suite: demo\nsystem:\n  model: demo-model\n", encoding="utf-8")

    thin_cmp, thin, thin_report = _decided(db, config)
    assert "source" not in thin_cmp.cand.cases.columns  # left in the store
    _whole(monkeypatch)
    whole_cmp, whole, whole_report = _decided(db, config)
    changes = thin_cmp.changes
    assert sorted(changes["change"]) == ["added", "edited", "removed"]
    assert changes["source"].null_count() == 0
    assert changes.equals(whole_cmp.changes)  # the candidate's source, else the baseline's
    assert thin.to_dict() == whole.to_dict() and thin_report == whole_report


def test_compact_strings_keeps_every_value_and_join() -> None:
    frame = pl.DataFrame(
        {"run_id": ["r"] * 3, "case_id": ["a", "b", "c"], "criticality": ["normal", None, "x"]}
    )
    compact = compact_strings(frame)
    assert compact.schema["run_id"] == compact.schema["criticality"] == pl.Categorical
    assert compact.schema["case_id"] == pl.String  # a join key: never categorical
    assert compact.rows() == frame.rows()
    must = compact.filter(pl.col("criticality") == "x")["case_id"].to_list()
    assert must == ["c"]

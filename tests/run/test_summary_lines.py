"""The run summary's first line names a run once: "baseline run ID", or "run ID" for an
unlabelled run or a merged one (whose label is its id)."""

from __future__ import annotations

import pytest

from evalkit.run.summary import RunSummary, summary_lines


def _summary(run_id: str, label: str) -> RunSummary:
    return RunSummary(
        run_id=run_id,
        label=label,
        config_hash="cfg",
        cases=3,
        outputs=3,
        passed=2,
        failed=1,
        errored=0,
        cache_hits=0,
        requests=3,
        retries=0,
        resumed_skipped=0,
        wall_s=0.1,
        prompt_tokens=10,
        completion_tokens=10,
        cost_usd=0.0,
        mean_latency_ms=5.0,
    )


@pytest.mark.parametrize(
    ("run_id", "label", "first"),
    [
        ("r1", "baseline", "baseline run r1: 3 cases"),
        ("r1", "run", "run r1: 3 cases"),
        ("nightly-41", "nightly-41", "run nightly-41: 3 cases"),
    ],
)
def test_the_first_line_names_the_run_once(run_id: str, label: str, first: str) -> None:
    assert summary_lines(_summary(run_id, label), "db.duckdb")[0].startswith(first)


def test_a_merge_prints_no_session_of_zero_requests() -> None:
    """``evalkit runs merge`` asked nothing itself: its summary says the shards did, rather
    than "this session: requests 0 ... wall 0.00s" beside a run of thousands of outputs."""
    merged = summary_lines(_summary("nightly-41", "nightly-41"), "db.duckdb", asked_here=False)
    ran = summary_lines(_summary("nightly-41", "nightly-41"), "db.duckdb")
    assert not any("this session" in line for line in merged)
    assert any("counted in each shard's own summary" in line for line in merged)
    assert any("this session: requests 3" in line for line in ran)
    assert len(merged) == len(ran)

"""`side_errors`: one run's outputs of the paired, unsealed cases, with a missing output
counted as an errored one; the usual pair (one output a case, in any order) without a set or
grouping of its ids."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import polars as pl
import pytest

from evalkit.compare.evidence import side_errors

_FILLER = "no output stored (the run is incomplete)"


def _oracle(outputs: pl.DataFrame, paired: pl.DataFrame, replays: int) -> pl.DataFrame:
    """The general path, written out: outputs of paired unsealed cases in their order, then
    one errored row for each missing replay."""
    ids = paired.filter(~pl.col("sealed").fill_null(False))["case_id"].to_list()
    wanted = set(ids)
    rows = [r for r in outputs.select("case_id", "error").iter_rows() if r[0] in wanted]
    seen: dict[str, int] = {}
    for case_id, _ in rows:
        seen[case_id] = seen.get(case_id, 0) + 1
    rows += [(c, _FILLER) for c in ids for _ in range(replays - seen.get(c, 0))]
    return pl.DataFrame(rows, schema={"case_id": pl.String, "error": pl.String}, orient="row")


def _run(outputs: pl.DataFrame, replays: int = 1) -> Any:
    return SimpleNamespace(outputs=outputs, manifest=SimpleNamespace(replays=replays))


def _pair(n: int, seed: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    rng = random.Random(seed)
    ids = [f"case-{i:04d}" for i in range(n)]
    paired = pl.DataFrame({"case_id": ids, "sealed": [False] * n})
    order = ids[:]
    rng.shuffle(order)  # a merged run: rows in the order its shards wrote them
    errors = [rng.choice([None, None, "timeout"]) for _ in order]
    return pl.DataFrame({"case_id": order, "error": errors}), paired


@pytest.mark.parametrize("seed", range(5))
def test_a_shuffled_run_keeps_its_rows_and_groups_no_ids(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    outputs, paired = _pair(200, seed)
    calls: list[int] = []
    is_in = pl.Expr.is_in

    def counted(self: pl.Expr, *args: Any, **kwargs: Any) -> pl.Expr:
        calls.append(1)
        return is_in(self, *args, **kwargs)

    monkeypatch.setattr(pl.Expr, "is_in", counted)
    got = side_errors(_run(outputs), paired)
    assert calls == []  # neither the set of ids nor their grouping was made
    assert got.equals(_oracle(outputs, paired, 1))
    assert got["case_id"].to_list() == outputs["case_id"].to_list()


@pytest.mark.parametrize(
    "change",
    ["missing", "extra", "duplicate", "sealed", "replays"],
)
def test_other_pairs_match_the_general_path(change: str) -> None:
    outputs, paired = _pair(60, 7)
    replays = 1
    if change == "missing":
        outputs = outputs.slice(1)
    elif change == "extra":
        outputs = pl.concat([outputs, pl.DataFrame({"case_id": ["stray"], "error": ["x"]})])
    elif change == "duplicate":  # same length as the pair, one id twice and one absent
        outputs = outputs.with_columns(
            pl.when(pl.int_range(pl.len()) == 0)
            .then(pl.col("case_id").get(1))
            .otherwise(pl.col("case_id"))
            .alias("case_id")
        )
    elif change == "sealed":
        paired = paired.with_columns((pl.int_range(pl.len()) % 7 == 0).alias("sealed"))
    else:
        replays = 2
        outputs = pl.concat([outputs, outputs.slice(5)])
    got = side_errors(_run(outputs, replays), paired)
    assert got.equals(_oracle(outputs, paired, replays))

"""Pairwise judging of two runs: every paired case's outputs, judged in both orders.

``evalkit judges pairs BASE CAND --rubric PATH`` asks the suite's judge, for each case present and
unedited in both runs (same case hash, replay 0, both outputs present), which output better
satisfies the rubric: once with the baseline shown first (order a,b), once with the candidate
first (b,a). Each verdict is mapped back to the original numbering (1 = baseline better,
2 = candidate better, 0 = tie); the combined verdict is their common answer, or a tie when the
orders disagree (position bias is measured, not averaged away). Malformed judge output is
stored as an error row with the raw text, never as a verdict. Identical outputs are a tie by
definition and are not sent to the judge. Results land in the ``pairwise_judgments`` table and
replace earlier ones for the same runs, judge and rubric.

Examples:
    >>> result = judge_pairs(store, suite, "baseline", "candidate", Path("rubrics/tone.md"))
    ... # doctest: +SKIP
    >>> result.consistency, result.wins, result.losses  # doctest: +SKIP
    (0.8, 3, 11)
"""

from __future__ import annotations

import asyncio
import html
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from evalkit.errors import EvalkitError, ProviderError
from evalkit.judges import agreement
from evalkit.scorers.judge_client import (
    JudgeClient,
    MalformedJudgement,
    PairwiseVerdict,
    Rubric,
    judge_pairwise,
    load_rubric,
    render_conversation,
)
from evalkit.store import PAIRWISE_SCHEMA

if TYPE_CHECKING:
    from evalkit.corpus.suite import Suite
    from evalkit.store import Store

__all__ = [
    "PairwiseRun",
    "judge_paired_outputs",
    "judge_pairs",
    "paired_outputs",
    "resolve_rubric",
]


def resolve_rubric(path: str | Path, root: Path) -> Rubric:
    """Load a rubric given as a path (as is, or relative to the corpus ``root``); its name is
    the path relative to ``root`` when inside it, as the judge scorer's YAML names it.

    Raises:
        EvalkitError: no such file, or the file has no anchored score levels.
    """
    given = Path(path)
    file = given if given.is_file() else root / given
    if not file.is_file():
        raise EvalkitError(f"rubric {path}: no such file (relative to . or {root})")
    try:
        name = str(file.resolve().relative_to(root.resolve()))
    except ValueError:
        name = str(path)
    try:
        return load_rubric(file, name=name)
    except ValueError as exc:
        raise EvalkitError(f"{path}: {exc}") from None


def paired_outputs(
    base_cases: pl.DataFrame,
    cand_cases: pl.DataFrame,
    base_outputs: pl.DataFrame,
    cand_outputs: pl.DataFrame,
) -> pl.DataFrame:
    """Cases in both runs with the same case hash and a replay-0 output in each.

    Columns: ``case_id, input`` (the stored input JSON), ``base_text, cand_text``.

    Examples:
        >>> cases = pl.DataFrame({"case_id": ["a", "b"], "case_hash": ["h", "g"],
        ...                       "input": ["{}", "{}"]})
        >>> outs = pl.DataFrame({"case_id": ["a", "b"], "replay": [0, 0], "text": ["x", None]})
        >>> paired_outputs(cases, cases, outs, outs)["case_id"].to_list()
        ['a']
    """

    def first(outputs: pl.DataFrame, name: str) -> pl.DataFrame:
        keep = (pl.col("replay") == 0) & pl.col("text").is_not_null()
        return outputs.filter(keep).select("case_id", pl.col("text").alias(name))

    same = base_cases.select("case_id", "case_hash", "input").join(
        cand_cases.select("case_id", "case_hash"), on=["case_id", "case_hash"], how="inner"
    )
    return (
        same.join(first(base_outputs, "base_text"), on="case_id")
        .join(first(cand_outputs, "cand_text"), on="case_id")
        .select("case_id", "input", "base_text", "cand_text")
        .sort("case_id")
    )


def _esc(text: str) -> str:
    """Escape rich markup in data shown inside marked-up lines."""
    return str(text).replace("[", "\\[")


def _conversation(input_json: str) -> str:
    """What the judge is shown, rendered as the pointwise judge scorer renders it."""
    given = json.loads(input_json or "{}")
    if given.get("messages") is not None:
        return render_conversation(given["messages"])
    return json.dumps(given.get("vars"), sort_keys=True)


@dataclass(frozen=True, kw_only=True)
class PairwiseRun:
    """The stored verdicts of one ``judge-pairs`` call and their summary.

    Verdicts: 1 = baseline better, 2 = candidate better, 0 = tie (``rows``, one per judged case;
    error rows have null verdicts and keep the judge's raw answer).
    """

    base_run_id: str
    cand_run_id: str
    judge_model: str
    rubric: str
    rubric_hash: str
    rows: pl.DataFrame = field(compare=False, repr=False)
    identical: tuple[str, ...] = ()  # cases whose two outputs are the same text (not judged)
    unpaired: int = 0  # cases not in both runs unedited with an output in each

    @property
    def judged(self) -> pl.DataFrame:
        return self.rows.filter(pl.col("error").is_null())

    @property
    def errors(self) -> pl.DataFrame:
        return self.rows.filter(pl.col("error").is_not_null())

    @property
    def consistency(self) -> float | None:
        """Position consistency: share of judged cases with the same verdict in both orders."""
        j = self.judged
        return agreement.position_consistency(j["order_ab"], j["order_ba"]) if j.height else None

    @property
    def wins(self) -> int:
        """Candidate better in both orders."""
        return int((self.judged["combined"] == 2).sum())

    @property
    def losses(self) -> int:
        """Baseline better in both orders."""
        return int((self.judged["combined"] == 1).sum())

    @property
    def ties(self) -> int:
        """Ties: judged ties, order-flipping verdicts, and identical outputs."""
        return int((self.judged["combined"] == 0).sum()) + len(self.identical)

    @property
    def inconsistent(self) -> tuple[str, ...]:
        """Cases whose verdict flipped with the presentation order."""
        return tuple(self.judged.filter(~pl.col("consistent"))["case_id"].to_list())

    def lines(self) -> list[str]:
        """The summary as text lines with rich markup (what the CLI prints)."""
        n = self.judged.height
        rate = f"{self.consistency:.1%} ({n - len(self.inconsistent)}/{n})" if n else "n/a"
        names = {0: "tie", 1: "baseline", 2: "candidate"}
        out = [
            f"[bold]judge {_esc(self.judge_model)}[/] with {_esc(self.rubric)} (rubric "
            f"{self.rubric_hash[:8]})"
            f": {self.base_run_id} (baseline) vs {self.cand_run_id} (candidate)",
            f"  {n} pairs judged in both orders; position consistency {rate}",
            f"  candidate wins {self.wins}, ties {self.ties} ({len(self.inconsistent)} "
            f"order-dependent, {len(self.identical)} identical outputs not judged), "
            f"losses {self.losses}",
        ]
        for row in self.judged.filter(~pl.col("consistent")).iter_rows(named=True):
            out.append(
                f"  [yellow]inconsistent[/] {_esc(row['case_id'])}: baseline first -> "
                f"{names[row['order_ab']]}, candidate first -> {names[row['order_ba']]}"
            )
        for row in self.errors.iter_rows(named=True):
            out.append(f"  [red]error[/] {_esc(row['case_id'])}: {_esc(row['error'])[:300]}")
        if self.unpaired:
            out.append(f"  {self.unpaired} cases not paired (edited, missing or errored)")
        return out

    def __rich__(self) -> Any:
        from rich.text import Text

        return Text.from_markup("\n".join(self.lines()))

    def _repr_html_(self) -> str:
        from rich.text import Text

        head = "<br>".join(html.escape(Text.from_markup(line).plain) for line in self.lines()[:3])
        from evalkit.display import table  # great_tables: only when shown

        return f"<p>{head}</p>" + table(self.rows, "Pairs judged").as_raw_html()


async def _judge_one(
    client: JudgeClient, rubric: Rubric, row: dict[str, Any], limit: asyncio.Semaphore
) -> dict[str, Any]:
    out: dict[str, Any] = dict.fromkeys(PAIRWISE_SCHEMA)
    out["case_id"] = row["case_id"]
    async with limit:
        try:
            verdict: PairwiseVerdict = await judge_pairwise(
                client, rubric, _conversation(row["input"]), row["base_text"], row["cand_text"]
            )
        except MalformedJudgement as bad:
            out.update(error=f"malformed judge output: {bad.problem}", raw=bad.raw)
            return out
        except ProviderError as exc:
            out.update(error=f"judge call failed: {exc.cause}")
            return out
    out.update(
        order_ab=verdict.order_ab,
        order_ba=verdict.order_ba,
        combined=verdict.combined,
        consistent=verdict.consistent,
        reasons=json.dumps({"ab": verdict.reason_ab, "ba": verdict.reason_ba}),
    )
    return out


async def _judge_all(
    client: JudgeClient, rubric: Rubric, pairs: pl.DataFrame, concurrency: int
) -> list[dict[str, Any]]:
    limit = asyncio.Semaphore(concurrency)
    try:
        return await asyncio.gather(
            *(_judge_one(client, rubric, row, limit) for row in pairs.iter_rows(named=True))
        )
    finally:
        await client.provider.aclose()


def judge_paired_outputs(
    client: JudgeClient, rubric: Rubric, pairs: pl.DataFrame, concurrency: int = 8
) -> pl.DataFrame:
    """Judge each pair (rows of :func:`paired_outputs`) in both orders with ``client``.

    Returns one :data:`~evalkit.store.PAIRWISE_SCHEMA` row per pair, run ids and judge fields
    still null; a malformed answer in either order gives an error row that keeps the raw text.
    The client's provider is closed afterwards (each call runs its own event loop).

    Examples:
        >>> rows = judge_paired_outputs(client, rubric, pairs)  # doctest: +SKIP
        >>> rows.select("case_id", "order_ab", "order_ba", "combined").row(0)  # doctest: +SKIP
        ('orders-where-is-001', 1, 1, 1)
    """
    rows = asyncio.run(_judge_all(client, rubric, pairs, concurrency))
    return pl.DataFrame(rows, schema=PAIRWISE_SCHEMA)


def judge_pairs(
    store: Store,
    suite: Suite,
    base: str,
    cand: str,
    rubric_path: str | Path,
    *,
    use_cache: bool = True,
) -> PairwiseRun:
    """Judge every paired case of two runs in both orders with the suite's judge; store it.

    Raises:
        EvalkitError: unknown run, missing rubric, no ``judge:`` in the suite, no paired case.
    """
    from evalkit.run.judging import judge_client

    base_id, cand_id = store.resolve_run(base), store.resolve_run(cand)
    rubric = resolve_rubric(rubric_path, suite.root)
    base_cases, cand_cases = store.cases(base_id), store.cases(cand_id)
    pairs = paired_outputs(base_cases, cand_cases, store.outputs(base_id), store.outputs(cand_id))
    if pairs.is_empty():
        raise EvalkitError(f"runs {base_id} and {cand_id} share no unedited case with outputs")
    same = pairs.filter(pl.col("base_text") == pl.col("cand_text"))
    different = pairs.filter(pl.col("base_text") != pl.col("cand_text"))
    client = judge_client(suite, store, use_cache)
    frame = judge_paired_outputs(client, rubric, different, suite.config.concurrency)
    frame = frame.with_columns(
        pl.lit(base_id).alias("base_run_id"),
        pl.lit(cand_id).alias("cand_run_id"),
        pl.lit(rubric.path).alias("rubric"),
        pl.lit(rubric.hash).alias("rubric_hash"),
        pl.lit(client.model).alias("judge_model"),
    )
    if not frame.is_empty():
        store.save_pairwise_judgments(frame)
    stored = store.pairwise_judgments(
        base_id, cand_id, judge_model=client.model, rubric_hash=rubric.hash
    )
    return PairwiseRun(
        base_run_id=base_id,
        cand_run_id=cand_id,
        judge_model=client.model,
        rubric=rubric.path,
        rubric_hash=rubric.hash,
        rows=stored,
        identical=tuple(same["case_id"].to_list()),
        unpaired=len(set(base_cases["case_id"]) | set(cand_cases["case_id"])) - pairs.height,
    )

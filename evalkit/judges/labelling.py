"""Labelling for judge calibration: a blind, stratified, reproducible sample of a run's judged
outputs, written as a sheet to fill in (``evalkit labels export``).

Calibration wants a hundred or more human labels, and they only measure the judge if the raters
never saw its verdict: the sample, the sheet and the session carry the case's input, the output
and the rubric, never a judge score, reason or pass/fail, and their order is a seeded shuffle.

- The *population* is the run's replay-0 outputs that the judge ``scorer`` scored (undecided
  judge calls left out: calibration cannot use them), with one rubric (``rubric`` chooses).
- The *strata* are the cases' first tag (``stratify="tag"``), their criticality, or none. Each
  stratum gets its proportional share of ``sample`` (largest remainders), at least one item
  while there are items enough, so a small slice is not left unlabelled.
- ``seed`` picks the items in each stratum and their order: the same run, size, strata and seed
  give the same items in the same order, so a sheet and a session agree, and so do two raters.

A :class:`~evalkit.judges.labelling_session.LabellingSession` labels the same sample one output
at a time and stores each label as it is given; :func:`human_agreement` measures the raters
against each other, the ceiling for any judge.

Examples:
    >>> allocate({"billing": 40, "policy": 8, "general": 152}, 20)
    {'billing': 4, 'general': 15, 'policy': 1}
    >>> allocate({"a": 98, "b": 1, "c": 1}, 10)  # every stratum gets one while it can
    {'a': 8, 'b': 1, 'c': 1}
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np
import polars as pl

from evalkit.errors import EvalkitError
from evalkit.judges import agreement
from evalkit.judges.calibration import judged_outputs
from evalkit.judges.labels import neutralise_cell, output_hash
from evalkit.scorers.judge_client import Rubric, load_rubric, render_conversation

if TYPE_CHECKING:
    from evalkit.store import Store

__all__ = [
    "DEFAULT_SAMPLE",
    "LabelItem",
    "LabelSample",
    "LabellingError",
    "Stratum",
    "allocate",
    "find_rubric",
    "human_agreement",
    "sample_outputs",
    "write_sheet",
]

#: A little over the hundred labels calibration wants, for the ones a rater skips or finds tied.
DEFAULT_SAMPLE = 120
Stratify = Literal["tag", "criticality", "none"]
STRATIFY: tuple[str, ...] = ("tag", "criticality", "none")
_UNTAGGED = "(untagged)"
#: The sheet's columns: where the item is, what to read, then what to fill in.
SHEET_ORDER = (
    "item", "case_id", "output_hash", "stratum", "input", "output", "rubric", "scorer", "rater",
    "label", "note",
)  # fmt: skip


class LabellingError(EvalkitError):
    """A labelling problem the user can act on (one line; the CLI exits 2)."""


@dataclass(frozen=True)
class LabelItem:
    """One output to label: what the judge saw (the input as a conversation, the output text),
    never what it said."""

    position: int  # 1-based, in the sample's (seeded) order
    case_id: str
    output_hash: str
    stratum: str
    tags: tuple[str, ...]
    input: str
    output: str


@dataclass(frozen=True)
class Stratum:
    name: str
    available: int  # judged outputs in the stratum
    sampled: int


@dataclass(frozen=True)
class LabelSample:
    """The outputs to label and how they were chosen (enough to choose them again)."""

    run_id: str
    scorer: str
    rubric: Rubric
    seed: int
    stratify: str
    requested: int
    population: int
    strata: tuple[Stratum, ...]
    items: tuple[LabelItem, ...]

    def to_frame(self, rater: str | None = None) -> pl.DataFrame:
        """The labelling sheet: one row per item with blank ``label`` and ``note`` (and
        ``rater``, unless given), in the columns ``evalkit labels import`` reads back."""
        rows = [
            {
                "item": i.position,
                "case_id": i.case_id,
                "output_hash": i.output_hash,
                "stratum": i.stratum,
                "input": i.input,
                "output": i.output,
                "rubric": self.rubric.text,
                "scorer": self.scorer,
                "rater": rater,
                "label": None,
                "note": None,
            }
            for i in self.items
        ]
        types = {"item": pl.Int64, "label": pl.Int64}
        return pl.DataFrame(rows, schema={c: types.get(c, pl.String) for c in SHEET_ORDER})

    def _repr_html_(self) -> str:
        strata = ", ".join(f"{html.escape(s.name)} {s.sampled}/{s.available}" for s in self.strata)
        return (
            f"<p>{len(self.items)} of {self.population} judged outputs of run "
            f"{html.escape(self.run_id)} (scorer {html.escape(self.scorer)}, rubric "
            f"{html.escape(self.rubric.path)}), stratified by {self.stratify}, seed {self.seed}: "
            f"{strata}</p>"
        )


def allocate(sizes: Mapping[str, int], n: int) -> dict[str, int]:
    """How many of ``n`` items each stratum gets: proportional to its size (largest remainders,
    ties by name), at least one per non-empty stratum while ``n`` allows, never more than it has.
    """
    sizes = {k: v for k, v in sorted(sizes.items()) if v > 0}
    total = sum(sizes.values())
    n = min(n, total)
    if n <= 0:
        return dict.fromkeys(sizes, 0)
    quotas = {k: n * v / total for k, v in sizes.items()}
    share = {k: int(q) for k, q in quotas.items()}
    by_remainder = sorted(sizes, key=lambda k: (-(quotas[k] - share[k]), k))
    for k in by_remainder[: n - sum(share.values())]:
        share[k] += 1
    for k in sizes:  # a stratum left out takes one from the largest share that can spare it
        if share[k] == 0 and n >= len(sizes):
            donor = max(sizes, key=lambda d: (share[d], d))
            share[donor] -= 1
            share[k] = 1
    return share


@dataclass(frozen=True)
class SettingNames:
    """What the person asking calls the settings an error tells them to set: the CLI's options
    (the default) or a notebook's parameters (``SettingNames("RUBRIC", "SCORER")``)."""

    rubric: str = "--rubric"
    scorer: str = "--scorer"

    def ask(self, name: str, what: str) -> str:
        """ "pass --rubric PATH" on the command line; "set RUBRIC to PATH" in a notebook."""
        if name.startswith("--"):
            return f"pass {name} {what}"
        return f"set the notebook parameter {name} to {what}"


CLI_NAMES = SettingNames()


def find_rubric(
    recorded: str | None,
    digest: str | None,
    rubric: str | Path | None = None,
    roots: Sequence[str | Path] = (),
    names: SettingNames = CLI_NAMES,
) -> Rubric:
    """The rubric the labellers read: ``rubric`` if given, else the file the judge scores name
    (``recorded``), looked up under each of ``roots`` (default: the working directory) and
    checked against the hash the scores recorded (``digest``), so nobody labels against an
    edited rubric.

    Raises:
        LabellingError: no such file, an edited one, or not a rubric (fewer than two levels).
    """
    if rubric is not None:
        loaded = _load_rubric(Path(rubric), str(rubric))
        if digest is not None and loaded.hash != digest:
            raise LabellingError(
                f"rubric {rubric} is not the one the judge used (sha256 {loaded.hash[:12]}, "
                f"the scores name {digest[:12]})"
            )
        return loaded
    if not recorded:
        raise LabellingError(
            f"the judge scores name no rubric file: {names.ask(names.rubric, 'its path')}"
        )
    edited: list[Path] = []
    tried: list[str] = []
    for root in roots or (Path.cwd(),):
        path = Path(recorded) if Path(recorded).is_absolute() else Path(root) / recorded
        tried.append(str(path))
        if path.is_file():
            loaded = _load_rubric(path, recorded)
            if digest is None or loaded.hash == digest:
                return loaded
            edited.append(path)
    if edited:
        raise LabellingError(
            f"rubric {edited[0]} was edited after the run was judged: "
            f"{names.ask(names.rubric, 'the version the judge used')} "
            f"(sha256 {(digest or '')[:12]})"
        )
    raise LabellingError(
        f"the judge's rubric {recorded} is not at {' or '.join(tried)}: "
        f"{names.ask(names.rubric, 'its path')}"
    )


def _load_rubric(path: Path, name: str) -> Rubric:
    try:
        return load_rubric(path, name=name)
    except FileNotFoundError:
        raise LabellingError(f"rubric {path}: no such file") from None
    except (OSError, ValueError) as exc:
        raise LabellingError(f"rubric {path}: {exc}") from None


def sample_outputs(
    store: Store,
    run: str,
    *,
    sample: int = DEFAULT_SAMPLE,
    stratify: Stratify = "tag",
    scorer: str = "judge",
    seed: int = 0,
    rubric: str | Path | None = None,
    roots: Sequence[str | Path] = (),
    names: SettingNames = CLI_NAMES,
) -> LabelSample:
    """A stratified sample of the run's judged outputs to label, reproducible by ``seed``.

    Args:
        run: run id, id prefix or label.
        sample: how many outputs (all of them when the run has fewer).
        stratify: ``"tag"`` (a case's first tag), ``"criticality"`` or ``"none"``.
        scorer: the judge scorer the labels calibrate.
        rubric: the rubric file; required when the run's judge used several.
        roots: where the rubric path the scores recorded is looked for (see :func:`find_rubric`).
        names: what the errors call the rubric and scorer settings (options or parameters).

    Raises:
        LabellingError: bad arguments, no judge scores, several rubrics, a rubric not found.
    """
    if isinstance(sample, bool) or not isinstance(sample, int) or sample < 1:
        raise LabellingError(f"sample {sample!r}: expected a positive number of outputs")
    if stratify not in STRATIFY:
        raise LabellingError(f"stratify {stratify!r}: expected one of {', '.join(STRATIFY)}")
    run_id = store.resolve_run(run)
    wanted = find_rubric(None, None, rubric, names=names) if rubric is not None else None
    first = pl.col("replay") == 0
    outputs = store.outputs(run_id).filter(first & pl.col("text").is_not_null())
    judged = judged_outputs(
        store.scores(run_id).filter(first), outputs, scorer, wanted.hash if wanted else None
    ).filter(pl.col("judge_score").is_not_null())
    if judged.is_empty():
        with_rubric = f" with rubric {rubric}" if rubric is not None else ""
        raise LabellingError(
            f"run {run_id} has no decided {scorer!r} judge scores on replay 0{with_rubric}: "
            f"labels calibrate a judge ({names.ask(names.scorer, 'its judge scorer')})"
        )
    hashes = judged["rubric_hash"].drop_nulls().unique().sort().to_list()
    if len(hashes) > 1:
        raise LabellingError(
            f"run {run_id}'s {scorer!r} judge used {len(hashes)} rubrics "
            f"({', '.join(h[:12] for h in hashes)}): {names.ask(names.rubric, 'the one to label')}"
        )
    chosen = wanted or find_rubric(
        cast("str | None", judged["rubric"].drop_nulls().first()),
        hashes[0] if hashes else None,
        roots=roots,
        names=names,
    )
    items = _candidates(store.cases(run_id), outputs, judged, stratify)
    if not items:
        raise LabellingError(f"run {run_id}: its judged outputs have no stored case")
    by_stratum: dict[str, list[dict[str, Any]]] = {}
    for item in items:
        by_stratum.setdefault(item["stratum"], []).append(item)
    shares = allocate({k: len(v) for k, v in by_stratum.items()}, sample)
    rng = np.random.default_rng(seed)
    picked = [
        by_stratum[name][int(i)]
        for name in sorted(by_stratum)
        for i in sorted(rng.permutation(len(by_stratum[name]))[: shares[name]])
    ]
    # a seeded shuffle: no run of one stratum, and no order that could hint at the verdicts
    order = rng.permutation(len(picked))
    return LabelSample(
        run_id=run_id,
        scorer=scorer,
        rubric=chosen,
        seed=seed,
        stratify=stratify,
        requested=sample,
        population=len(items),
        strata=tuple(Stratum(k, len(by_stratum[k]), shares[k]) for k in sorted(by_stratum)),
        items=tuple(LabelItem(position=p, **picked[int(i)]) for p, i in enumerate(order, start=1)),
    )


def _candidates(
    cases: pl.DataFrame, outputs: pl.DataFrame, judged: pl.DataFrame, stratify: str
) -> list[dict[str, Any]]:
    """The judged outputs with what a rater reads, by case id (the judge's columns dropped)."""
    joined = (
        judged.select("case_id", "output_hash")
        .join(cases.select("case_id", "tags", "criticality", "input"), on="case_id", how="inner")
        .join(outputs.select("case_id", "text"), on="case_id", how="inner")
        .sort("case_id")
    )
    items = []
    for row in joined.iter_rows(named=True):
        tags = tuple(row["tags"] or ())
        stratum = {
            "tag": tags[0] if tags else _UNTAGGED,
            "criticality": row["criticality"] or "normal",
            "none": "all",
        }[stratify]
        items.append(
            {
                "case_id": row["case_id"],
                "output_hash": row["output_hash"],
                "stratum": stratum,
                "tags": tags,
                "input": _shown_input(row["input"]),
                "output": row["text"],
            }
        )
    return items


def _shown_input(stored: str | None) -> str:
    """The case's input as the judge saw it: the conversation, else the vars as JSON."""
    try:
        payload = json.loads(stored or "{}")
    except json.JSONDecodeError:
        return stored or ""
    if payload.get("messages"):
        return render_conversation(payload["messages"])
    return json.dumps(payload["vars"], sort_keys=True) if payload.get("vars") else ""


def write_sheet(sample: LabelSample, path: str | Path, rater: str | None = None) -> Path:
    """Write the labelling sheet as ``.csv`` or ``.jsonl`` (by the extension); returns the path.

    Fill in ``rater`` (unless given here) and ``label``; ``evalkit labels import FILE`` skips the
    rows left blank. A CSV sheet's text cells are neutralised (:func:`neutralise_cell`): model
    outputs are untrusted, and a spreadsheet must not run one as a formula.
    """
    out = Path(path)
    suffix = out.suffix.lower()
    if suffix not in (".csv", ".jsonl", ".ndjson"):
        raise LabellingError(f"{out}: a labelling sheet is a .csv or .jsonl file")
    frame = sample.to_frame(rater)
    out.parent.mkdir(parents=True, exist_ok=True)
    if suffix == ".csv":
        text = pl.col(pl.String).map_elements(neutralise_cell, return_dtype=pl.String)
        frame.with_columns(text).write_csv(out)
    else:
        frame.write_ndjson(out)
    return out


def human_agreement(
    labels: pl.DataFrame,
    outputs: pl.DataFrame | None = None,
    scorer: str | None = "judge",
    level: Literal["nominal", "ordinal", "interval"] = "ordinal",
) -> agreement.RaterAgreement:
    """Agreement among the human raters of stored labels (``store.human_labels()``): pairwise
    Cohen's kappa on the items both labelled, and Krippendorff's alpha (ordinal by default:
    labels are rubric levels). An item is an output hash, else a case id.

    With a run's ``outputs`` (``store.outputs(run_id)``), only the labels on that run's outputs
    count, a case-level label standing for the case's replay-0 output (as ``labels import
    --run`` pins it; a rater's pinned label wins over their case-level one).

    Raises:
        ValueError: fewer than two raters.

    Examples:
        >>> labels = pl.DataFrame({"case_id": ["a", "a", "b", "b", "c", "c"],
        ...     "output_hash": None, "rater": ["ana", "ben"] * 3, "label": [4, 4, 2, 3, 5, 5],
        ...     "scorer": "judge"})
        >>> human_agreement(labels).pairwise.select("rater_a", "rater_b", "n", "kappa").row(0)
        ('ana', 'ben', 3, 0.5714285714285714)
    """
    if scorer is not None:
        labels = labels.filter(pl.col("scorer") == scorer)
    labels = labels.with_columns(pl.col("output_hash", "case_id").cast(pl.String))
    if outputs is not None:
        labels = _on_outputs(labels, outputs)
    long = labels.select(
        pl.coalesce("output_hash", "case_id").alias("item"),
        "rater",
        pl.col("label").cast(pl.Int64),
    )
    return agreement.rater_agreement(long, level=level)


def _on_outputs(labels: pl.DataFrame, outputs: pl.DataFrame) -> pl.DataFrame:
    """The labels on these outputs, case-level ones pinned to the case's replay-0 output."""
    texts = outputs.filter(pl.col("text").is_not_null()).with_columns(
        pl.col("text").map_elements(output_hash, return_dtype=pl.String).alias("_hash")
    )
    pins = texts.filter(pl.col("replay") == 0).select("case_id", pl.col("_hash").alias("_pin"))
    return (
        labels.join(pins, on="case_id", how="left")
        .sort(pl.col("output_hash").is_null(), maintain_order=True)
        .with_columns(pl.coalesce("output_hash", "_pin").alias("output_hash"))
        .filter(pl.col("output_hash").is_in(texts["_hash"].unique().implode()))
        .unique(["output_hash", "rater"], keep="first", maintain_order=True)
        .drop("_pin")
    )

"""LLMBar (MIT, shipped as a compact derived copy in ``data/llmbar``): 419 expert-labelled
pairwise items with GPT-4 verdicts in both presentation orders under 8 prompting strategies, and
the paper's Table 2 figures, which :func:`llmbar_table` reproduces exactly.

:func:`load_llmbar` reads the shipped copy, or the upstream folder layout when given one;
:func:`derive_llmbar` writes the compact copy from the upstream files. Verdicts: ``1`` = output 1
is better, ``2`` = output 2 is better.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import polars as pl

from evalkit.errors import EvalkitError
from evalkit.judges import agreement
from evalkit.judges.published import REPO, read_json, round_half_up

__all__ = [
    "LLMBAR_STRATEGIES",
    "LLMBAR_SUBSETS",
    "LLMBAR_TABLE2_GPT4",
    "derive_llmbar",
    "llmbar_dir",
    "llmbar_mismatches",
    "llmbar_statistics",
    "llmbar_table",
    "load_llmbar",
]


#: LLMBar subsets in the order of the paper's Table 2.
LLMBAR_SUBSETS: tuple[str, ...] = (
    "Natural",
    "Adversarial/Neighbor",
    "Adversarial/GPTInst",
    "Adversarial/GPTOut",
    "Adversarial/Manual",
)


#: Strategy folder names in the order of the paper's Table 2 (Vanilla, Vanilla*, CoT*, ...).
LLMBAR_STRATEGIES: tuple[str, ...] = (
    "Vanilla_NoRules",
    "Vanilla",
    "CoT",
    "Swap",
    "Swap_CoT",
    "Metrics",
    "Reference",
    "Metrics_Reference",
)


_T2_COLUMNS = (*LLMBAR_SUBSETS, "Adversarial avg", "Average")


# LLMBar paper Table 2, GPT-4 rows: (Acc., Agr.) per column of _T2_COLUMNS, percent, 1 dp.
# Per-subset cells are the authors' statistics.json (correct_average, equal) rounded half-up;
# the averages are unweighted means of the unrounded subset figures.
_T2 = {
    "Vanilla_NoRules": (
        (93.5, 97.0), (64.2, 89.6), (76.6, 90.2), (76.6, 87.2),
        (75.0, 89.1), (73.1, 89.0), (77.2, 90.6),
    ),
    "Vanilla": (
        (95.5, 95.0), (78.7, 93.3), (86.4, 94.6), (77.7, 93.6),
        (80.4, 82.6), (80.8, 91.0), (83.7, 91.8),
    ),
    "CoT": (
        (94.5, 91.0), (75.0, 90.3), (83.2, 90.2), (74.5, 87.2),
        (73.9, 82.6), (76.6, 87.6), (80.2, 88.3),
    ),
    "Swap": (
        (94.5, 97.0), (77.6, 97.0), (88.0, 95.7), (73.4, 97.9),
        (81.5, 93.5), (80.1, 96.0), (83.0, 96.2),
    ),
    "Swap_CoT": (
        (94.0, 100.0), (78.7, 99.3), (85.3, 96.7), (79.8, 97.9),
        (77.2, 93.5), (80.3, 96.8), (83.0, 97.5),
    ),
    "Metrics": (
        (93.0, 94.0), (83.2, 93.3), (89.7, 90.2), (73.4, 89.4),
        (81.5, 80.4), (82.0, 88.3), (84.2, 89.5),
    ),
    "Reference": (
        (95.5, 97.0), (80.6, 89.6), (87.5, 90.2), (77.7, 85.1),
        (84.8, 87.0), (82.6, 88.0), (85.2, 89.8),
    ),
    "Metrics_Reference": (
        (96.0, 96.0), (85.4, 94.8), (89.7, 90.2), (72.3, 83.0),
        (83.7, 84.8), (82.8, 88.2), (85.4, 89.8),
    ),
}  # fmt: skip


#: {strategy: {column: (acc, agr)}} for the GPT-4 rows of LLMBar Table 2.
LLMBAR_TABLE2_GPT4: dict[str, dict[str, tuple[float, float]]] = {
    s: dict(zip(_T2_COLUMNS, cells, strict=True)) for s, cells in _T2.items()
}


def llmbar_dir(root: str | Path | None = None) -> Path:
    """The LLMBar folder: ``root``, else ``$EVALKIT_LLMBAR_DIR``, else the shipped compact copy.

    Two layouts are read. The shipped one (``data/llmbar``, written by :func:`derive_llmbar`):
    ``items.jsonl`` and ``statistics.json``. The upstream one (a checkout's ``Dataset/LLMBar``):
    ``<subset>/[evaluators/]GPT-4/<strategy>/{result,statistics}.json``.

    Examples:
        >>> llmbar_dir().name
        'llmbar'
    """
    path = Path(root or os.environ.get("EVALKIT_LLMBAR_DIR") or REPO / "data" / "llmbar")
    if _is_compact(path) or (path.is_dir() and any(path.glob("**/result.json"))):
        return path
    raise EvalkitError(
        f"{path}: no LLMBar data (neither {_LLMBAR_ITEMS} nor result.json files); pass the folder "
        "(LLMBAR_DIR in the notebook) or set EVALKIT_LLMBAR_DIR"
    )


_LLMBAR_ITEMS = "items.jsonl"


_LLMBAR_STATS = "statistics.json"


# statistics.json fields kept in the compact copy; the kappa_* fields are not agreement figures.
_LLMBAR_STAT_FIELDS = ("correct_False", "correct_True", "correct_average", "correct_both", "equal")


def _is_compact(path: Path) -> bool:
    return (path / _LLMBAR_ITEMS).is_file() and (path / _LLMBAR_STATS).is_file()


def _subsets(root: Path, evaluator: str) -> dict[str, Path]:
    """Upstream layout: {subset: folder holding one sub-folder per strategy}. Accepts the
    ``evaluators/`` level of an upstream checkout (``Natural/evaluators/GPT-4``) or not."""
    found: dict[str, Path] = {}
    for p in root.glob(f"**/{evaluator}"):
        rel = p.parent.relative_to(root)
        if rel.name == "evaluators":
            rel = rel.parent
        found[rel.as_posix()] = p
    return _ordered(found, LLMBAR_SUBSETS)


def _ordered(found: dict[str, Any], order: Sequence[str]) -> dict[str, Any]:
    known = [k for k in order if k in found]
    return {k: found[k] for k in known + sorted(set(found) - set(known))}


def _select(found: Iterable[str], wanted: Iterable[str] | None, what: str, root: Path) -> list[str]:
    found = list(found)
    if wanted is None:
        return found
    wanted = [wanted] if isinstance(wanted, str) else list(wanted)
    missing = [w for w in wanted if w not in found]
    if missing:
        raise EvalkitError(f"{root}: no {what} {missing}; found {found}")
    return wanted


def _strategies(base: Path) -> list[str]:
    found = {p.name: p for p in base.iterdir() if (p / "result.json").is_file()}
    return list(_ordered(found, LLMBAR_STRATEGIES))


def _upstream_records(file: Path) -> list[tuple[str, str, str, int, int, int]]:
    """(input, output_1, output_2, label, winner_noswap, winner_swap) per record of a
    ``result.json``; the verdict is the *last* element of ``results``."""
    out = []
    for i, rec in enumerate(read_json(file)):
        last = rec["results"][-1]
        try:
            w = [int(last[f"swap = {s}"]["winner"]) for s in ("False", "True")]
        except (KeyError, TypeError, ValueError) as exc:
            raise EvalkitError(f"{file}: item {i}: no verdict in results[-1] ({exc})") from exc
        out.append((rec["input"], rec["output_1"], rec["output_2"], int(rec["label"]), *w))
    return out


def _compact_items(path: Path, evaluator: str) -> dict[str, list[dict[str, Any]]]:
    """Shipped layout: {subset: [item record, ...]} from ``items.jsonl``."""
    meta = read_json(path / _LLMBAR_STATS)
    if meta.get("evaluator") != evaluator:
        raise EvalkitError(
            f"{path / _LLMBAR_STATS}: holds evaluator {meta.get('evaluator')!r}, not {evaluator!r}"
        )
    file = path / _LLMBAR_ITEMS
    by_subset: dict[str, list[dict[str, Any]]] = {}
    try:
        lines = file.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise EvalkitError(f"{file}: cannot read ({exc})") from exc
    for n, line in enumerate(lines, 1):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise EvalkitError(f"{file}:{n}: not JSON ({exc})") from exc
        by_subset.setdefault(rec["subset"], []).append(rec)
    return _ordered(by_subset, LLMBAR_SUBSETS)


def load_llmbar(
    root: str | Path | None = None,
    strategies: str | Sequence[str] | None = None,
    subsets: str | Sequence[str] | None = None,
    evaluator: str = "GPT-4",
) -> pl.DataFrame:
    """LLMBar items with the judge's verdict in both orders: one row per (subset, strategy, item).

    Columns: ``subset`` ("Natural", "Adversarial/Neighbor", ...), ``strategy`` (folder name),
    ``item`` (0-based position in the subset), ``input, output_1, output_2, label`` (gold, 1|2),
    ``winner_noswap`` (outputs shown as given), ``winner_swap`` (shown swapped), ``len_1, len_2``
    (characters). Winners come from the *last* element of each record's ``results`` (earlier
    elements are intermediate generations) and are already in the original numbering.

    Examples:
        >>> df = load_llmbar(strategies="CoT")
        >>> df.group_by("subset", maintain_order=True).len()["len"].to_list()
        [100, 134, 92, 47, 46]
    """
    path = llmbar_dir(root)
    keys: tuple[str, ...] = ("subset", "strategy", "item", "input", "output_1", "output_2", "label")
    keys += ("winner_noswap", "winner_swap")
    rows: dict[str, list[Any]] = {k: [] for k in keys}

    def add(sub: str, strat: str, records: Iterable[tuple[Any, ...]]) -> None:
        for i, rec in enumerate(records):
            for key, value in zip(rows, (sub, strat, i, *rec), strict=True):
                rows[key].append(value)

    if _is_compact(path):
        items = _compact_items(path, evaluator)
        for sub in _select(items, subsets, "subsets", path):
            found = _ordered(dict.fromkeys(items[sub][0]["verdicts"]), LLMBAR_STRATEGIES)
            for strat in _select(found, strategies, "strategies", path / sub):
                add(sub, strat, _compact_records(items[sub], strat))
    else:
        bases = _subsets(path, evaluator)
        for sub in _select(bases, subsets, "subsets", path):
            base = bases[sub]
            for strat in _select(_strategies(base), strategies, "strategies", base):
                add(sub, strat, _upstream_records(base / strat / "result.json"))
    return pl.DataFrame(rows, schema_overrides={"item": pl.Int64, "label": pl.Int64}).with_columns(
        pl.col("output_1").str.len_chars().alias("len_1"),
        pl.col("output_2").str.len_chars().alias("len_2"),
    )


def _compact_records(items: list[dict[str, Any]], strat: str) -> Iterable[tuple[Any, ...]]:
    for r in items:
        w = r["verdicts"][strat]
        yield (r["input"], r["output_1"], r["output_2"], int(r["label"]), int(w[0]), int(w[1]))


_PERCENT = re.compile(r"(?:(\d+) / (\d+) = )?([\d.]+)%")


def _percent(text: str, file: Path) -> tuple[float, int | None, int | None]:
    m = _PERCENT.fullmatch(text.strip())
    if not m:
        raise EvalkitError(f"{file}: cannot parse {text!r} as a percentage")
    k, n = (int(m[1]), int(m[2])) if m[1] else (None, None)
    return float(m[3]), k, n


def _raw_statistics(path: Path, evaluator: str) -> dict[tuple[str, str], tuple[Path, dict]]:
    """{(subset, strategy): (file, statistics fields)} from either layout."""
    if _is_compact(path):
        file = path / _LLMBAR_STATS
        meta = read_json(file)
        if meta.get("evaluator") != evaluator:
            raise EvalkitError(f"{file}: holds evaluator {meta.get('evaluator')!r}")
        subs = _ordered(meta["statistics"], LLMBAR_SUBSETS)
        return {
            (sub, strat): (file, fields)
            for sub, by_strat in subs.items()
            for strat, fields in sorted(by_strat.items())
        }
    return {
        (sub, file.parent.name): (file, read_json(file))
        for sub, base in _subsets(path, evaluator).items()
        for file in sorted(base.glob("*/statistics.json"))
    }


def llmbar_statistics(root: str | Path | None = None, evaluator: str = "GPT-4") -> pl.DataFrame:
    """The authors' own figures (``statistics.json``): one row per (subset, strategy).

    Columns: ``subset, strategy, n, acc`` (``correct_average``, percent), ``agr`` (``equal``,
    percent), ``agree`` (items with the same verdict in both orders). The ``kappa_*`` fields are
    skipped: the authors' script maps winner 2 to 0 before computing them, so they are not
    agreement figures.

    Examples:
        >>> llmbar_statistics().row(0)
        ('Natural', 'CoT', 100, 94.5, 91.0, 91)
    """
    rows = []
    for (sub, strat), (file, stats) in _raw_statistics(llmbar_dir(root), evaluator).items():
        acc, _, _ = _percent(stats["correct_average"], file)
        agr, agree, n = _percent(stats["equal"], file)
        rows.append(
            {"subset": sub, "strategy": strat, "n": n, "acc": acc, "agr": agr, "agree": agree}
        )
    return pl.DataFrame(rows)


def derive_llmbar(upstream: str | Path, out: str | Path, evaluator: str = "GPT-4") -> Path:
    """Write the compact copy shipped in ``data/llmbar`` from the upstream files.

    ``upstream`` is a checkout's ``Dataset/LLMBar`` (or the same files without the
    ``evaluators/`` level). Writes ``out/items.jsonl`` (one line per item: ``subset, item,
    input, output_1, output_2, label`` and ``verdicts`` = {strategy: [winner_noswap,
    winner_swap]}) and ``out/statistics.json`` (the authors' figures without the ``kappa_*``
    fields). Refuses upstream files whose items differ between strategies. Returns ``out``.
    """
    src, dest = Path(upstream), Path(out)
    bases = _subsets(src, evaluator)
    if not bases:
        raise EvalkitError(f"{src}: no <subset>/{evaluator} folders")
    lines: list[str] = []
    stats: dict[str, dict[str, dict[str, str]]] = {}
    for sub, base in bases.items():
        items: list[dict[str, Any]] | None = None
        for strat in _strategies(base):
            records = _upstream_records(base / strat / "result.json")
            if items is None:
                items = [
                    {"subset": sub, "item": i, "input": r[0], "output_1": r[1], "output_2": r[2]}
                    | {"label": r[3], "verdicts": {}}
                    for i, r in enumerate(records)
                ]
            if [(it["input"], it["output_1"], it["output_2"], it["label"]) for it in items] != [
                r[:4] for r in records
            ]:
                raise EvalkitError(f"{base / strat / 'result.json'}: items differ from {sub}'s")
            for it, r in zip(items, records, strict=True):
                it["verdicts"][strat] = [r[4], r[5]]
            fields = read_json(base / strat / "statistics.json")
            stats.setdefault(sub, {})[strat] = {
                k: fields[k] for k in _LLMBAR_STAT_FIELDS if k in fields
            }
        lines += [json.dumps(it, ensure_ascii=False) for it in items or []]
    dest.mkdir(parents=True, exist_ok=True)
    (dest / _LLMBAR_ITEMS).write_text("\n".join(lines) + "\n", encoding="utf-8")
    meta = {"evaluator": evaluator, "statistics": stats}
    (dest / _LLMBAR_STATS).write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    return dest


def llmbar_table(frame: pl.DataFrame, ndigits: int | None = 1) -> pl.DataFrame:
    """LLMBar Table 2 from a :func:`load_llmbar` frame: one row per (strategy, column).

    ``acc`` = mean over both presentation orders of [winner == label]; ``agr`` = share of items
    with the same winner in both orders (:func:`evalkit.judges.agreement.order_summary`). Columns:
    the
    five subsets, then "Adversarial avg" (unweighted mean over the four adversarial subsets) and
    "Average" (over all five). Percent, rounded half-up from exact fractions to ``ndigits``
    (``None`` keeps full precision).

    Examples:
        >>> t = llmbar_table(load_llmbar(strategies="Vanilla_NoRules"))
        >>> t.filter(pl.col("column") == "Average").row(0)
        ('Vanilla_NoRules', 'Average', 77.2, 90.6)
    """
    rows = []
    for (strat,), part in frame.group_by(["strategy"], maintain_order=True):
        cells: dict[str, tuple[Fraction, Fraction]] = {}
        for (sub,), g in part.group_by(["subset"], maintain_order=True):
            s = agreement.order_summary(g["label"], g["winner_noswap"], g["winner_swap"])
            acc = Fraction(s.correct_ab + s.correct_ba, 2 * s.n)
            cells[str(sub)] = (acc, Fraction(s.consistent, s.n))
        adv = [c for k, c in cells.items() if k.startswith("Adversarial/")]
        if adv:
            cells["Adversarial avg"] = _mean_cells(adv)
        cells["Average"] = _mean_cells([c for k, c in cells.items() if k != "Adversarial avg"])
        for col, (acc, agr) in cells.items():
            out = [100 * acc, 100 * agr]
            fmt = [float(v) if ndigits is None else round_half_up(v, ndigits) for v in out]
            rows.append((strat, col, *fmt))
    return pl.DataFrame(rows, schema=["strategy", "column", "acc", "agr"], orient="row")


def _mean_cells(cells: list[tuple[Fraction, Fraction]]) -> tuple[Fraction, Fraction]:
    return (
        sum((c[0] for c in cells), Fraction(0)) / len(cells),
        sum((c[1] for c in cells), Fraction(0)) / len(cells),
    )


def llmbar_mismatches(
    frame: pl.DataFrame, strategy: str, root: str | Path | None = None
) -> dict[str, tuple[Any, Any]]:
    """LLMBar Table 2 cells for ``strategy`` that ``frame`` does *not* reproduce.

    Compares :func:`llmbar_table` (1 dp, half-up) with ``LLMBAR_TABLE2_GPT4`` and, per subset,
    with the authors' ``statistics.json`` under ``root``. {cell: (got, published)}; empty when
    everything reproduces.
    """
    table = llmbar_table(frame.filter(pl.col("strategy") == strategy))
    got = {col: (acc, agr) for _, col, acc, agr in table.iter_rows()}
    out = {k: (got.get(k), v) for k, v in LLMBAR_TABLE2_GPT4[strategy].items() if got.get(k) != v}
    authors = llmbar_statistics(root).filter(pl.col("strategy") == strategy)
    for sub, acc, agr in authors.select("subset", "acc", "agr").iter_rows():
        theirs = (round_half_up(acc), round_half_up(agr))
        if got.get(sub) != theirs:
            out[f"statistics.json {sub}"] = (got.get(sub), theirs)
    return out

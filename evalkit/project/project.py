"""`Project`: the notebook's and script's front door to one evalkit project.

It finds the project's ``evalkit.yaml`` as the CLI does (``./evalkit.yaml``, else
``corpus/evalkit.yaml``; from a project's ``notebooks/`` folder, the folder above), keeps its
store at ``data/evalkit.duckdb`` beside it, and calls the functions the CLI calls: a run is
planned and checked as ``evalkit run`` plans it (`evalkit.project.planning`), a pair is
compared and gated through the one `evalkit.compare.pin.gate_pair`.

Examples:
    >>> import evalkit
    >>> project = evalkit.Project(".")                                   # doctest: +SKIP
    >>> base = project.run(label="baseline")                             # doctest: +SKIP
    >>> cand = project.run(label="candidate", prompt="prompts/v2.md")    # doctest: +SKIP
    >>> project.compare(base, cand).decision.status                      # doctest: +SKIP
    'BLOCKED'
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalkit.corpus.config_files import CONFIG_NAMES, find_config, resolve_config
from evalkit.errors import ConfigError
from evalkit.project.labels import Labels
from evalkit.project.loop import run_sync
from evalkit.project.results import ComparisonResult, RunResult
from evalkit.run.summary import rate_basis
from evalkit.run_manifest import RunManifest

if TYPE_CHECKING:
    import polars as pl

    from evalkit.compare.decision import GateDecision
    from evalkit.run.runner import RunStart
    from evalkit.store import Store
    from evalkit.trends.values import History

#: The store's place in a project, as the CLI's ``--db`` default.
STORE_PATH = Path("data") / "evalkit.duckdb"
#: A run, by its result, its id, an id prefix, its label or ``label@latest``.
RunRef = RunResult | str


class Project:
    """One evalkit project: its suite config, its store, its runs.

    Args:
        path: the project folder, a folder below it (``notebooks/``) or its ``evalkit.yaml``.
        db: the store (default: ``data/evalkit.duckdb`` in the project folder). Given a store,
            a project without a config still reads, compares and gates (under the pinned or
            the default policy, as ``evalkit compare`` without one); it cannot run.

    Raises:
        ConfigError: no ``evalkit.yaml`` there (nor in ``corpus/``, nor in the folder above),
            and no ``db``.
    """

    def __init__(self, path: str | Path = ".", *, db: str | Path | None = None) -> None:
        given = Path(path)
        found = find_config(given, parents=1) if given.is_dir() else resolve_config(given)
        if found is not None and not found.is_file():
            found = None
        if found is None and db is None:
            names = " or ".join(CONFIG_NAMES)
            raise ConfigError(
                f"{given.resolve()}: no suite config ({names}) here or in the folder above; "
                "pass the project folder, evalkit.Project(PATH), or write one: evalkit init"
            )
        self.config = found.resolve() if found is not None else None
        folder = self.config.parent if self.config is not None else given.resolve()
        # corpus/evalkit.yaml (this repository's layout): the project is the folder above
        self.root = folder.parent if folder.name == "corpus" else folder
        self.db = Path(db).resolve() if db is not None else self.root / STORE_PATH
        self.labels = Labels(self.root, self.config, self.db)

    def __repr__(self) -> str:
        config = str(self.config) if self.config else None
        return f"Project({str(self.root)!r}, config={config!r}, db={str(self.db)!r})"

    def _config(self) -> Path:
        if self.config is None:
            raise ConfigError(
                f"{self.root}: no suite config (evalkit.yaml) for this project, so it cannot "
                "run; pass the folder that holds one: evalkit.Project(PATH)"
            )
        return self.config

    def store(self) -> Store:
        """The project's store for reading (`evalkit.open_store`: never locks it)."""
        from evalkit.store import open_store

        return open_store(self.db)

    def path(self, name: str | Path) -> Path:
        """``name`` as given when absolute or found from the working directory, else in the
        project folder (``prompts/v2.md`` works from ``notebooks/``)."""
        given = Path(name)
        if given.is_absolute() or given.exists():
            return given
        return self.root / given

    # running ---------------------------------------------------------------------------------

    def run(
        self,
        label: str = "run",
        *,
        prompt: str | Path | None = None,
        replays: int | None = None,
        tier: str | None = None,
        tags: Sequence[str] = (),
        exclude_tags: Sequence[str] = (),
        sealed: bool = False,
        concurrency: int | None = None,
        cache: bool | None = None,
        progress: bool = True,
        **overrides: Any,
    ) -> RunResult:
        """Run the suite and store it, as ``evalkit run`` does; works in a Jupyter cell.

        ``overrides`` are ``--set`` values, a dot spelled ``__``:
        ``project.run(system__model="gpt-4.1-mini")`` is ``--set system.model=gpt-4.1-mini``.
        """
        return run_sync(
            self.run_async(
                label, prompt=prompt, replays=replays, tier=tier, tags=tags,
                exclude_tags=exclude_tags, sealed=sealed, concurrency=concurrency, cache=cache,
                progress=progress, **overrides,
            )
        )  # fmt: skip

    async def run_async(
        self,
        label: str = "run",
        *,
        prompt: str | Path | None = None,
        replays: int | None = None,
        tier: str | None = None,
        tags: Sequence[str] = (),
        exclude_tags: Sequence[str] = (),
        sealed: bool = False,
        concurrency: int | None = None,
        cache: bool | None = None,
        progress: bool = True,
        **overrides: Any,
    ) -> RunResult:
        """`run`, awaited: ``result = await project.run_async(label="nightly")``."""
        from evalkit.project.planning import plan_run
        from evalkit.run.runner import RunOptions, run_suite_async
        from evalkit.run.shared_cache import publish_new_cache, with_shared_cache
        from evalkit.store import open_store

        if str(self.root) not in sys.path:  # a `provider: python` system's module, as from
            sys.path.insert(0, str(self.root))  # the project folder (`evalkit run` there)
        plan = plan_run(
            self._config(), overrides=set_items(overrides),
            prompt=self.path(prompt) if prompt is not None else None, tier=tier, tags=tags,
            exclude_tags=exclude_tags, sealed=sealed,
        )  # fmt: skip
        options = RunOptions(
            label=label, replays=replays, concurrency=concurrency, use_cache=cache,
            progress=progress, selection=plan.selection.to_manifest(), on_start=_announce,
            warnings=plan.warnings,
        )  # fmt: skip
        with open_store(self.db, write=True) as store:
            cache_store = with_shared_cache(store, plan.suite)
            summary = await run_suite_async(plan.suite, plan.corpus, cache_store, options)  # type: ignore[arg-type]
            summary = publish_new_cache(cache_store, summary)
        return RunResult(summary, str(self.db))

    # reading ---------------------------------------------------------------------------------

    def runs(self) -> pl.DataFrame:
        """The stored runs, oldest first: id, label, suite, status, ``pass_rate`` (per case,
        each case's verdict over its ``replays`` under the run's pass rule, majority by
        default: the rate ``evalkit run``, ``evalkit runs list`` and ``evalkit history``
        state, `evalkit.run.summary`), ``rate_basis`` (what it counts, in words), the cases
        passed, decided, unstable and errored, outputs, config."""
        import polars as pl

        from evalkit.store.history_queries import case_counts

        with self.store() as store:
            runs = store.runs()
            counted = case_counts(store, runs["run_id"].to_list())
        rows = []
        for row in runs.iter_rows(named=True):
            counts = json.loads(row["summary"] or "null") or {}
            manifest = RunManifest.from_stored(json.loads(row["manifest"] or "null") or {})
            cases = counted.get(row["run_id"])
            replays = manifest.replays
            rows.append({
                "run_id": row["run_id"], "label": row["label"], "suite": manifest.suite,
                "status": row["status"], "created_at": row["created_at"],
                "pass_rate": cases.rate if cases else None,
                "rate_basis": rate_basis(replays, cases.pass_rules if cases else None),
                "replays": replays, "cases": cases.cases if cases else None,
                "decided": cases.decided if cases else None,
                "passed": cases.passed if cases else None,
                "unstable": cases.unstable if cases else None,
                "errored": cases.errored if cases else None,
                "outputs": counts.get("outputs"), "config_hash": row["config_hash"][:12],
            })  # fmt: skip
        ints = ("replays", "cases", "decided", "passed", "unstable", "errored", "outputs")
        schema = {"pass_rate": pl.Float64} | dict.fromkeys(ints, pl.Int64)
        return pl.DataFrame(rows, schema_overrides=schema, infer_schema_length=None)

    def history(self, by: str = "baseline", **options: Any) -> History:
        """`evalkit.history` of this store: per promoted baseline (``by="baseline"``) or per
        label's complete runs (``by="label"``); options as ``evalkit history``'s."""
        from evalkit.trends.analysis import history

        with self.store() as store:
            return history(store, by=by, **options)  # type: ignore[arg-type]

    # comparing and gating --------------------------------------------------------------------

    def compare(
        self,
        baseline: RunRef | None,
        candidate: RunRef,
        *,
        allow_diff: Sequence[str] = (),
        tier: str | None = None,
        allow_incomplete: bool = False,
    ) -> ComparisonResult:
        """The comparison and decision ``evalkit compare BASELINE CANDIDATE`` makes (with
        ``baseline=None``, against the promoted baseline)."""
        from evalkit.report.build import build_report

        comparison, decision = self._gate_pair(
            baseline, candidate, allow_diff, tier, allow_incomplete, "project.compare"
        )
        report = replace(build_report(comparison, decision), command="compare")
        return ComparisonResult(comparison, decision, report)

    def gate(
        self,
        baseline: RunRef | None,
        candidate: RunRef,
        *,
        allow_diff: Sequence[str] = (),
        tier: str | None = None,
        allow_incomplete: bool = False,
    ) -> GateDecision:
        """The decision ``evalkit gate BASELINE CANDIDATE`` makes, without its notebook:
        ``.status`` (PASSED, BLOCKED, UNVERIFIED, PASSED WITH OVERRIDE), ``.blocked``,
        ``.findings``, ``.exit_code``."""
        return self._gate_pair(
            baseline, candidate, allow_diff, tier, allow_incomplete, "project.gate"
        )[1]

    def _gate_pair(
        self, baseline: RunRef | None, candidate: RunRef, allow_diff: Sequence[str],
        tier: str | None, allow_incomplete: bool, command: str,
    ) -> tuple[Any, GateDecision]:  # fmt: skip
        """The pair's decision, appended to the store's gate log (`evalkit.compare.decision_log`:
        a note on stderr when the store cannot be written; the decision stands)."""
        from evalkit.compare.decision_log import log_decision
        from evalkit.compare.pin import gate_pair

        with self.store() as store:
            comparison, decision = gate_pair(
                store, run_ref(baseline) if baseline is not None else None, run_ref(candidate),
                str(self.config) if self.config else None, list(allow_diff), tier=tier,
                allow_incomplete=allow_incomplete, db=str(self.db),
            )  # fmt: skip
        base, cand = comparison.base.run_id, comparison.cand.run_id
        note = log_decision(str(self.db), command, base, cand, decision.to_dict())
        if note:
            print(f"evalkit: note: {note}", file=sys.stderr)
        return comparison, decision


def run_ref(run: RunRef) -> str:
    """A run reference the store resolves: a result's run id, else the text as given."""
    return run.run_id if isinstance(run, RunResult) else str(run)


def set_items(overrides: dict[str, Any]) -> list[str]:
    """Keyword overrides as ``--set KEY=VALUE`` items (``__`` in a name is a dot).

    Examples:
        >>> set_items({"system__model": "m-2", "replays": 3})
        ['system.model="m-2"', 'replays=3']
    """
    return [f"{key.replace('__', '.')}={json.dumps(value)}" for key, value in overrides.items()]


def _announce(start: RunStart) -> None:
    """What ``evalkit run`` says before the first request, under the cell (stderr)."""
    what = (
        f"resuming run {start.run_id} ({start.label})"
        if start.resumed
        else f"run {start.run_id} ({start.label}) started: {start.expected_outputs} outputs"
    )
    print(f"evalkit: {what}" + ("" if start.use_cache else ", cache off"), file=sys.stderr)
    for warning in start.warnings:
        print(f"evalkit: warning: {warning}", file=sys.stderr)

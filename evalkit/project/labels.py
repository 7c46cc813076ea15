"""``project.labels``: human labels for judge calibration, as ``evalkit labels export`` and
``evalkit labels import`` write and read them, and the labelling notebook's session.

A rubric the judge's scores name is looked for in the project folder and beside its
``evalkit.yaml``, wherever the notebook runs; an error names the notebook parameter to set.

Examples:
    >>> sheet = project.labels.export("labels.csv", run="baseline", rater="ana")  # doctest: +SKIP
    >>> project.labels.import_("labels.csv", run="baseline").labels               # doctest: +SKIP
    120
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from evalkit.judges.labelling import LabelSample, Stratify
    from evalkit.judges.labelling_session import LabellingSession
    from evalkit.judges.labels import LabelImport

#: The labelling notebook's parameters, named in its errors instead of the CLI's options.
NOTEBOOK_NAMES = ("RUBRIC", "SCORER")


class Labels:
    """The project's human labels: export a sheet, import it, label in a notebook."""

    def __init__(self, root: Path, config: Path | None, db: Path) -> None:
        self.root, self.config, self.db = root, config, db

    def roots(self) -> list[Path]:
        """Where a rubric path recorded with the scores is looked for: the working directory,
        the project folder, the config's folder and the project's ``corpus/``."""
        config = [self.config.parent] if self.config is not None else []
        return list(dict.fromkeys([Path.cwd(), self.root, *config, self.root / "corpus"]))

    def sample(
        self, run: str = "baseline", *, sample: int = 120, stratify: Stratify = "tag",
        scorer: str = "judge", seed: int = 0, rubric: str | Path | None = None,
    ) -> LabelSample:  # fmt: skip
        """The stratified, seeded sample of the run's judged outputs that raters label."""
        from evalkit.judges.labelling import sample_outputs
        from evalkit.store import open_store

        with open_store(self.db) as store:
            return sample_outputs(
                store, run, sample=sample, stratify=stratify, scorer=scorer, seed=seed,
                rubric=self._rubric(rubric), roots=self.roots(),
            )  # fmt: skip

    def export(
        self, path: str | Path, run: str = "baseline", *, rater: str | None = None,
        **sample: Any,
    ) -> Path:  # fmt: skip
        """Write the labelling sheet (``.csv`` or ``.jsonl``), as ``evalkit labels export``;
        ``sample`` takes `sample`'s options."""
        from evalkit.judges.labelling import write_sheet

        return write_sheet(self.sample(run, **sample), path, rater=rater)

    def import_(self, path: str | Path, run: str | None = None) -> LabelImport:
        """Store a filled-in sheet's labels, as ``evalkit labels import`` (pinned to ``run``'s
        outputs when given). Holds the store's writer lock only while it writes."""
        from evalkit.judges.labels import import_labels
        from evalkit.store import open_store

        with open_store(self.db, write=True) as store:
            return import_labels(store, path, run=run)

    def session(
        self, run: str, rater: str, *, sample: int = 120, stratify: Stratify = "tag",
        scorer: str = "judge", seed: int = 0, rubric: str | Path | None = None,
    ) -> LabellingSession:  # fmt: skip
        """A blind labelling session for ``rater`` (the labelling notebook's): each label is
        stored as it is given; an error names the notebook's parameters (``RUBRIC``)."""
        from evalkit.judges.labelling import SettingNames
        from evalkit.judges.labelling_session import open_labelling

        return open_labelling(
            self.db, run, rater, sample=sample, stratify=stratify, scorer=scorer,
            seed=seed, rubric=self._rubric(rubric), roots=self.roots(),
            names=SettingNames(*NOTEBOOK_NAMES),
        )  # fmt: skip

    @staticmethod
    def show(session: LabellingSession) -> Any:
        """The labelling card (ipywidgets; static without them)."""
        from evalkit.judges.labelling_widget import show_labelling

        return show_labelling(session)

    def _rubric(self, rubric: str | Path | None) -> Path | None:
        """A rubric named from the working directory, else from the project folder."""
        if not rubric:
            return None
        given = Path(rubric)
        return given if given.is_absolute() or given.exists() else self.root / given

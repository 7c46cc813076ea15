"""The one way a test gets a project: :func:`make_project` (and the ``project_factory`` fixture
of tests/conftest.py, which gives each test its own under ``tmp_path``).

A project is what ``evalkit init`` writes (six cases, the demo model) or a copy of the demo
suite in ``corpus/`` (``demo=True``), pointed at a demo simulator when given one, with the
cases and configuration a test adds, and the store the test's commands use. Commands run
in-process through :meth:`Project.cli` (``evalkit.cli.main``): no process is started.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from evalkit.cli import main
from evalkit.cli.init import init_project
from evalkit.demo.server import DemoServer

REPO = Path(__file__).resolve().parents[1]
#: The endpoint ``evalkit init`` writes into evalkit.yaml (where ``evalkit demo serve`` listens).
INIT_BASE_URL = "http://127.0.0.1:8765/v1"


@dataclass(frozen=True)
class Project:
    """A project on disk: its folder, the store its commands use, and the simulator (if any)
    they talk to through ``--set system.base_url=``."""

    root: Path
    db: Path
    base_url: str | None = None

    @property
    def config(self) -> Path:
        return self.root / "evalkit.yaml"

    @property
    def cases(self) -> Path:
        return self.root / "cases"

    @property
    def sets(self) -> list[str]:
        """The ``--set`` flags that point the system (and the demo suite's judge) at the
        simulator; none without one."""
        if self.base_url is None:
            return []
        judge = ["--set", f"judge.base_url={self.base_url}"] if self._has_judge() else []
        return ["--set", f"system.base_url={self.base_url}", *judge]

    @property
    def args(self) -> list[str]:
        """``--config``, ``--db`` and :attr:`sets`: what a run, rescore or flake measurement
        of this project takes."""
        return ["--config", str(self.config), "--db", str(self.db), *self.sets]

    def cli(self, *words: str) -> int:
        """``evalkit WORDS`` in this process; its exit code."""
        return main([str(w) for w in words])

    def run(self, label: str, *extra: str) -> int:
        """``evalkit run --label LABEL`` of this project (no progress bar); its exit code."""
        return self.cli("run", "--label", label, "--no-progress", *self.args, *extra)

    def add_cases(self, name: str, text: str) -> Path:
        """Write ``text`` as ``cases/NAME`` (a YAML list of cases); the file."""
        path = self.cases / name
        path.write_text(text, encoding="utf-8")
        return path

    def add_config(self, text: str) -> None:
        """Append ``text`` (YAML keys) to evalkit.yaml."""
        self.config.write_text(self.config.read_text(encoding="utf-8") + text, encoding="utf-8")

    def _has_judge(self) -> bool:
        return any(
            line.startswith("judge:")
            for line in self.config.read_text(encoding="utf-8").split("\n")
        )


def make_project(
    root: Path,
    *,
    server: DemoServer | None = None,
    demo: bool = False,
    db: Path | None = None,
    cases: Mapping[str, str] | None = None,
    keep_cases: bool = True,
    config: str = "",
    url_in_config: bool = False,
    runs: Sequence[str] = (),
) -> Project:
    """A project at ``root``.

    Args:
        root: the folder (created; must not hold a project yet).
        server: the simulator the project's commands talk to (through ``--set``).
        demo: copy the demo suite (``corpus/``: 80-odd cases, tools, a judge) instead of what
            ``evalkit init`` writes.
        db: the store (default: ``e.duckdb`` beside ``root``).
        cases: more case files, ``{file name: YAML}``, written into ``cases/``.
        keep_cases: False removes the cases the scaffold came with first.
        config: YAML appended to evalkit.yaml (a judge, a shared store, a gate policy).
        url_in_config: write ``server``'s address into evalkit.yaml itself, for code that
            loads the config without ``--set`` (notebooks, ``evalkit.Project``); the
            project's commands then take no ``--set`` either.
        runs: labels to run, in order, before the project is handed over (each must exit 0).
    """
    if demo:
        shutil.copytree(REPO / "corpus", root, ignore=shutil.ignore_patterns(".evalkit"))
    else:
        init_project(root)
    project = Project(root, db or root.parent / "e.duckdb", server.base_url if server else None)
    if not keep_cases:
        for path in project.cases.glob("*.yaml"):
            path.unlink()
    for name, text in (cases or {}).items():
        project.add_cases(name, text)
    if config:
        project.add_config(config)
    if url_in_config:
        if server is None:
            raise ValueError("url_in_config needs a server")
        text = project.config.read_text(encoding="utf-8")
        project.config.write_text(text.replace(INIT_BASE_URL, server.base_url), encoding="utf-8")
        project = Project(project.root, project.db)
    for label in runs:
        code = project.run(label)
        if code != 0:
            raise AssertionError(f"evalkit run --label {label} of {root} exited {code}")
    return project

"""Shared pytest fixtures. Keep each fixture small and documented.

Everything a test reads lives inside this repository (``tests/test_self_contained.py`` checks):
the published judge-agreement data is ``data/pandalm`` and ``data/llmbar``.
"""

from __future__ import annotations

import gc
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from projects import Project, make_project

from evalkit.demo.server import DemoServer, start_demo_server
from evalkit.judges import llmbar as llmbar_set
from evalkit.judges import published
from evalkit.records import ChatRequest, Completion

REPO = Path(__file__).resolve().parents[1]

# The suite fails if a process a test started outlives the session (tests/process_guard.py).
pytest_plugins = ["process_guard"]

#: The session's bytecode cache when it is a temporary one of its own (None otherwise).
_PYCACHE: Path | None = None
#: In the virtualenv's cache, where the bytecode of modules in temporary folders goes (the
#: scratch projects, the fresh clone): no later session finds those paths again, so the session
#: that set the cache up removes it at its end (~5 MB a session otherwise kept).
_SCRATCH_PYCACHE: Path | None = None


def _venv_bytecode_cache() -> Path | None:
    """``pycache`` in the virtualenv the tests run in (``make test`` makes ``.venv``, which git
    ignores), or None outside a writable one. A second ``make test`` finds every module of
    evalkit, its dependencies and the tests compiled there: with a prefix set, Python ignores
    the ``__pycache__`` folders pip wrote and compiles each module into the prefix once."""
    if sys.prefix == sys.base_prefix:
        return None
    cache = Path(sys.prefix) / "pycache"
    try:
        cache.mkdir(exist_ok=True)
    except OSError:
        return None
    return cache if os.access(cache, os.W_OK) else None


def pytest_configure(config: pytest.Config) -> None:
    """Give every Python process of the session one bytecode cache.

    With ``PYTHONDONTWRITEBYTECODE`` set (some shells and sandboxes set it) every ``evalkit``,
    kernel and worker process the tests start compiled each module it imports from source:
    ~0.3 s of CPU per CLI call, half of a small ``evalkit run``. A cache of the suite's own
    (``PYTHONPYCACHEPREFIX``: `_venv_bytecode_cache`, else a temporary folder deleted at the
    end) writes nothing git tracks. Processes started from here inherit it: the xdist workers
    (started after this hook), the CLI subprocesses, a nested pytest session (which then keeps
    the cache it inherited).
    """
    global _PYCACHE, _SCRATCH_PYCACHE
    # One OpenBLAS thread for every process of the session (as evalkit gives its kernels,
    # `evalkit.notebooks._ThisPython`): the tests' BLAS calls are tiny, and the thread per core
    # that scipy's OpenBLAS starts spins ~0.2 s of CPU in each process importing it (workers,
    # `evalkit compare`/`history`, helpers), CPU the other tests on 2 cores wait for.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if os.environ.get("PYTHONPYCACHEPREFIX") or not os.environ.get("PYTHONDONTWRITEBYTECODE"):
        return  # a cache given, or the usual __pycache__ folders written and read
    cache = _venv_bytecode_cache()
    if cache is None:
        cache = _PYCACHE = Path(tempfile.mkdtemp(prefix="evalkit-test-pycache-"))
    else:
        _SCRATCH_PYCACHE = cache / Path(tempfile.gettempdir()).resolve().relative_to("/")
    os.environ["PYTHONPYCACHEPREFIX"] = str(cache)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.pycache_prefix = str(cache)
    sys.dont_write_bytecode = False


def pytest_unconfigure(config: pytest.Config) -> None:
    # after xdist's workers and every test's processes have exited
    for folder in (_PYCACHE, _SCRATCH_PYCACHE):
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


#: The files that take longest (wall time summed per file, measured with two workers on two
#: cores), longest first. Under ``make test`` (``--dist loadfile --no-loadscope-reorder``) each
#: file goes whole to the next free worker in collection order: these go first, so that the
#: many short files even out the workers' ends instead of one of these starting last (with
#: tests/store/test_shared_store.py, 26 s, left in collection order it was among the last).
SLOWEST_FILES = (
    "tests/run/test_ray_engine.py",
    "tests/test_nightly_workflow.py",
    "tests/test_docs_examples.py",
    "tests/test_notebooks.py",
    "tests/test_bench.py",
    "tests/run/test_reliability.py",
    "tests/store/test_shared_store.py",
    "tests/test_docs_ci.py",
    "tests/run/test_sharded.py",
    "tests/test_project_notebooks.py",
    "tests/corpus/test_chunked_parse.py",
    "tests/run/test_ray_cluster_commands.py",
    "tests/compare/test_pin_demo.py",
    "tests/run/test_rebaseline.py",
    "tests/store/test_shared_cache_compaction.py",
    "tests/run/test_hostile_endpoints.py",
    "tests/store/test_shared_cache_publish.py",
    "tests/scorers/test_executable.py",
    "tests/judges/test_labelling.py",
    "tests/test_architecture.py",
    "tests/run/test_secrets.py",
    "tests/test_self_contained.py",
    "tests/cli/test_onboarding.py",
    "tests/store/test_parts.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files of `SLOWEST_FILES` first, in its order; the rest, and each file's own tests,
    as collected."""
    rank = {path: i for i, path in enumerate(SLOWEST_FILES)}
    items.sort(key=lambda item: rank.get(item.nodeid.partition("::")[0], len(rank)))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Put what collection made out of the cyclic collector's reach (`gc.freeze`).

    Collecting imports every test module and what they import (~0.4 M objects: Ray, pyiceberg,
    polars, altair, scipy...), alive to the end. Each full collection walked them again: ~12
    to 22 per worker, 2-6 s of CPU per worker, little of it garbage.
    """
    gc.collect()  # what collection left unreachable is freed, not frozen
    gc.freeze()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """After each file, once its module fixtures are torn down, freeze what its tests left
    alive (modules they imported, caches).

    Frozen once at collection alone, full collections came more often, not less: Python runs
    one when the objects that survived since the last exceed a quarter of those it tracks, and
    freezing left it tracking few (one worker: 22 -> 53 full collections). Frozen objects are
    still freed by their reference counts; only a cycle among them is never collected, which is
    why this runs after the teardown (a wrapper: the fixtures' finalizers have run).
    """
    yield
    if nextitem is None or nextitem.path != item.path:
        gc.collect()
        gc.freeze()


#: The CI variables evalkit.provenance reads: a test suite run inside a pull-request job must
#: not make every record the tests write one of "this pull-request job".
CI_VARIABLES = ("GITHUB_", "GITLAB_CI", "CI_PIPELINE_SOURCE", "CI_MERGE_REQUEST_", "CI_JOB_ID",
                "CI_COMMIT_", "EVALKIT_CI_")  # fmt: skip


@pytest.fixture(autouse=True)
def _no_ci_context(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts outside any CI job; a test simulates one by setting its variables."""
    for name in list(os.environ):
        if name.startswith(CI_VARIABLES):
            monkeypatch.delenv(name)


@pytest.fixture
def registry() -> Iterator[None]:
    """Scorers a test registers (a suite's custom module, a scorer of its own) are removed
    again after it, so no other test sees them."""
    from evalkit.scorers.registry import SCORERS

    before = dict(SCORERS)
    yield
    SCORERS.clear()
    SCORERS.update(before)


@pytest.fixture(scope="session")
def demo_server() -> Iterator[DemoServer]:
    """A noise-free demo simulator on a free loopback port, shared by the session (each xdist
    worker starts one: ~0.2 s of CPU, which the 31 modules using it paid each when it was
    theirs). Its only state is its request counts: tests that count call
    ``demo_server.reset_stats()`` first.
    """
    with start_demo_server(noise=False) as server:
        yield server


@pytest.fixture
def demo_server_factory() -> Iterator[Callable[..., DemoServer]]:
    """Start simulators with custom options (``start_demo_server`` keywords); all stopped after.

    Each on a thread of the test's process unless ``in_thread=False``: a process of its own
    costs a second of start-up and adds nothing to a test of what talks to it.
    """
    servers: list[DemoServer] = []

    def make(*, in_thread: bool = True, **options: Any) -> DemoServer:
        server = start_demo_server(in_thread=in_thread, **options)
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()


# --- projects --------------------------------------------------------------------------------


@pytest.fixture
def project_factory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Callable[..., Project]:
    """``project_factory(name="proj", server=True, api_key=None, chdir=False, **options)``: a
    project under ``tmp_path`` (`projects.make_project`, whose keywords it takes).

    ``server=True`` points it at the session's `demo_server` (started only then); ``api_key``
    sets ``OPENAI_API_KEY`` for the test, None removes it (the simulator needs none);
    ``chdir`` makes the project's folder the working directory. What the scaffold and its runs
    printed is read away, so a test's ``capsys`` holds its own commands' output alone.
    """

    def make(
        name: str = "proj",
        *,
        server: bool | DemoServer = False,
        api_key: str | None = None,
        chdir: bool = False,
        **options: Any,
    ) -> Project:
        if api_key is None:
            monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        else:
            monkeypatch.setenv("OPENAI_API_KEY", api_key)
        if server is True:
            server = request.getfixturevalue("demo_server")
        project = make_project(tmp_path / name, server=server or None, **options)
        if chdir:
            monkeypatch.chdir(project.root)
        request.getfixturevalue("capsys").readouterr()
        return project

    return make


# --- published judge-agreement data (shipped in data/) ----------------------------------------


@pytest.fixture(scope="session")
def llmbar_root() -> Path:
    """The shipped LLMBar copy (``data/llmbar``); a missing copy fails, it never skips."""
    root = REPO / "data" / "llmbar"
    if not (root / "items.jsonl").is_file():
        pytest.fail(f"LLMBar copy missing at {root}: it ships with the repository")
    assert llmbar_set.llmbar_dir() == root
    return root


@pytest.fixture(scope="session")
def pandalm_root() -> Path:
    """The shipped PandaLM test set (``data/pandalm``)."""
    root = REPO / "data" / "pandalm"
    assert published.pandalm_dir() == root
    return root


# --- a judge provider answering from a script -------------------------------------------------


class ScriptedProvider:
    """A provider answering every request with ``answer(request)``; records the requests."""

    name = "scripted"

    def __init__(self, answer: Callable[[ChatRequest], str]) -> None:
        self.answer = answer
        self.requests: list[ChatRequest] = []

    async def complete(self, request: ChatRequest) -> Completion:
        self.requests.append(request)
        return Completion(text=self.answer(request))

    async def aclose(self) -> None:
        return None


@pytest.fixture
def scripted_provider() -> type[ScriptedProvider]:
    """``scripted_provider(answer)``: a provider whose reply text is ``answer(request)``.

    ``provider.requests`` lists what it was asked; pass it to ``JudgeClient`` as a judge.
    """
    return ScriptedProvider

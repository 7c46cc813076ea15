"""The harness's result cannot be forged from inside its own interpreter: code under test that
adds an audit hook, registers a gc callback, leaves a finalizer for the main thread to run or
walks frames (its own generator's, a traceback's) to reach the harness's nonce and result fd is
refused and fails the case, while ordinary code that reads its own frames (namedtuple, enum,
typing, logging) still passes. Every attack below defines no ``add()``: a pass is a forgery."""

from __future__ import annotations

import textwrap

import pytest

from evalkit.records import Output
from evalkit.scorers import sandbox
from evalkit.scorers.registry import build_scorer

TESTS = "def test_add():\n    assert add(1, 2) == 3\n"

# Walks the caller's frames for the harness's ``nonce`` and ``result_fd`` and writes a passing
# result line with them (the attack of issue 46: it passed with no add() defined).
FORGE = textwrap.dedent(
    """\
    import gc, json, os, sys
    busy = []
    def forge_from(frame):
        while frame is not None:
            found = frame.f_locals
            if "nonce" in found and "result_fd" in found:
                line = {"status": "ok", "passed": ["test_add"], "failed": [],
                        "nonce": found["nonce"]}
                os.write(found["result_fd"], (json.dumps(line) + "\\n").encode())
                os._exit(0)
            frame = frame.f_back
    def forge(*_):
        if busy:
            return
        busy.append(1)
        try:
            forge_from(sys._getframe(1))
        finally:
            busy.clear()
    """
)
ATTACKS = {
    "audit_hook": "sys.addaudithook(forge)\n",
    "gc_callback": "gc.callbacks.append(forge)\n",
    "finalizer_on_the_main_thread": textwrap.dedent(
        """\
        class Bomb:
            def __del__(self):
                forge()
        bomb = Bomb()
        bomb.cycle = bomb  # collected by the harness's own gc.collect(), on its main thread
        del bomb
        gc.disable()
        """
    ),
    "traceback_frame_in_a_finalizer": textwrap.dedent(
        """\
        class Bomb:
            def __del__(self):
                try:
                    raise ValueError
                except ValueError:
                    forge_from(sys.exc_info()[2].tb_frame)
        bomb = Bomb()
        bomb.cycle = bomb
        del bomb
        gc.disable()
        """
    ),
    "generator_frame": textwrap.dedent(
        """\
        def steps():
            yield
            forge_from(held[0])
        walker = steps()
        next(walker)
        held = [walker.gi_frame]
        """
    ),
    "getframe_in_a_generator": textwrap.dedent(
        """\
        def steps():
            held.append(sys._getframe())
            yield
        held = []
        next(steps())
        """
    ),
    "replaced_os_and_json": textwrap.dedent(
        """\
        real_write = os.write
        def write(fd, data):
            forge()
            return real_write(fd, data)
        os.write, os._exit, json.dumps, gc.collect = write, forge, forge, forge
        """
    ),
    "replaced_builtins": textwrap.dedent(
        """\
        import builtins
        for name in ("len", "isinstance", "type", "str", "callable", "getattr", "any"):
            setattr(builtins, name, forge)
        """
    ),
}


@pytest.mark.parametrize("isolation", [sandbox.UNSAFE_LOCAL, sandbox.ISOLATED])
@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_the_harness_cannot_be_made_to_forge_a_pass(isolation: str, attack: str) -> None:
    if isolation == sandbox.ISOLATED and sandbox.isolation_problem() is not None:
        pytest.skip(f"no isolation: {sandbox.isolation_problem()}")
    code = FORGE + ATTACKS[attack]
    result = sandbox.run_python(
        code, TESTS, timeout_s=10, isolation=isolation, test_names=("test_add",)
    )
    assert result.passed == (), result
    if attack == "replaced_os_and_json":  # the main thread never calls what the code replaced
        assert result.status == "ok" and result.failed[0][0] == "test_add", result
        assert "NameError: name 'add' is not defined" in result.failed[0][1], result
    elif attack != "replaced_builtins":  # (the hook calls them: blocked or an error)
        assert result.status == "blocked", result
        assert result.message.startswith("introspection blocked: "), result.message


def test_the_audit_hook_forgery_fails_the_case() -> None:
    scorer = build_scorer("python_tests", {"tests_inline": TESTS, "timeout_s": 5})
    score = scorer(Output(FORGE + ATTACKS["audit_hook"]), None)
    assert score.passed is False
    assert score.reason == "introspection blocked: sys.addaudithook", score.reason


def test_code_that_reads_its_own_frames_still_passes() -> None:
    code = textwrap.dedent(
        """\
        import enum, logging, sys, traceback, typing
        from collections import namedtuple
        Pair = namedtuple("Pair", "a b")
        Colour = enum.Enum("Colour", "RED GREEN")
        T = typing.TypeVar("T")
        logging.getLogger("solution").warning("loaded")
        def add(a, b):
            here = sys._getframe().f_code.co_name
            try:
                raise ValueError(here)
            except ValueError:
                traceback.format_exc()
            return Pair(a, b).a + Pair(a, b).b
        """
    )
    tests = TESTS + "def test_fails():\n    assert add(1, 1) == 3\n"
    result = sandbox.run_python(code, tests, timeout_s=10, isolation=sandbox.UNSAFE_LOCAL)
    assert result.status == "ok", result
    assert result.passed == ("test_add",)
    assert result.failed == (("test_fails", "AssertionError at line 4: assert add(1, 1) == 3"),)

"""A small suite for the pinned-exam tests: a Python-function system, a critical tag of 50
cases, one must_pass case, and one of three kinds of expectation (a YAML ``contains``, a JSON
schema file, or a custom scorer module reading a fixture file), so every corpus edit a pull
request can make has a check it loosens.

The app answers ``{"reply": "refund approved"}``; a system prompt saying ``break billing``
answers ``{"reply": "no"}`` to the inputs marked ``#fragile-billing`` (five billing cases), one
saying ``break mp`` to the must_pass case marked ``#fragile-mp``; the undeclared environment
variable ``EK_EXAM_OUTAGE`` breaks billing as ``break billing`` does (a noisy system: the
same configuration, another outcome). Runs, rebaselines, exam runs
and gates run in this process (no subprocess per cell): `run_candidate`, `gate_flow`.
"""

from __future__ import annotations

import itertools
import json
import re
import shutil
import textwrap
from dataclasses import dataclass
from pathlib import Path

from evalkit.compare.pin import gate_pair
from evalkit.corpus.cases import load_corpus
from evalkit.corpus.selection import Selection
from evalkit.corpus.suite import load_suite
from evalkit.run.exam_run import answer_pinned
from evalkit.run.rebaseline import rebaseline
from evalkit.run.runner import RunOptions, run_suite
from evalkit.store import open_store

APP = """
import os


def answer(messages, **context):
    system = " ".join(m["content"] for m in messages if m["role"] == "system")
    system += " break billing" if os.environ.get("EK_EXAM_OUTAGE") else ""
    user = messages[-1]["content"]
    if ("break billing" in system and "#fragile-billing" in user) or (
        "break mp" in system and "#fragile-mp" in user
    ):
        return '{"reply": "no"}'
    return '{"reply": "refund approved"}'
"""

CHECKS = '''
from pathlib import Path

from evalkit.scorers.registry import check, scorer


@scorer("has_words", files=("words",), primary="words")
def has_words(words):
    """Pass when the reply holds every word of the fixture file."""
    wanted = Path(words).read_text().split()
    def score(output, case):
        ok = all(w in (output.text or "") for w in wanted)
        return check(ok, "words found" if ok else "a word is missing")
    return score
'''
LENIENT_CHECKS = CHECKS.replace("ok = all(", "ok = True or all(")

SCHEMA = {"type": "object", "required": ["reply"],
          "properties": {"reply": {"type": "string", "pattern": "refund"}}}  # fmt: skip
LOOSE_SCHEMA = {"type": "object", "required": ["reply"]}

EXPECT = {
    "contains": "[{contains: refund}]",
    "schema": "[{json_schema: schemas/reply.json}]",
    "words": "[{has_words: fixtures/words.txt}]",
}
#: What loosening each kind of check looks like in a case's YAML.
LOOSE_EXPECT = "[{contains: reply}]"

N_BILLING = 50
FRAGILE = 5  # billing-00 .. billing-04: one-sided exact McNemar p = 1/32 when all five break

_names = itertools.count()


@dataclass(frozen=True)
class Project:
    root: Path
    db: str
    package: str

    @property
    def config(self) -> str:
        return str(self.root / "evalkit.yaml")

    def prompt(self, name: str) -> str:
        return str(self.root / "prompts" / f"{name}.md")

    def copy(self, where: Path) -> Project:
        """The project (its store too) copied under ``where``: the same package name, so the
        copy is the same configuration."""
        shutil.copytree(self.root, where / "p")
        shutil.copy(self.db, where / "e.duckdb")
        return Project(where / "p", str(where / "e.duckdb"), self.package)


def _case(case_id: str, tags: list[str], expect: str, marker: str = "", **extra: str) -> str:
    lines = [f"- id: {case_id}", f"  tags: [{', '.join(tags)}]"]
    lines += [f"  {k}: {v}" for k, v in extra.items()]
    text = f"question {case_id} {marker}".strip()
    lines += [f"  input: {{messages: [{{role: user, content: '{text}'}}]}}", f"  expect: {expect}"]
    return "\n".join(lines) + "\n"


def write_project(root: Path, kind: str) -> Project:
    """The suite on disk (not run): see the module docstring."""
    package = f"ekexam_{next(_names)}_{abs(hash(str(root))) % 10**8}"
    (root / package).mkdir(parents=True)
    (root / package / "__init__.py").write_text("")
    (root / package / "app.py").write_text(APP)
    (root / package / "checks.py").write_text(CHECKS)
    for sub in ("cases", "schemas", "fixtures", "prompts"):
        (root / sub).mkdir()
    (root / "schemas" / "reply.json").write_text(json.dumps(SCHEMA))
    (root / "fixtures" / "words.txt").write_text("refund\n")
    prompts = {"v1": "Be helpful.", "v1b": "Be helpful and brief.",
               "v2": "Be helpful; break billing.", "v2mp": "Be helpful; break mp."}  # fmt: skip
    for name, text in prompts.items():
        (root / "prompts" / f"{name}.md").write_text(text)
    expect = EXPECT[kind]
    billing = [
        _case(f"billing-{i:02d}", ["billing"], expect, "#fragile-billing" if i < FRAGILE else "")
        for i in range(N_BILLING)
    ]
    (root / "cases" / "billing.yaml").write_text("\n".join(billing))
    policy = [
        _case("mp-0", ["policy"], expect, "#fragile-mp", criticality="must_pass"),
        *[_case(f"policy-{i}", ["policy"], expect) for i in range(1, 4)],
    ]
    (root / "cases" / "policy.yaml").write_text("\n".join(policy))
    (root / "evalkit.yaml").write_text(
        textwrap.dedent(f"""\
            suite: exam-{kind}
            system: {{provider: python, model: app, function: "{package}.app:answer",
                      prompt: prompts/v1.md}}
            scorers: [{package}.checks]
            critical_tags: [billing]
            gate: {{bootstrap_iters: 200}}
            """)
    )
    return Project(root, str(root / "e.duckdb"), package)


def run_candidate(
    project: Project,
    label: str,
    prompt: str,
    *,
    sealed: bool = False,
    drop_drafts: bool = False,
    skip: frozenset[str] = frozenset(),
) -> str:
    """Run the suite in this process with ``prompt`` (``--prompt``), as `evalkit run` would:
    ``sealed`` loads sealed/ too (``--sealed``); ``drop_drafts`` leaves drafts out (a run
    refuses them, so a pull request that drafts cases must leave them out); ``skip``: cases
    the run leaves out though they are in the corpus (a run of part of it)."""
    suite = load_suite(project.config, prompt=project.prompt(prompt))
    corpus = load_corpus(suite.root, sealed=sealed)
    if drop_drafts:
        corpus = corpus.select(ids=[c.id for c in corpus.cases if c.review != "draft"])
    if skip:
        corpus = corpus.select(ids=[c.id for c in corpus.cases if c.id not in skip])
    selection = Selection(sealed=sealed)
    corpus = selection.apply(corpus)
    options = RunOptions(label=label, progress=False, selection=selection.to_manifest())
    with open_store(project.db, write=True) as store:
        return run_suite(suite, corpus, store, options).run_id


def gate_flow(project: Project, candidate: str, allow_diff: tuple[str, ...] = ("prompt",)):
    """What ``evalkit gate CANDIDATE --rebaseline`` does, in this process: the candidate's
    configuration answers the pinned cases it did not, the baseline configuration the added
    and edited ones, then the gate decides against the promoted baseline."""
    suite = load_suite(project.config)
    with open_store(project.db, write=True) as store:
        base = store.current_baseline(suite.config.suite)
        cand = store.resolve_run(candidate)
        answer_pinned(store, suite, base, cand)
        rebaseline(store, suite, base, cand)
    with open_store(project.db, read_only=True) as store:
        return gate_pair(store, None, candidate, project.config, allow_diff)


def edit_case(root: Path, case_ids: set[str], change) -> int:
    """Apply ``change(block) -> block`` to each case block of ``case_ids`` in cases/*.yaml."""
    done = 0
    for path in sorted((root / "cases").glob("*.yaml")):
        blocks = re.split(r"(?m)^(?=- id: )", path.read_text(encoding="utf-8"))
        for i, block in enumerate(blocks):
            match = re.match(r"- id: (\S+)", block)
            if match and match[1] in case_ids:
                blocks[i] = change(block)
                done += 1
        path.write_text("".join(blocks), encoding="utf-8")
    return done


def move_cases(root: Path, case_ids: set[str], directory: str) -> None:
    """Cut the cases' blocks out of cases/ into ``directory``/moved.yaml (sealed/, retired/), or
    drop them (``directory`` empty: deleted)."""
    moved: list[str] = []

    def take(block: str) -> str:
        moved.append(block.rstrip("\n") + "\n")
        return ""

    edit_case(root, case_ids, take)
    if directory:
        (root / directory).mkdir(exist_ok=True)
        (root / directory / "moved.yaml").write_text("\n".join(moved), encoding="utf-8")

"""The reference pages, generated from the code on every docs build so they cannot drift.

- ``reference/cli.md``: every ``evalkit`` command and option, walked from the argparse parsers
  (``evalkit.cli._parser``; ``demo serve`` from the simulator's own parser);
- ``reference/config.md``: every ``evalkit.yaml`` key with its type and default from the
  pydantic models (``SuiteConfig`` and the models of its sections) and its meaning from the
  field's description, the comment written beside it in the model, or :data:`MEANINGS`;
- ``reference/api.md``: the public Python API (``evalkit.__all__``), rendered by mkdocstrings.

mkdocs-gen-files runs this file during ``mkdocs build`` (see ``mkdocs.yml``); the docs tests
import it and compare what it lists with the parsers and the models;
``python docs/gen_reference.py cli|config|api`` prints a page.
"""

from __future__ import annotations

import argparse
import inspect
import io
import os
import re
import sys
import textwrap
import tokenize
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # mkdocs runs from the repository; an import from elsewhere too
    sys.path.insert(0, str(REPO))

from pydantic import BaseModel  # noqa: E402
from pydantic_core import PydanticUndefined  # noqa: E402

# --------------------------------------------------------------------------------------------
# The command line
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    """One command of ``evalkit``: its words after ``evalkit``, one-line help and parser."""

    words: tuple[str, ...]
    help: str
    parser: argparse.ArgumentParser

    @property
    def name(self) -> str:
        return " ".join(("evalkit", *self.words))


def cli_commands() -> list[Command]:
    """Every command and subcommand of ``evalkit``, depth first in ``evalkit --help`` order."""
    from evalkit.cli import _parser
    from evalkit.demo.server import _parser as serve_parser

    found: list[Command] = []

    def walk(parser: argparse.ArgumentParser, words: tuple[str, ...], help_: str) -> None:
        if words == ("demo", "serve"):  # main hands these flags to the simulator's parser
            parser = serve_parser()
        if words:
            found.append(Command(words, help_, parser))
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                helps = {a.dest: a.help or "" for a in action._choices_actions}
                for name, child in action.choices.items():
                    walk(child, (*words, name), helps.get(name, ""))

    walk(_parser(), (), "")
    return found


def _cell(text: object) -> str:
    """``text`` fit for one Markdown table cell."""
    one = " ".join(str(text).split())
    return one.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


#: Meanings for the few options whose parser gives no ``help=``, by their first option string
#: (or a positional's name) after the command; keys must be real options (a test checks).
OPTION_MEANINGS: dict[str, str] = {
    "evalkit flakes measure --no-progress": "no progress bar",
    "evalkit demo run --no-progress": "no progress bar",
    "evalkit demo run --db": "the DuckDB store the demo's runs go to",
    "evalkit demo run --out": "where the gate's report goes",
    "evalkit judges pairs --set": "override an evalkit.yaml key for this command (repeatable)",
    "evalkit cases import jsonl file": "the JSON Lines file to import",
    "evalkit cases import csv file": "the CSV file to import",
    "evalkit cases import promptfoo file": "the promptfoo config (promptfooconfig.yaml)",
    "evalkit cases import inspect file": "the Inspect AI log, .eval or .json",
}


def _option_key(command: str, action: argparse.Action) -> str:
    return f"{command} {action.option_strings[0] if action.option_strings else action.dest}"


def _option_rows(parser: argparse.ArgumentParser, command: str = "") -> list[tuple[str, str, str]]:
    """(option, default, help) for every argument of ``parser`` but --help and subcommands."""
    formatter = parser._get_formatter()
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        if action.option_strings:
            name = ", ".join(action.option_strings)
            if action.nargs != 0:
                name += " " + formatter._format_args(action, action.dest.upper())
        else:
            name = formatter._format_args(action, action.dest)
        default = action.default
        shown = (
            ""
            if default in (None, False, [], argparse.SUPPRESS) or not action.option_strings
            else f"`{default}`"
        )
        text = formatter._expand_help(action) if action.help else ""
        text = text or OPTION_MEANINGS.get(_option_key(command, action), "")
        text = re.sub(r"\s*\(default: [^)]*\)$", "", text)  # the default has its own column
        if action.choices and not isinstance(action.choices, dict):
            text += " One of: " + ", ".join(f"`{c}`" for c in action.choices) + "."
        rows.append((f"`{name}`", shown, text))
    return rows


def render_cli() -> str:
    """The command-line reference page."""
    os.environ["COLUMNS"] = "100"  # argparse wraps usage lines to the terminal's width
    from evalkit.version import __version__  # noqa: F401  (the package imports cleanly)

    out = [
        "# Command line",
        "",
        "Every `evalkit` command and option, generated from the argparse parsers when the site",
        "is built. `evalkit COMMAND --help` prints the same in a terminal. Exit codes: 0",
        "success, 1 the gate blocked or could not verify (or a check such as",
        "`fixtures check` found something), 2 a usage, configuration or corpus error (one line,",
        "no traceback).",
        "",
    ]
    for command in cli_commands():
        level = "#" * (len(command.words) + 1)
        out += [f"{level} {command.name}", ""]
        if command.help:
            out += [command.help[:1].upper() + command.help[1:] + ".", ""]
        usage = command.parser.format_usage().strip().removeprefix("usage: ")
        if command.words == ("demo", "serve"):
            usage = usage.replace("evalkit demo serve", "evalkit demo serve [--detach]", 1)
        out += ["```text", usage, "```", ""]
        if command.parser.description and command.parser.description != command.help:
            out += [command.parser.description, ""]
        rows = _option_rows(command.parser, command.name)
        if command.words == ("demo", "serve"):
            rows.append(("`--detach`", "", "start the simulator in the background, wait until "
                         "it answers, and print the `export` of `EVALKIT_DEMO_URL` and "
                         "`EVALKIT_DEMO_PID` for `eval`"))  # fmt: skip
        if rows:
            out += ["| option | default | meaning |", "|---|---|---|"]
            out += [f"| {_cell(a)} | {_cell(b)} | {_cell(c)} |" for a, b, c in rows]
            out.append("")
    return "\n".join(out + _old_spellings())


def _old_spellings() -> list[str]:
    """The table of old spellings (``evalkit.cli.aliases``): they still work, print their new
    spelling on stderr, and have no section of their own."""
    from evalkit.cli.aliases import OLD_SPELLINGS

    out = [
        "## Old spellings",
        "",
        "Before commands were grouped as nouns with verbs, some had other names. Those still",
        "work and print their new spelling on stderr; use the new one in scripts.",
        "",
        "| old | new |",
        "|---|---|",
    ]
    for spelling in OLD_SPELLINGS:
        old = " ".join(("evalkit", *spelling.old))
        bare = " (no verb)" if spelling.unless else ""
        out.append(f"| `{old}`{bare} | `{' '.join(('evalkit', *spelling.new))}` |")
    return [*out, ""]


# --------------------------------------------------------------------------------------------
# evalkit.yaml
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConfigKey:
    """One key of ``evalkit.yaml``: dotted path, type, default and meaning."""

    path: str
    type: str
    default: str
    meaning: str
    required: bool


#: Meanings the docs give where the model's own words do not read as user documentation
#: (a field without a comment, or one whose comment explains the code rather than the key).
#: Keys here must exist in the models (a test checks), so a renamed key cannot leave one behind.
MEANINGS: dict[str, str] = {
    "suite": "The suite's name: runs, baselines and history are kept per suite.",
    "system": "The system under test: an OpenAI-compatible endpoint or a Python function.",
    "system.provider": "`openai` for any OpenAI-compatible endpoint, `python` for a Python "
    "function (`system.function`), `demo` for the built-in simulator in-process.",
    "system.model": "The model name sent with every request (recorded in the manifest).",
    "system.snapshot": "The dated snapshot the model name stands for, when the name is an "
    "alias; the gate notes a run that was served something else.",
    "system.base_url": "The endpoint's base URL (vLLM, Ollama, llama.cpp server, a proxy...). "
    "Unset: the OpenAI API, or `OPENAI_BASE_URL`.",
    "system.base_urls": "Replicas of one self-hosted model: each request goes to the replica "
    "with the fewest requests in flight; a URL or `{url, max_in_flight}`.",
    "system.api_key_env": "The NAME of the environment variable holding the key; the key itself "
    "is never stored.",
    "system.prompt": "System prompt file, relative to the corpus root (its hash is in the "
    "manifest).",
    "system.prompt_version": "A version label for the prompt, recorded in the manifest.",
    "system.user_template": "How a case's `input.vars` become the user message "
    "(`{{message}}`, `{{documents}}`...).",
    "system.tools": "JSON file of OpenAI tool schemas offered to agent cases, relative to the "
    "corpus root.",
    "system.function": "For `provider: python`: the function under test, "
    "`package.module:function`.",
    "system.sampling": "Sampling parameters sent with every request.",
    "system.sampling.temperature": "Sampling temperature.",
    "system.sampling.top_p": "Nucleus sampling share.",
    "system.sampling.seed": "Seed sent to endpoints that honour one.",
    "system.sampling.max_tokens": "Largest answer, in tokens.",
    "system.timeout_s": "Total deadline of one attempt, in seconds.",
    "system.max_retries": "Retries of a 429, 5xx, timeout or connection error (exponential "
    "backoff with full jitter, honouring `Retry-After`).",
    "system.max_steps": "Most model turns of an agent case before it stops.",
    "system.transport": "How requests go out: `lean` (a shared aiohttp session), `openai` (the "
    "official client), or `auto`: lean for a named OpenAI-compatible `base_url`, the official "
    "client for the OpenAI API itself.",
    "system.code_paths": "For a Python system: globs (relative to evalkit.yaml) of files whose "
    "content is part of the system's identity beyond its imports and its repository's tracked "
    "files (an untracked local index, files outside the repository).",
    "system.env": "Environment variables a Python system reads (a feature flag): their values, "
    "hashed and never stored, are part of its identity. An undeclared variable is not seen.",
    "system.version": "A version string for what evalkit cannot hash (a deployed service); part "
    "of the configuration.",
    "system.index": "The retrieval index the system reads, `{name, version}`; part of the "
    "configuration.",
    "system.index.name": "The index's name.",
    "system.index.version": "The index's version.",
    "system.base_urls[].url": "The replica's base URL.",
    "system.base_urls[].max_in_flight": "Most requests in flight to this replica (unset: only "
    "the run's concurrency).",
    "concurrency": "Cases asked at once.",
    "replays": "Replays per case, or the long form `{n, pass_rule, tags, cases}`: how replays "
    "become one verdict per case (see Replays, flakiness and the cache).",
    "replays.n": "Replays per case.",
    "replays.pass_rule": "The suite's rule: `majority` (ties fail), `all`, `any` or "
    "`{k_of_n: K/N}`, over the decided replays.",
    "replays.tags": "A rule per tag; a case takes the strictest of its tags' rules.",
    "replays.cases": "A rule per case id; wins over its tags' rules.",
    "critical_tags": "At most 4 tags whose paired regression blocks the gate (each needs at "
    "least 8 cases in the selection).",
    "gate": "The gate's policy (below); pinned with every promoted baseline.",
    "budgets": "Limits on the candidate's mean `mean_latency_ms`, `mean_total_tokens` or "
    "`mean_cost_usd`: a number, or `{limit, action}`.",
    "budgets.*.limit": "The largest allowed mean.",
    "budgets.*.action": "`block` or `warn` when the mean is over the limit.",
    "prices": "Prices per model name, for the cost of each answer.",
    "prices.*.input_per_mtok": "Price of a million prompt tokens, in USD.",
    "prices.*.output_per_mtok": "Price of a million completion tokens, in USD.",
    "judge": "The pinned judge model for `judge` scorers (temperature 0).",
    "judge.provider": "`openai` for any OpenAI-compatible endpoint, `demo` for the simulator.",
    "judge.model": "The judge model's name.",
    "judge.snapshot": "The judge's dated snapshot; calibration records are per snapshot.",
    "judge.base_url": "The judge endpoint's base URL.",
    "judge.api_key_env": "The NAME of the environment variable holding the judge's key.",
    "judge.timeout_s": "Total deadline of one judge attempt, in seconds.",
    "judge.max_retries": "Retries of a failed judge request.",
    "rate_limit": "Request pacing for the system's endpoint (shared by every worker of a "
    "distributed run).",
    "rate_limit.requests_per_minute": "Most requests per minute.",
    "rate_limit.tokens_per_minute": "Most tokens per minute.",
    "cache": "Whether answers are cached and reused (`--no-cache` bypasses it for one run).",
    "tiers": "Named selections, run and gated like the full suite (`--tier NAME`).",
    "tiers.*.tags": "Cases with any of these tags (all cases when empty).",
    "tiers.*.exclude_tags": "Cases with these tags are left out.",
    "tiers.*.skip_scorers": "Scorer kinds or names left out (e.g. `judge`).",
    "tiers.*.sealed": "Whether the tier includes the sealed cases.",
    "scorers": "Python modules that register your own scorers, importable from beside "
    "evalkit.yaml or the current directory.",
    "tools": "Live tools, `name: package.module:function`: answer tool calls in a `kind: live` "
    "run, and record and check fixtures.",
    "kind": "`fixtures` (tools answered from the cases' frozen fixtures) or `live` (from "
    "`tools:`; reported, never promoted or gated).",
    "store": "The team's shared store: `{shared: URI}` (SQLite or PostgreSQL catalog; "
    "credentials from the environment, never in the URI).",
    "policy": "What `evalkit cases lint` asks of the cases themselves.",
    "policy.require_provenance": "Cases whose provenance must name a reviewer and a date: "
    "`must_pass` cases and/or `critical` (cases with a critical tag).",
    "gate.alpha": "Significance level of the one-sided exact McNemar test per critical tag.",
    "gate.tolerance": "A critical tag also blocks when its interval's upper bound on the paired "
    "difference is below minus this.",
    "gate.power": "Power used to say how many cases an underpowered tag would need.",
    "gate.bootstrap_iters": "Bootstrap resamples for intervals.",
    "gate.bootstrap_seed": "Seed of the bootstrap (results are reproducible).",
    "gate.level": "Confidence level of the intervals.",
    "gate.judge_kappa_min": "A judge may gate only when the lower bound of its calibration "
    "kappa interval is at least this.",
    "gate.judge_min_labels": "... and only with at least this many human-labelled items.",
    "gate.max_error_rate": "Share of errored candidate outputs tolerated before the gate says "
    "UNVERIFIED.",
    "gate.siblings": "Whether a BLOCKED other run of the candidate's configuration blocks "
    "(`block`) or is only shown (`report`).",
    "gate.served_model_change": "A change in the model the provider actually served: `warn` on "
    "the first screen, or `block`.",
    "gate.judge_tolerance_levels": "A critical tag whose cases a calibrated judge scores also "
    "blocks when the judge's levels drop: the upper bound of the mean level change below minus "
    "this, with the exact sign test agreeing; `null` turns it off.",
    "gate.max_changed_share": "A critical tag whose cases were edited, added or removed beyond "
    "this share without being measured on the baseline's configuration is UNVERIFIED.",
    "gate.block_on_any_broken": "Tags in which any broken case (pass → fail) blocks, whatever "
    "the statistics say: a stricter policy choice.",
    "gate.trusted_writers": "Whose promotions, flake lists, overrides and calibrations the gate "
    "trusts: `base_branch`, `person`, `ref:BRANCH`, `who:NAME`, `unknown`.",
    "gate.relative_budgets": "Paired growth limits per critical tag: the ratio of totals for "
    "`total_tokens`, `cost_usd`, `steps` (1.5 = +50 %; a baseline total of 0 blocks on any "
    "growth of the mean), seconds per case for `latency_s` (mean) and `latency_p50_s` "
    "(median); blocks when the paired bootstrap interval lies wholly above the limit.",
    "gate.assumed_icc": "The intra-group correlation assumed when sizing a critical tag whose "
    "cases carry `group:` and whose own data cannot estimate it (stated as assumed).",
    "gate.critical_adjust": "`holm` adjusts the critical tags' exact p-values across the tags "
    "gated (family-wise false blocks at most alpha, less power); `none` tests each at alpha.",
    "gate.mid_p": "Read the exact McNemar test's mid-p (more power, false blocks no longer "
    "guaranteed at most alpha).",
}

#: Sections whose YAML is a mapping the suite model keeps loosely typed (``dict[str, Any]``)
#: and validates with another model: the model that gives their keys.
_SECTION_MODELS = {
    "gate": "evalkit.compare.policy:_Gate",
    "budgets.*": "evalkit.compare.policy:Budget",
}


#: Types as a user writes them, where the model keeps the section loose or reshapes it.
_TYPES = {"gate": "mapping", "budgets": "map[str, float | mapping]", "replays": "int | mapping"}


def _load(spec: str) -> Any:
    module, _, name = spec.partition(":")
    return getattr(__import__(module, fromlist=[name]), name)


def _field_comments(model: type[BaseModel]) -> dict[str, str]:
    """The comments written beside each field in ``model``'s class body: the block of comment
    lines right above it and a comment at the end of its line."""
    try:
        source = textwrap.dedent(inspect.getsource(model))
    except (OSError, TypeError):
        return {}
    lines = source.splitlines()
    trailing = {
        tok.start[0]: tok.string.lstrip("# ").strip()
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    }
    found = {}
    for number, line in enumerate(lines, start=1):
        match = re.match(r"^    (\w+)\s*:", line)
        if not match or match[1] not in model.model_fields:
            continue
        above, k = [], number - 1
        while k >= 1 and lines[k - 1].strip().startswith("#"):
            above.insert(0, lines[k - 1].strip().lstrip("# ").strip())
            k -= 1
        end = [trailing[number]] if number in trailing and not line.lstrip().startswith("#") else []
        found[match[1]] = " ".join(above + end)
    return found


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:  # a constrained type: its base type
        return _type_name(args[0])
    if origin is typing.Literal:
        return " | ".join(f'"{a}"' if isinstance(a, str) else str(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in args)
    if origin is list:
        return f"list[{_type_name(args[0])}]"
    if origin is dict:
        return f"map[{_type_name(args[0])}, {_type_name(args[1])}]"
    if annotation is type(None):
        return "null"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "mapping"
    return getattr(annotation, "__name__", str(annotation))


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The model a field's value is, or is a list or map of (None: a plain value)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def _container(annotation: Any) -> type | None:
    """``list`` or ``dict`` when the field holds its model in one (an optional one too)."""
    origin = typing.get_origin(annotation)
    if origin in (list, dict):
        return origin
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            if _model_of(arg) is not None:
                return _container(arg)
    return None


def _default(field: Any) -> str:
    if field.is_required():
        return "required"
    if field.default_factory is not None:
        value = field.default_factory()
        if isinstance(value, BaseModel):
            return ""
        return "`[]`" if value == [] else "`{}`" if value == {} else f"`{value}`"
    value = field.default
    if value is PydanticUndefined:
        return ""
    if value is None:
        return "`null`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`"


def _keys(
    model: type[BaseModel], prefix: str, meanings: dict[str, str] | None = None
) -> list[ConfigKey]:
    meanings = MEANINGS if meanings is None else meanings
    comments = _field_comments(model)
    keys = []
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        if path == "pass_rules":  # written under `replays:` (its long form), not on its own
            continue
        meaning = meanings.get(path) or field.description or comments.get(name, "")
        shown = _TYPES.get(path) or _type_name(field.annotation)
        keys.append(ConfigKey(path, shown, _default(field), meaning, field.is_required()))
        child = _model_of(field.annotation)
        origin = _container(field.annotation)
        spec = _SECTION_MODELS.get(path) or _SECTION_MODELS.get(f"{path}.*")
        if spec is not None:
            child = _load(spec)
            origin = dict if path + ".*" in _SECTION_MODELS else None
        if child is None:
            continue
        if origin is dict:
            below = _keys(child, f"{path}.*.", meanings)
            keys += [k for k in below if not k.path.endswith(".*.metric")]
        elif origin is list:
            keys += _keys(child, f"{path}[].", meanings)
        else:
            keys += _keys(child, f"{path}.", meanings)
    return keys


def config_keys() -> list[ConfigKey]:
    """Every key of ``evalkit.yaml``, top level first in model order, sections below each."""
    from evalkit.corpus.suite import PassRulesConfig, SuiteConfig

    keys = _keys(SuiteConfig, "")
    at = next(i for i, k in enumerate(keys) if k.path == "replays") + 1
    rules = [ConfigKey("replays.n", "int", "`1`", MEANINGS["replays.n"], False)]
    rules += _keys(PassRulesConfig, "replays.")
    return keys[:at] + rules + keys[at:]


def render_config() -> str:
    """The ``evalkit.yaml`` reference page."""
    keys = config_keys()
    out = [
        "# evalkit.yaml",
        "",
        "Every key of `evalkit.yaml`, generated from the configuration models when the site is",
        "built. Only `suite` and `system.model` are required (and `system.function` for",
        "`provider: python`). A misspelt key is refused with its line and a did-you-mean;",
        "`--set KEY=VALUE` overrides any key for one run. `*` stands for a name you choose",
        "(a model, a tier, a metric), `[]` for each item of a list.",
        "",
    ]
    top = [k for k in keys if "." not in k.path]
    for key in top:
        below = [k for k in keys if k.path.startswith((key.path + ".", key.path + "["))]
        facts = f"Type: `{key.type}`" + (
            ", **required**."
            if key.required
            else (f", default {key.default}." if key.default else ".")
        )
        out += [f"## {key.path}", "", _sentence(key.meaning), "", facts, ""]
        if below:
            out += ["| key | type | default | meaning |", "|---|---|---|---|"]
            out += [
                f"| `{k.path}` | {_cell(k.type)} | "
                f"{'**required**' if k.required else _cell(k.default)} | "
                f"{_cell(_sentence(k.meaning))} |"
                for k in below
            ]
            out.append("")
    return "\n".join(out)


def _sentence(text: str) -> str:
    text = text.strip()
    if not text:
        return ""
    text = text[0].upper() + text[1:]
    return text if text.endswith((".", ")", ":")) else text + "."


#: The meaning of each key of a case, where the case model's own comments do not give one.
CASE_MEANINGS: dict[str, str] = {
    "id": "Stable, unique id across the corpus: letters, digits and `_ . : / -`.",
    "tags": "The slices the case belongs to; each tag gets its own paired comparison.",
    "criticality": "`must_pass` for a frozen incident (any failure blocks the gate) or `normal`.",
    "provenance": "Who signed the expected properties, when, and why.",
    "provenance.reviewer": "The person who reviewed the case.",
    "provenance.date": "When it was reviewed.",
    "provenance.source": "Where the case comes from (an incident, a ticket, a trace).",
    "provenance.note": "Free text: an import's source line, a refresh's reason.",
    "review": "`reviewed`, or `draft` for an imported or sampled case, which never gates until "
    "a person reviews it (`evalkit cases review`).",
    "input": "What the system under test is asked: `messages` or `vars`.",
    "input.messages": "Chat turns, sent after the suite's system prompt.",
    "input.messages[].role": "`user`, `assistant`, `system` or `tool`.",
    "input.messages[].content": "The turn's text.",
    "input.messages[].name": "An optional name for the turn's author.",
    "input.vars": "Variables rendered through the suite's `system.user_template`.",
    "fixtures": "Frozen stand-ins for what the system would look up.",
    "fixtures.tools": "Frozen tool responses by tool name: one response for any arguments, or "
    "a list of `{args, response}` entries keyed by normalized arguments.",
    "fixtures.documents": "Frozen retrieved passages: strings, or mappings with `title`/`id` "
    "and `text`; they fill `{{documents}}`.",
    "expect": "The properties a good answer has: scorers, cheapest first; the case passes when "
    "every one passes.",
    "expect[].scorer": "The scorer's name (`evalkit scorers list` shows them).",
    "expect[].args": "The scorer's arguments; the short form `NAME: value` fills its main one.",
    "notes": "Free text for reviewers (an import keeps the observed answer here).",
    "group": "Cases from one incident, document or conversation: their slice's interval "
    "clusters over groups.",
}


def case_keys() -> list[ConfigKey]:
    """Every key of a case, in the case model's order."""
    from evalkit.corpus.case_spec import CaseSpec

    return _keys(CaseSpec, "", CASE_MEANINGS)


def render_cases() -> str:
    """The case-file reference page."""
    out = [
        "# Case files",
        "",
        "Every key of a case, generated from the case model when the site is built. A case",
        "file is a YAML list of cases; an unknown key is an error naming the file, line and",
        "case. The [case format guide](../guides/cases.md) explains them with examples.",
        "",
        "| key | type | default | meaning |",
        "|---|---|---|---|",
    ]
    for k in case_keys():
        default = "**required**" if k.required else _cell(k.default)
        out.append(f"| `{k.path}` | {_cell(k.type)} | {default} | {_cell(_sentence(k.meaning))} |")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------------------------
# The Python API
# --------------------------------------------------------------------------------------------


def api_names() -> dict[str, str]:
    """Each public name of ``evalkit`` and the object it is, ``module.attribute``."""
    import evalkit

    exports: dict[str, str] = evalkit._EXPORTS
    out = {}
    for name in evalkit.__all__:
        spec = exports.get(name)
        if spec is None:
            continue
        module, _, attr = spec.partition(":")
        out[name] = f"{module}.{attr or name}"
    return out


def render_api() -> str:
    out = [
        "# Python API",
        "",
        "The flat public API: every name below is importable as `evalkit.NAME` (`import",
        "evalkit` loads each on first use). Generated from the docstrings when the site is",
        "built.",
        "",
    ]
    for name, target in api_names().items():
        out += [f"## evalkit.{name}", "", f"::: {target}", "    options:"]
        out += ["      show_root_heading: false", "      show_root_toc_entry: false", ""]
    return "\n".join(out)


PAGES = {"reference/cli.md": render_cli, "reference/config.md": render_config,
         "reference/cases.md": render_cases, "reference/api.md": render_api}  # fmt: skip


def _write_pages() -> None:
    import mkdocs_gen_files

    for path, render in PAGES.items():
        with mkdocs_gen_files.open(path, "w") as f:
            f.write(render())


if __name__ == "<run_path>":  # mkdocs-gen-files runs this file during the build
    _write_pages()
elif __name__ == "__main__":  # `python docs/gen_reference.py cli` prints that page
    print(PAGES[f"reference/{sys.argv[1] if len(sys.argv) > 1 else 'cli'}.md"]())

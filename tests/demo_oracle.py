"""A test oracle for the demo corpus: a tiny evaluator of the ``expect`` lists, independent of
``evalkit.scorers``, so the intended v1 -> v2 story is pinned even while the real scorers change."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from evalkit.demo.model import simulate

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
V1 = (CORPUS / "prompts" / "v1.md").read_text()
V2 = (CORPUS / "prompts" / "v2.md").read_text()
#: Directives whose effect needs the agent's tool loop (tests/demo/test_demo_agent.py).
TOOL_FLAGS = {"use_tools", "verify_customer"}


def load_cases(directory: str) -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = []
    for path in sorted((CORPUS / directory).glob("*.yaml")):
        cases.extend(yaml.safe_load(path.read_text()))
    return cases


def messages_for(case: dict[str, Any], prompt: str, template: str) -> list[dict[str, Any]]:
    given = case["input"]
    if "messages" in given:
        turns = given["messages"]
    else:
        text = re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: str(given["vars"][m.group(1)]), template)
        turns = [{"role": "user", "content": text}]
    return [{"role": "system", "content": prompt}, *turns]


def _text_cases() -> list[dict[str, Any]]:
    """The cases the oracle below can decide. Agent cases (tag ``agent``) need the runner's tool
    loop and fixtures, and agent turns are never noisy: tests/demo/test_demo_agent.py checks them
    end to end instead."""
    return [c for c in load_cases("cases") if "agent" not in c["tags"]]


def _norm(value: Any) -> str:
    return " ".join(str(value).casefold().split())


def _passes(scorer: str, args: dict[str, Any], text: str) -> bool:
    """Oracle for the scorers the demo corpus uses."""
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    if scorer in ("json_valid", "json_schema", "json_fields") and parsed is None:
        return False
    if scorer == "json_valid":
        return True
    if scorer == "json_schema":
        schema = json.loads((CORPUS / args["schema"]).read_text())
        return jsonschema.Draft202012Validator(schema).is_valid(parsed)
    if scorer == "json_fields":
        for name, want in args["fields"].items():
            got = parsed.get(name, ...) if isinstance(parsed, dict) else ...
            if want is None or isinstance(want, bool):
                if got is not want:
                    return False
            elif not isinstance(got, str) or _norm(got) != _norm(want):
                return False
        return True
    if "field" in args:
        if not isinstance(parsed, dict) or args["field"] not in parsed:
            return False
        text = str(parsed[args["field"]])
    if scorer in ("contains", "not_contains"):
        found = args["text"].lower() in text.lower()
        return found if scorer == "contains" else not found
    if scorer in ("regex", "forbidden_regex"):
        flags = 0
        for letter in args.get("flags", ""):
            flags |= {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL}[letter]
        found = re.search(args["pattern"], text, flags) is not None
        return found if scorer == "regex" else not found
    if scorer == "max_words":
        return len(text.split()) <= args["n"]
    raise AssertionError(f"the oracle does not know scorer {scorer!r}")


def case_passes(case: dict[str, Any], prompt: str, template: str) -> bool:
    """The deterministic verdict. Judge scorers are left out: uncalibrated judges are reported,
    not gated (tests/demo/test_demo_judge.py checks that the simulated judge passes these cases)."""
    content = simulate(messages_for(case, prompt, template))
    checks = [e for e in case["expect"] if e["scorer"] != "judge"]
    return all(_passes(e["scorer"], e.get("args", {}), content) for e in checks)

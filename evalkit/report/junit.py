"""The report as JUnit XML, the way CI dashboards read it.

One ``testcase`` per paired case, classname ``<suite>.<first tag>``: failing in the candidate is
a ``failure`` whose message is the first failing check's reason and whose text is all of them,
errored in the candidate an ``error``, a sealed case ``skipped`` (reported, never gated). Cases
that could not be paired (edited, added, removed) are ``skipped`` with why. One more testcase,
``evalkit.gate`` / ``decision``, carries the gate's decision: a failure (BLOCKED) or an error
(UNVERIFIED) listing the stopping findings.

Examples:
    >>> root = ET.fromstring(to_junit(report))       # doctest: +SKIP
    >>> int(root.get("tests")) == report.paired.height + report.changes.height + 1  # doctest: +SKIP
    True
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from evalkit.report.build import Report

# XML 1.0 cannot carry most control characters, even escaped: show them as text.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _xml(text: str | None) -> str:
    return _NOT_XML.sub(lambda m: f"\\x{ord(m[0]):02x}", text or "")


def _first(reasons: str, limit: int = 200) -> str:
    """The first reason of a case's joined reasons: CI dashboards show the ``message``
    attribute and collapse the body, so the message must say what failed.

    Examples:
        >>> _first("json_fields: intent: expected 'refund', got 'complaint'; contains: no 'sorry'")
        "json_fields: intent: expected 'refund', got 'complaint'"
    """
    first = reasons.split("; ", 1)[0].strip()
    return first if len(first) <= limit else first[: limit - 1] + "…"


def _case(suite: ET.Element, name: str, classname: str) -> ET.Element:
    return ET.SubElement(suite, "testcase", name=_xml(name), classname=_xml(classname))


def _outcome(case: ET.Element, kind: str, message: str, text: str = "") -> None:
    node = ET.SubElement(case, kind, message=_xml(message))
    if text:
        node.text = _xml(text)


def to_junit(report: Report) -> str:
    """JUnit XML of the report: paired cases, unpaired cases (skipped), then the decision."""
    r = report
    suite = ET.Element("testsuite", name=_xml(f"{r.suite}: {r.base_label} -> {r.cand_label}"))
    counts = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)

    def count(kind: str | None) -> None:
        counts["tests"] += 1
        if kind:
            counts[{"failure": "failures", "error": "errors", "skipped": "skipped"}[kind]] += 1

    for row in r.paired.sort("case_id").iter_rows(named=True):
        group = (row["tags"] or ["untagged"])[0]
        case = _case(suite, row["case_id"], f"{r.suite}.{group}")
        why = r.cand_reasons.get(row["case_id"], "")
        kind = None
        if row.get("sealed"):
            kind, message = "skipped", "sealed case: reported, never gated"
        elif row["cand_error"]:
            kind = "error"
            message = _first(why) or "errored in the candidate: no verdict"
        elif row["cand"] is False:
            before = {True: "passed", False: "also failed", None: "errored"}[row["base"]]
            kind = "failure"
            message = f"{_first(why) or 'fails in the candidate'} (baseline {before}; "
            message += f"{row['criticality']})"
        if kind:
            _outcome(case, kind, message, why)
        count(kind)
    for case_id, change in r.changes.select("case_id", "change").iter_rows():
        case = _case(suite, case_id, f"{r.suite}.unpaired")
        why = {
            "edited": "edited between the runs: its verdicts are not comparable",
            "added": "added in the candidate: no baseline to compare with",
            "removed": "removed from the candidate: not run",
            "not run": "in the corpus; the candidate did not run it",
        }.get(change, change)
        _outcome(case, "skipped", why)
        count("skipped")
    case = _case(suite, "decision", f"{r.suite}.gate")
    kind = None
    if r.decision is not None and r.decision.blocked:
        kind = "error" if r.status == "UNVERIFIED" else "failure"
        lines = [f"tier {f.tier} {f.slice or '-'}: {f.message}" for f in r.stopping()]
        _outcome(case, kind, f"gate {r.status}", "\n".join(lines))
    count(kind)
    ET.SubElement(case, "system-out").text = _xml(f"gate {r.status}")
    for key, value in counts.items():
        suite.set(key, str(value))
    return ET.tostring(suite, encoding="unicode", xml_declaration=True)

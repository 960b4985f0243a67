"""Render check results: text for people, JSON/YAML for tools, JUnit for CI dashboards, GitHub annotations.

Every message carries ``file:line``; the line is that of the offending field when the engine gives a
field path, else the document's first line. Each placed object also gets its GPU memory line (what it
asked for against the device it lands on, ``webhook.check.waste``) and, with ``--explain``, the grouped
decision trace (``webhook.check.explain``).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from typing import Any, TextIO
from xml.etree import ElementTree as ET

import orjson
import yaml

from webhook.check import explain, waste
from webhook.check.github import write_github
from webhook.check.runner import CheckResult, Status, Summary, summarize
from webhook.engine.decision import Action

Writer = Callable[[Sequence[CheckResult], TextIO, "Options"], None]


class Options:
    def __init__(self, *, diff: bool = False, explain: bool = False, fail_on: str = "deny", verbose: bool = False):
        self.diff = diff
        self.explain = explain
        self.fail_on = fail_on
        self.verbose = verbose


def _dump(obj: Any) -> str:
    return yaml.safe_dump(obj, sort_keys=False, default_flow_style=False, allow_unicode=True, width=100)


def diff_lines(result: CheckResult) -> list[str]:
    decision = result.decision
    if decision is None or not decision.patch or decision.mutated is None:
        return []
    before, after = _dump(result.obj).splitlines(), _dump(decision.mutated).splitlines()
    name = f"{result.file}:{result.line} {result.label}"
    return list(
        difflib.unified_diff(
            before, after, fromfile=f"{name} (as written)", tofile=f"{name} (as admitted)", lineterm="", n=2
        )
    )


def waste_line(result: CheckResult) -> str | None:
    """``gpu memory: 4Gi requested on a MIG 1g.5gb of A100-40GB (5Gi): 80% used, 1Gi idle``.

    Only for objects that would run: a denied object occupies no device.
    """
    report = result.decision.waste if result.decision is not None else None
    if report is None or result.status is Status.DENIED:
        return None
    return f"gpu memory: {waste.describe(report)}"


def placed(results: Sequence[CheckResult]) -> list[CheckResult]:
    """Results whose objects would run (the ones the GPU memory totals count)."""
    return [r for r in results if r.status in (Status.ADMITTED, Status.WARNED)]


def write_text(results: Sequence[CheckResult], out: TextIO, options: Options) -> None:
    for r in results:
        if r.status is Status.SKIPPED and not options.verbose:
            continue
        where = f"{r.file}:{r.line}"
        if r.status in (Status.ERROR, Status.INVALID):
            out.write(f"{where}: {r.status.value}: {r.message}\n")
            continue
        if r.status is Status.SKIPPED:
            out.write(f"{where}: {r.label}: skipped ({r.message})\n")
            continue
        d = r.decision
        assert d is not None
        ops = f", {len(d.patch)} patch operation(s)" if d.patch else ""
        headline = {
            Status.DENIED: "DENIED",
            Status.WARNED: "admitted with warnings",
            Status.ADMITTED: "admitted",
        }[r.status]
        out.write(f"{where}: {r.label} (namespace {r.namespace}): {headline}{ops}\n")
        for v in d.violations:
            out.write(f"  {r.file}:{r.line_of(v.path)}: {v.action.value} {v.render()}\n")
        line = waste_line(r)
        if line:
            out.write(f"  {line}\n")
        if options.explain:
            for line in explain.render(d.explanation):
                out.write(f"{line}\n")
        if options.diff:
            for line in diff_lines(r):
                out.write(f"    {line}\n")
    s = summarize(results)
    out.write(summary_line(s, results) + "\n")


def summary_line(s: Summary, results: Sequence[CheckResult] | None = None) -> str:
    text = (
        f"checked {s.documents} document(s): {s.admitted} admitted, {s.warned} warned, {s.denied} denied, "
        f"{s.skipped} skipped, {s.invalid} invalid, {s.errors} unreadable; {s.mutated} mutated"
    )
    if results is not None:
        line = waste.totals(placed(results)).line()
        return f"{text}; {line}" if line else text
    return text


def result_dict(r: CheckResult, options: Options) -> dict[str, Any]:
    out: dict[str, Any] = {"file": r.file, "line": r.line, "status": r.status.value}
    if isinstance(r.obj, dict):
        meta = r.obj.get("metadata") if isinstance(r.obj.get("metadata"), dict) else {}
        out.update(
            apiVersion=r.obj.get("apiVersion"),
            kind=r.obj.get("kind"),
            name=meta.get("name"),
            namespace=r.namespace or meta.get("namespace"),
        )
    if r.message:
        out["message"] = r.message
    d = r.decision
    if d is not None and d.relevant:
        out["allowed"] = d.allowed
        out["violations"] = [
            {
                "rule": v.rule,
                "action": v.action.value,
                "path": v.path,
                "message": v.message,
                "line": r.line_of(v.path),
            }
            for v in d.violations
        ]
        out["warnings"] = list(d.warnings)
        out["patch"] = list(d.patch)
        if d.waste is not None:
            out["gpuMemory"] = waste.as_dict(d.waste)
            if r.status is not Status.DENIED:
                out["gpuMemory"]["text"] = waste.describe(d.waste)
        if options.explain:
            out["explanation"] = list(d.explanation)
            out["trace"] = explain.parse(d.explanation).as_dict()
    return out


def summary_dict(results: Sequence[CheckResult]) -> dict[str, Any]:
    """The runner's counters plus the GPU memory totals of the objects that would run."""
    out: dict[str, Any] = dict(summarize(results).as_dict())
    out["gpuMemory"] = waste.totals(placed(results)).as_dict()
    return out


def write_json(results: Sequence[CheckResult], out: TextIO, options: Options) -> None:
    payload = {"results": [result_dict(r, options) for r in results], "summary": summary_dict(results)}
    # orjson: ~10x faster than json for a 10,000-document report; non-string keys (YAML ints) kept.
    out.write(orjson.dumps(payload, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS, default=str).decode())
    out.write("\n")


def write_yaml(results: Sequence[CheckResult], out: TextIO, options: Options) -> None:
    """The manifests as the cluster would store them: mutated where the webhook mutates, else verbatim."""
    first = True
    emitted_lists: set[tuple[str, int]] = set()
    for r in results:
        if r.status is Status.ERROR:
            continue
        if r.item_path:  # a List: print it once, with its mutated items
            key = (r.file, id(r.text))
            if key in emitted_lists:
                continue
            emitted_lists.add(key)
            siblings = [x for x in results if x.file == r.file and x.text is r.text and x.item_path]
            if not any(x.decision is not None and x.decision.patch for x in siblings):
                body = r.text
            else:
                doc = yaml.safe_load(r.text)
                for x in siblings:
                    if x.decision is not None and x.decision.patch and x.decision.mutated is not None:
                        doc["items"][x.item_path[1]] = x.decision.mutated
                body = _dump(doc)
        elif r.decision is not None and r.decision.patch and r.decision.mutated is not None:
            body = _dump(r.decision.mutated)
        else:
            body = r.text
        if not first:
            out.write("---\n")
        out.write(body if body.endswith("\n") or not body else body + "\n")
        first = False


def write_junit(results: Sequence[CheckResult], out: TextIO, options: Options) -> None:
    suite = ET.Element("testsuite", name="gpu-admission check")
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    totals = waste.totals(placed(results))
    props = ET.SubElement(suite, "properties")
    for key, value in totals.as_dict().items():
        ET.SubElement(props, "property", name=f"gpuMemory.{key}", value="" if value is None else str(value))
    line = totals.line()
    if line:
        ET.SubElement(props, "property", name="gpuMemory.summary", value=line)
    for r in results:
        counts["tests"] += 1
        case = ET.SubElement(suite, "testcase", classname=r.file, name=f"{r.label} (line {r.line})")
        report = r.decision.waste if r.decision is not None else None
        if report is not None and r.status is not Status.DENIED:
            case_props = ET.SubElement(case, "properties")
            for key, value in waste.as_dict(report).items():
                ET.SubElement(
                    case_props, "property", name=f"gpuMemory.{key}", value="" if value is None else str(value)
                )
            ET.SubElement(case_props, "property", name="gpuMemory.summary", value=waste.describe(report))
        if r.status in (Status.ERROR, Status.INVALID):
            counts["errors"] += 1
            ET.SubElement(
                case, "error", message=r.message, type=r.status.value
            ).text = f"{r.file}:{r.line}: {r.message}"
        elif r.status is Status.SKIPPED:
            counts["skipped"] += 1
            ET.SubElement(case, "skipped", message=r.message)
        elif r.decision is not None:
            failing = [
                v
                for v in r.decision.violations
                if v.action is Action.DENY or (options.fail_on == "warn" and v.action is Action.WARN)
            ]
            body = "\n".join(
                [f"{r.file}:{r.line_of(v.path)}: {v.action.value} {v.render()}" for v in r.decision.violations]
                + (explain.render(r.decision.explanation, indent="") if options.explain else [])
            )
            if failing:
                counts["failures"] += 1
                ET.SubElement(
                    case, "failure", message="; ".join(v.render() for v in failing), type=failing[0].rule
                ).text = body
            elif body:
                ET.SubElement(case, "system-out").text = body
    for key, value in counts.items():
        suite.set(key, str(value))
    out.write(ET.tostring(suite, encoding="unicode", xml_declaration=True))
    out.write("\n")


WRITERS: dict[str, Writer] = {
    "text": write_text,
    "json": write_json,
    "yaml": write_yaml,
    "junit": write_junit,
    "github": write_github,
}


def exit_code(results: Sequence[CheckResult], fail_on: str) -> int:
    """0 admitted, 1 denied (or warned with --fail-on warn, or not a Kubernetes object), 2 unreadable."""
    if any(r.status is Status.ERROR for r in results):
        return 2
    if any(r.status in (Status.DENIED, Status.INVALID) for r in results):
        return 1
    if fail_on == "warn" and any(r.status is Status.WARNED for r in results):
        return 1
    return 0

"""Render the audit: text for people (counts first), JSON for tools, JUnit for CI, OpenReports for
the cluster. Each writer takes the stream of judged objects and consumes it; the JSON and JUnit
writers are ``check``'s own (:func:`~webhook.check.formats.write_json_stream`,
:func:`~webhook.check.formats.write_junit_suite`) with audit's records in them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TextIO
from xml.etree import ElementTree as ET

import orjson

from webhook.audit.baseline import NEWLY_ADMITTED, NEWLY_DENIED, NEWLY_WARNED, NO_LONGER_WARNED, UNCHANGED
from webhook.audit.exceptions import ExceptionReport
from webhook.audit.judge import Judged
from webhook.audit.openreports import ReportBuilder
from webhook.audit.tally import AuditTally
from webhook.check.formats import write_json_stream, write_junit_suite
from webhook.check.runner import Status
from webhook.engine.model.decision import Action


@dataclass(slots=True)
class Run:
    """What every writer may need besides the stream: the counts, the notes, the reports."""

    tally: AuditTally
    reports: ReportBuilder
    notes: list[str] = field(default_factory=list)
    source: str = ""  # "cluster https://…" or "snapshot FILE…"
    baseline: str = ""  # the old policy directory
    exceptions: ExceptionReport | None = None  # exceptions in use and expiring (every format shows them)
    enforcement: str = "enforce"  # the policy's settings.enforcement: said beside the denials it admits


def enforcement_line(run: Run) -> str | None:
    """Under an observe mode, what the denials above mean in the cluster today."""
    if run.enforcement == "enforce":
        return None
    shown = "an admission warning and an audit record" if run.enforcement == "warn" else "an audit record only"
    return (
        f"enforcement: {run.enforcement} (settings.enforcement): the cluster admits what is denied here, with "
        f"{shown}; set enforcement: enforce to refuse it"
    )


Writer = Callable[[Iterable[Judged], TextIO, Run], None]


def _drain(stream: Iterable[Judged]) -> None:
    for _ in stream:
        pass


def summary_line(t: AuditTally) -> str:
    text = (
        f"audited {t.judged:,} GPU-relevant object(s): {t.status['admitted']:,} admitted, "
        f"{t.status['warned']:,} warned, {t.status['denied']:,} denied"
    )
    if t.status["engine-error"]:
        text += f", {t.status['engine-error']:,} engine error(s)"
    rest = [f"{t.skipped['not-gpu']:,} without GPUs or intent"]
    if t.skipped["not-intercepted"]:
        rest.append(f"{t.skipped['not-intercepted']:,} in namespaces the webhook does not intercept")
    if t.skipped["mirror-pod"]:
        rest.append(f"{t.skipped['mirror-pod']:,} mirror pod(s)")
    return f"{text}; not judged: {', '.join(rest)}"


def baseline_line(t: AuditTally, old: str) -> str:
    v = t.verdicts
    return (
        f"against the baseline policy {old}: {v[NEWLY_DENIED]:,} newly denied, {v[NEWLY_WARNED]:,} newly warned, "
        f"{v[NEWLY_ADMITTED]:,} newly admitted, {v[NO_LONGER_WARNED]:,} no longer warned, {v[UNCHANGED]:,} unchanged; "
        f"{t.mutated:,} would be mutated differently"
    )


def _more(total: int, shown: int) -> str | None:
    return f"… and {total - shown:,} more (-o json lists every one)" if total > shown else None


def write_text(stream: Iterable[Judged], out: TextIO, run: Run) -> None:
    """Counts first (summary, then per namespace and rule), then examples of each group."""
    _drain(stream)
    t = run.tally
    out.write(f"gpu-admission audit of {run.source}\n" if run.source else "")
    out.write(summary_line(t) + "\n")
    if (mode := enforcement_line(run)) is not None:
        out.write(mode + "\n")
    for note in run.notes:
        out.write(f"note: {note}\n")
    if run.baseline:
        out.write(baseline_line(t, run.baseline) + "\n")
        for verdict in (NEWLY_DENIED, NEWLY_WARNED, NEWLY_ADMITTED, NO_LONGER_WARNED):
            listed = t.changed.get(verdict) or []
            if not listed:
                continue
            out.write(f"{verdict} ({t.verdicts[verdict]:,}):\n")
            for j in listed:
                out.write(f"  {j.where}{_owner(j)}: {_rules(j, verdict)}\n")
            more = _more(t.verdicts[verdict], len(listed))
            if more:
                out.write(f"  {more}\n")
        if t.mutated_examples:
            out.write(f"mutated differently ({t.mutated:,}):\n")
            for j in t.mutated_examples:
                assert j.change is not None
                out.write(f"  {j.where}{_owner(j)}: {'; '.join(j.change.mutation)}\n")
            more = _more(t.mutated, len(t.mutated_examples))
            if more:
                out.write(f"  {more}\n")
    if t.groups:
        out.write("findings by namespace and rule:\n")
        width = max(len(ns or "(cluster)") for ns, _, _ in t.groups)
        rule_width = max(len(rule) for _, rule, _ in t.groups)
        for (ns, rule, action), n in sorted(t.groups.items()):
            out.write(f"  {(ns or '(cluster)'):<{width}}  {rule:<{rule_width}}  {action:<5}  {n:,}\n")
        for (ns, rule, action), n in sorted(t.groups.items()):
            out.write(f"{ns or '(cluster)'}: [{rule}] {action}, {n:,} finding(s):\n")
            listed = t.examples.get((ns, rule, action)) or []
            for line in listed:
                out.write(f"  {line}\n")
            more = _more(n, len(listed))
            if more:
                out.write(f"  {more}\n")
    if run.exceptions is not None:
        for line in run.exceptions.lines():
            out.write(line + "\n")
    for line in t.errors:
        out.write(f"engine error: {line}\n")


def _owner(j: Judged) -> str:
    return f" (owner {j.owner})" if j.owner else ""


def _rules(j: Judged, verdict: str) -> str:
    """What made the verdict: the new findings for a new denial or warning, the old ones that went."""
    change = j.change
    assert change is not None
    if verdict in (NEWLY_ADMITTED, NO_LONGER_WARNED):
        gone = [v for v in change.old_violations if v not in j.violations]
        return "no longer " + "; ".join(v.render() for v in gone) if gone else f"was {change.old_status.value}"
    denial = verdict == NEWLY_DENIED
    found = [
        v
        for v in j.violations
        if (v.action is Action.DENY or v.would_deny if denial else v.action is Action.WARN and not v.would_deny)
        and v not in change.old_violations
    ]
    return "; ".join(v.render() for v in (found or j.violations))


def violation_dict(v: Any) -> dict[str, Any]:
    out = {"rule": v.rule, "action": v.action.value, "path": v.path, "message": v.message}
    if v.exception:
        out["exception"] = v.exception  # the policy exception that turned it into an audit entry
    if v.would_deny:
        out["wouldDeny"] = True  # the rule denies; the policy's enforcement mode admits it on the record
    return out


def result_dict(j: Judged) -> dict[str, Any]:
    out: dict[str, Any] = {
        "apiVersion": j.api_version,
        "kind": j.kind,
        "namespace": j.namespace,
        "name": j.name,
        "uid": j.uid,
        "status": j.status.value,
    }
    if j.owner:
        out["owner"] = j.owner
    if j.message:
        out["message"] = j.message
    out["violations"] = [violation_dict(v) for v in j.violations]
    if j.change is not None:
        c = j.change
        out["baseline"] = {
            "change": c.verdict,
            "oldStatus": (Status.ADMITTED if c.old_status is Status.SKIPPED else c.old_status).value,
            "oldViolations": [violation_dict(v) for v in c.old_violations],
            "mutatedDifferently": c.mutated_differently,
            "mutation": list(c.mutation),
        }
    return out


def write_json(stream: Iterable[Judged], out: TextIO, run: Run) -> None:
    """Every GPU-relevant object, as judged (streamed), then the notes and the summary."""
    judged = (result_dict(j) for j in stream if j.status is not Status.SKIPPED)
    def trailer() -> dict[str, Any]:
        out: dict[str, Any] = {"notes": list(run.notes), "summary": run.tally.summary(), "enforcement": run.enforcement}
        if run.exceptions is not None:
            out["exceptions"] = run.exceptions.summary()
        return out

    write_json_stream(out, judged, trailer)


def _case(j: Judged, baseline: bool) -> tuple[ET.Element, str | None]:
    case = ET.Element("testcase", classname=j.namespace or "(cluster)", name=j.label)
    body = "\n".join(v.render() for v in j.violations)
    if j.status is Status.ENGINE_ERROR:
        ET.SubElement(case, "error", message=j.message, type="engine-error").text = j.message
        return case, "errors"
    failing = j.change.verdict == NEWLY_DENIED if baseline and j.change is not None else j.status is Status.DENIED
    if failing:
        denials = [v for v in j.violations if v.action is Action.DENY or v.would_deny]
        ET.SubElement(
            case, "failure", message="; ".join(v.render() for v in denials), type=denials[0].rule if denials else ""
        ).text = body + (f"\nowner: {j.owner}" if j.owner else "")
        return case, "failures"
    if body:
        ET.SubElement(case, "system-out").text = body
    return case, None


def write_junit(stream: Iterable[Judged], out: TextIO, run: Run) -> None:
    """A testcase per GPU-relevant object: denied (with --baseline: newly denied) objects fail."""
    baseline = bool(run.baseline)
    cases = (_case(j, baseline) for j in stream if j.status is not Status.SKIPPED)
    def properties() -> dict[str, str]:
        out = {"summary": summary_line(run.tally), "enforcement": run.enforcement}
        if run.exceptions is not None:
            out.update(exception_properties(run.exceptions))
        return out

    write_junit_suite(out, "gpu-admission audit", cases, properties)


def exception_properties(report: ExceptionReport) -> dict[str, str]:
    """JUnit suite properties: one per exception in use (what it covered) and per one expiring soon."""
    out = {"exceptions-date": report.today.isoformat()}
    for exc, use in report.in_use():
        covered = ", ".join(f"{where} [{rule}]" for where, rule, _ in use.examples)
        more = f", … {use.count - len(use.examples):,} more" if use.count > len(use.examples) else ""
        out[f"exception-in-use.{exc.name}"] = (
            f"{use.count:,} finding(s) of {', '.join(exc.rules)} on {len(use.objects):,} object(s): {covered}{more}; "
            f"owner {exc.owner}, expires {exc.expires.isoformat()}"
        )
    for exc, left in report.expiring():
        when = report.when(left, exc)
        out[f"exception-expiring.{exc.name}"] = f"{when}; rules {', '.join(exc.rules)}; owner {exc.owner}"
    if (note := report.note()) is not None:
        out["exceptions-note"] = note
    return out


def write_openreports(stream: Iterable[Judged], out: TextIO, run: Run) -> None:
    """The reports as a YAML stream of JSON documents (JSON is YAML: ``kubectl apply -f`` reads it).

    JSON because a cluster's worth of reports is tens of thousands of results: PyYAML's emitter
    takes ~1.5 ms per result, orjson a hundredth of that."""
    _drain(stream)
    if run.exceptions is not None:
        run.reports.add_exceptions(run.exceptions)
    for i, doc in enumerate(run.reports.documents()):
        if i:
            out.write("---\n")
        out.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")


WRITERS: dict[str, Writer] = {
    "text": write_text,
    "json": write_json,
    "junit": write_junit,
    "openreports": write_openreports,
}

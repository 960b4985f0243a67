"""``-o openreports``: the audit as ``openreports.io/v1alpha1`` Reports, the format Policy Reporter reads.

One ``Report`` named ``gpu-admission`` per namespace (``scope``: that Namespace) and one
``ClusterReport`` of that name for cluster-scoped objects, never one per object: a per-resource
report is what filled etcd with over a million objects in Kyverno clusters. Each finding is one
result (policy ``gpu-admission``, rule = the rule id, ``properties.path`` = its field path); an
object with no finding is counted as ``pass`` without a result of its own (``configuration.limits.
statusFilter`` says so). Results are capped at :data:`MAX_RESULTS` per report, failures kept first,
then errors, then warnings; ``summary`` still counts every result, and the annotation
``gpu-admission.io/results-omitted`` says how many were left out. With messages cut at
:data:`MAX_MESSAGE` characters a full report stays under ~570 KB, well under etcd's 1.5 MiB object
limit.

Every field follows the CRD exactly (unknown fields would be pruned by the apiserver):
``timestamp`` is ``{seconds, nanos}``, ``properties`` is a map of strings, ``severity`` one of
critical|high|medium|low|info.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from webhook.audit.judge import Judged
from webhook.audit.tally import tap
from webhook.check.runner import Status
from webhook.engine.model.decision import Action

if TYPE_CHECKING:
    from webhook.audit.exceptions import ExceptionReport

API_VERSION = "openreports.io/v1alpha1"
NAME = "gpu-admission"
POLICY = "gpu-admission"
SOURCE = "gpu-admission"
FIELD_MANAGER = "gpu-admission"
MAX_RESULTS = 300
"""Results kept per report. With message, field path, object reference and owner bounded a result is
at most ~1.9 KB, so a full report stays under ~570 KB: under 40 % of etcd's 1.5 MiB object limit."""
MAX_MESSAGE = 600
MAX_PROPERTY = 300
OMITTED_ANNOTATION = "gpu-admission.io/results-omitted"
ENFORCEMENT = "gpu-admission.io/enforcement"
"""The policy's ``settings.enforcement`` when the report was made: ``enforce``, ``warn`` or ``audit``."""
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpu-admission"}
STATUS_FILTER = ["fail", "error", "warn"]

_RESULT = {Action.DENY: ("fail", "high"), Action.WARN: ("warn", "medium"), Action.AUDIT: ("warn", "info")}
_RANK = {"fail": 0, "error": 1, "warn": 2}


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(slots=True)
class _Report:
    """One report's counts and its bounded results, best kept first (fail, error, warn)."""

    namespace: str
    summary: dict[str, int] = field(default_factory=lambda: dict.fromkeys(("pass", "fail", "warn", "error", "skip"), 0))
    kept: list[list[dict[str, Any]]] = field(default_factory=lambda: [[], [], []])

    def count(self) -> int:
        return sum(len(k) for k in self.kept)

    def add(self, result: dict[str, Any]) -> None:
        self.summary[result["result"]] += 1
        rank = _RANK[result["result"]]
        if self.count() < MAX_RESULTS:
            self.kept[rank].append(result)
            return
        for lower in (2, 1):  # full: a failure displaces the last warning (then error) kept
            if lower > rank and self.kept[lower]:
                self.kept[lower].pop()
                self.kept[rank].append(result)
                return


class ReportBuilder:
    """Gathers judged objects into per-namespace reports; memory is bounded by namespaces x cap."""

    def __init__(self, timestamp: float, enforcement: str = "enforce") -> None:
        self.timestamp = {"seconds": int(timestamp), "nanos": int((timestamp % 1) * 1e9)}
        self.reports: dict[str, _Report] = {}
        self.enforcement = enforcement  # the policy's settings.enforcement, said on every report

    def observe(self, judged: Iterable[Judged]) -> Iterator[Judged]:
        return tap(self.add, judged)

    def add(self, j: Judged) -> None:
        if j.status is Status.SKIPPED:
            return
        report = self.reports.get(j.namespace)
        if report is None:
            report = self.reports[j.namespace] = _Report(j.namespace)
        if j.status is Status.ENGINE_ERROR:
            report.add(self._result(j, "engine-error", "error", "high", j.message, {}))
            return
        if not j.violations:
            report.summary["pass"] += 1
            return
        for v in j.violations:
            # a finding the rule denies stays a failure under an observe mode: the report says the mode
            result, severity = _RESULT[Action.DENY if v.would_deny else v.action]
            props = {"path": v.path, "action": v.action.value}
            if v.would_deny:
                props["wouldDeny"] = "true"
            if v.exception:  # an excepted finding: audit, naming the exception that turned it into one
                props["exception"] = v.exception
            report.add(self._result(j, v.rule, result, severity, v.message, props))

    def add_exceptions(self, exceptions: ExceptionReport) -> None:
        """The policy's exceptions in the ClusterReport (they are cluster-wide policy): one ``warn`` result
        of severity ``info`` per exception in use, naming the objects and findings it covered, and one
        ``warn`` of severity ``low`` per exception that expires within a week (or has expired); no
        resources, since an exception is not an object of the cluster."""
        used, expiring = exceptions.in_use(), exceptions.expiring()
        if not used and not expiring:
            return  # no ClusterReport made for nothing
        report = self.reports.get("")
        if report is None:
            report = self.reports[""] = _Report("")
        for exc, use in used:
            covered = ", ".join(f"{where} [{rule}]" for where, rule, _ in use.examples)
            more = f", … {use.count - len(use.examples):,} more" if use.count > len(use.examples) else ""
            message = (
                f"exception {exc.name} ({exc.reason}) covered {use.count:,} finding(s) of {', '.join(exc.rules)} "
                f"on {len(use.objects):,} object(s): {covered}{more}"
            )
            report.add(self._exception(exc, "exception-in-use", "info", message, {"findings": str(use.count)}))
        for exc, left in expiring:
            when = exceptions.when(left, exc)
            message = f"exception {exc.name} {when}; from then {', '.join(exc.rules)} applies again"
            report.add(self._exception(exc, "exception-expiring", "low", message, {"daysLeft": str(left)}))

    def _exception(self, exc: Any, rule: str, severity: str, message: str, extra: dict[str, str]) -> dict[str, Any]:
        props = {
            "exception": exc.name,
            "rules": ",".join(exc.rules),
            "expires": exc.expires.isoformat(),
            "owner": exc.owner,
            "subjects": ",".join(s.ref for s in exc.subjects),
            **extra,
        }
        return {
            "source": SOURCE,
            "policy": POLICY,
            "rule": rule,
            "result": "warn",
            "severity": severity,
            "scored": False,
            "message": _cut(message, MAX_MESSAGE),
            "properties": {k: _cut(v, MAX_PROPERTY) for k, v in props.items() if v},
            "timestamp": dict(self.timestamp),
        }

    def _result(
        self, j: Judged, rule: str, result: str, severity: str, message: str, props: dict[str, str]
    ) -> dict[str, Any]:
        ref: dict[str, str] = {"apiVersion": j.api_version, "kind": j.kind, "name": j.name}
        if j.namespace:
            ref["namespace"] = j.namespace
        if j.uid:
            ref["uid"] = j.uid
        properties = {k: _cut(v, MAX_PROPERTY) for k, v in props.items() if v}
        if j.owner:
            properties["owner"] = _cut(j.owner, MAX_PROPERTY)
        return {
            "source": SOURCE,
            "policy": POLICY,
            "rule": rule,
            "result": result,
            "severity": severity,
            "scored": True,
            "message": _cut(message, MAX_MESSAGE),
            "resources": [ref],
            "properties": properties,
            "timestamp": dict(self.timestamp),  # a copy each: YAML output would alias one shared map
        }

    def documents(self, also: Iterable[str] = ()) -> list[dict[str, Any]]:
        """The reports, namespaces in order (the ClusterReport last); ``also``: namespaces that get an
        empty report (they had one from an earlier run and have nothing now)."""
        for namespace in also:
            self.reports.setdefault(namespace, _Report(namespace))
        out = [report_document(r, self.enforcement) for ns, r in sorted(self.reports.items()) if ns]
        if "" in self.reports:
            out.append(report_document(self.reports[""], self.enforcement))
        return out


def report_document(r: _Report, enforcement: str = "enforce") -> dict[str, Any]:
    """One Report (or the ClusterReport); its annotations say the policy's enforcement mode, so a reader of
    ``result: fail`` knows whether the cluster denies it or, under warn or audit, admits it on the record."""
    results = [x for kept in r.kept for x in kept]
    total = sum(r.summary[k] for k in STATUS_FILTER)
    meta: dict[str, Any] = {"name": NAME, "labels": dict(MANAGED_BY), "annotations": {ENFORCEMENT: enforcement}}
    if total > len(results):
        meta["annotations"][OMITTED_ANNOTATION] = str(total - len(results))
    doc: dict[str, Any] = {"apiVersion": API_VERSION, "kind": "Report" if r.namespace else "ClusterReport"}
    if r.namespace:
        meta["namespace"] = r.namespace
    doc["metadata"] = meta
    if r.namespace:
        doc["scope"] = {"apiVersion": "v1", "kind": "Namespace", "name": r.namespace}
    doc["source"] = SOURCE
    doc["configuration"] = {"limits": {"maxResults": MAX_RESULTS, "statusFilter": list(STATUS_FILTER)}}
    doc["summary"] = dict(r.summary)
    doc["results"] = results
    return doc


def report_path(doc: dict[str, Any]) -> str:
    """Where a report lives in the API (the path server-side apply PATCHes)."""
    meta = doc["metadata"]
    if doc["kind"] == "Report":
        return f"/apis/{API_VERSION}/namespaces/{meta['namespace']}/reports/{meta['name']}"
    return f"/apis/{API_VERSION}/clusterreports/{meta['name']}"

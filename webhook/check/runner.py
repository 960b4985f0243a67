"""Run every document of every source through the engine, keeping file and line for each message."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from webhook import yamlpos
from webhook.check.inputs import Source
from webhook.engine import Decision, evaluate
from webhook.engine.decision import Action
from webhook.engine.workload import classify
from webhook.policy.compiled import Policy


class Status(StrEnum):
    ADMITTED = "admitted"
    WARNED = "warned"
    DENIED = "denied"
    SKIPPED = "skipped"  # not a workload kind, or no GPU resources and no intent
    INVALID = "invalid"  # a YAML document that is not a Kubernetes object
    ERROR = "error"  # unreadable input: missing file, YAML syntax error


@dataclass(slots=True)
class CheckResult:
    file: str
    line: int
    status: Status
    obj: Any = None
    decision: Decision | None = None
    text: str = ""  # the document's source text, verbatim
    message: str = ""  # for INVALID / ERROR / SKIPPED
    item_path: tuple[str | int, ...] = ()  # ("items", i) inside a List
    lines: dict[str, int] = field(default_factory=dict)  # violation path -> line
    namespace: str = ""

    @property
    def label(self) -> str:
        if isinstance(self.obj, dict):
            kind = self.obj.get("kind", "?")
            meta = self.obj.get("metadata") if isinstance(self.obj.get("metadata"), dict) else {}
            name = meta.get("name") or (
                f"{meta['generateName']}*" if meta.get("generateName") else "<unnamed>"
            )
            return f"{kind}/{name}"
        return "document"

    def line_of(self, path: str) -> int:
        return self.lines.get(path, self.line)


_PART = re.compile(r"\[([^\]]*)\]|\.?([^.\[]+)")


def parse_dotted(path: str) -> tuple[str | int, ...]:
    """Inverse of the engine's field-path style: ``a.b[0][x/y]`` -> ("a", "b", 0, "x/y")."""
    out: list[str | int] = []
    for bracket, plain in _PART.findall(path):
        if plain:
            out.append(plain)
        elif bracket.isdigit():
            out.append(int(bracket))
        else:
            out.append(bracket)
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Namespaces:
    default: str
    labels: dict[str, dict[str, str]]

    def for_object(self, obj: dict[str, Any]) -> tuple[str, dict[str, str] | None]:
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        ns = meta.get("namespace") if isinstance(meta.get("namespace"), str) else self.default
        return ns, self.labels.get(ns)


def check_sources(
    policy: Policy,
    sources: Iterable[Source],
    *,
    namespaces: Namespaces,
    explain: bool = False,
) -> Iterator[CheckResult]:
    for source in sources:
        if source.text is None:
            yield CheckResult(source.name, 0, Status.ERROR, message=source.error or "unreadable")
            continue
        yield from _check_text(policy, source.name, source.text, namespaces, explain)


def _check_text(
    policy: Policy, name: str, text: str, namespaces: Namespaces, explain: bool
) -> Iterator[CheckResult]:
    for item in yamlpos.iter_documents(text, with_nodes=False):
        if isinstance(item, yamlpos.SyntaxProblem):
            yield CheckResult(name, item.line, Status.ERROR, message=f"YAML syntax error: {item.problem}")
            continue
        data = item.data
        if data is None:
            continue
        if isinstance(data, dict) and data.get("kind") == "List" and isinstance(data.get("items"), list):
            for index, element in enumerate(data["items"]):
                yield _check_object(policy, name, item, element, ("items", index), namespaces, explain)
            continue
        yield _check_object(policy, name, item, data, (), namespaces, explain)


def _check_object(
    policy: Policy,
    file: str,
    doc: yamlpos.Document,
    obj: Any,
    prefix: tuple[str | int, ...],
    namespaces: Namespaces,
    explain: bool,
) -> CheckResult:
    line = doc.line if not prefix else _position(doc, prefix).line
    if not isinstance(obj, dict) or not obj.get("apiVersion") or not obj.get("kind"):
        what = "a mapping without apiVersion/kind" if isinstance(obj, dict) else f"a {type(obj).__name__}"
        return CheckResult(
            file,
            line,
            Status.INVALID,
            obj=obj,
            text=doc.text,
            item_path=prefix,
            message=f"not a Kubernetes object ({what}); kubectl apply would reject it",
        )
    if classify(obj) is None:
        return CheckResult(
            file,
            line,
            Status.SKIPPED,
            obj=obj,
            text=doc.text,
            item_path=prefix,
            message=f"{obj.get('apiVersion')} {obj.get('kind')} carries no pod template the engine checks",
        )
    ns, labels = namespaces.for_object(obj)
    decision = evaluate(
        policy, obj, operation="CREATE", namespace=ns, namespace_labels=labels, explain=explain
    )
    if not decision.relevant:
        return CheckResult(
            file,
            line,
            Status.SKIPPED,
            obj=obj,
            decision=decision,
            text=doc.text,
            item_path=prefix,
            message="no GPU resources and no intent label",
            namespace=ns,
        )
    if not decision.allowed:
        status = Status.DENIED
    elif any(v.action is Action.WARN for v in decision.violations):
        status = Status.WARNED
    else:
        status = Status.ADMITTED
    result = CheckResult(
        file, line, status, obj=obj, decision=decision, text=doc.text, item_path=prefix, namespace=ns
    )
    if decision.violations:
        located = doc.ensure_nodes()
        for v in decision.violations:
            result.lines[v.path] = located.position((*prefix, *parse_dotted(v.path))).line
    return result


def _position(doc: yamlpos.Document, path: tuple[str | int, ...]) -> yamlpos.Position:
    return doc.ensure_nodes().position(path)


@dataclass(slots=True)
class Summary:
    documents: int = 0
    admitted: int = 0
    warned: int = 0
    denied: int = 0
    skipped: int = 0
    invalid: int = 0
    errors: int = 0
    mutated: int = 0

    def as_dict(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}  # type: ignore[attr-defined]


def summarize(results: Iterable[CheckResult]) -> Summary:
    summary = Summary()
    for r in results:
        summary.documents += 1
        setattr(summary, _COUNTER[r.status], getattr(summary, _COUNTER[r.status]) + 1)
        if r.decision is not None and r.decision.patch:
            summary.mutated += 1
    return summary


_COUNTER = {
    Status.ADMITTED: "admitted",
    Status.WARNED: "warned",
    Status.DENIED: "denied",
    Status.SKIPPED: "skipped",
    Status.INVALID: "invalid",
    Status.ERROR: "errors",
}

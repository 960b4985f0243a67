"""Run every document of every source through the engine, keeping file and line for each message."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import date
from enum import StrEnum
from typing import Any

from webhook import yamlpos
from webhook.check.apiserver_limits import refused_by_apiserver
from webhook.check.context import CONTEXT_KINDS
from webhook.check.expand import ExpandedPod
from webhook.check.expand import expand as expand_pods
from webhook.check.inputs import ReadError, Source
from webhook.check.not_manifests import not_a_manifest, tool_document
from webhook.check.old import OldObjects
from webhook.engine import Decision, Request, report
from webhook.engine import explain as explain_entry
from webhook.engine.claim_object import is_claim_object
from webhook.engine.model.cluster import EMPTY_CLUSTER, Cluster
from webhook.engine.model.decision import Action, Violation
from webhook.engine.model.requester import Requester
from webhook.engine.model.workload import classify
from webhook.policy.compiled import Policy


class Status(StrEnum):
    ADMITTED = "admitted"
    WARNED = "warned"
    DENIED = "denied"
    SKIPPED = "skipped"  # not a workload kind, or no GPU resources and no intent
    INVALID = "invalid"  # a YAML document that is not a Kubernetes object
    ERROR = "error"  # unreadable input: missing file, not UTF-8, YAML syntax error, alias bomb
    ENGINE_ERROR = "engine-error"  # the engine raised on this object: nothing was judged
    EMPTY = "empty"  # an input that holds no document (an empty file, a directory without manifests)


UNJUDGED = (Status.INVALID, Status.ERROR, Status.ENGINE_ERROR)
"""Results that mean "this input could not be judged": exit 2."""


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
    expanded: list[ExpandedPod] = field(default_factory=list)  # --expand: the pods its controller creates
    namespace: str = ""
    column: int = 0  # where a YAML error is; 0: not known / not an error
    attention: str = ""  # a skipped document that carries GPU resources or intent keys: where
    noted: bool = False  # a skipped input that is not manifests (kustomize, Helm): always shown, with its note

    @property
    def where(self) -> str:
        """``file:line:col`` (``file:line`` without a column; ``file`` for a whole input)."""
        if not self.line:
            return self.file
        return f"{self.file}:{self.line}:{self.column}" if self.column else f"{self.file}:{self.line}"

    @property
    def label(self) -> str:
        if isinstance(self.obj, dict) and self.obj.get("kind"):
            kind = self.obj["kind"]
            meta = self.obj.get("metadata") if isinstance(self.obj.get("metadata"), dict) else {}
            name = meta.get("name") or (
                f"{meta['generateName']}*" if meta.get("generateName") else "<unnamed>"
            )
            return f"{kind}/{name}"
        return "document"

    def line_of(self, path: str) -> int:
        return self.lines.get(path, self.line)

    @property
    def patched(self) -> bool:
        """The webhook would mutate it (the summary's ``mutated``)."""
        return self.decision is not None and bool(self.decision.patch)

    @property
    def observed(self) -> bool:
        """Admitted or warned only because the policy's enforcement mode observes (``wouldDeny``)."""
        return self.decision is not None and self.status is not Status.DENIED and bool(self.decision.would_deny)

    @property
    def waste(self) -> Any:
        """The GPU memory report of a judged object (``webhook.check.waste``), or None."""
        return self.decision.waste if self.decision is not None else None


@dataclass(slots=True)
class Rendered:
    """A result as a pool worker sends it back: its report text for the chosen ``-o`` format, already
    written (``body``), and only what the main process still needs from it: the summary's counters,
    the GPU memory totals, the progress line's file. A string pickles far faster than the object,
    its decision and its mutated copy, and the main process no longer formats what it prints."""

    file: str
    status: Status
    body: Any  # what the writer prints for it: text, or (text, how it counts) for JUnit
    attention: str = ""
    patched: bool = False
    observed: bool = False
    waste: Any = None


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
    cluster: Cluster = EMPTY_CLUSTER,
    old: OldObjects | None = None,
    requester: Requester | None = None,
    today: date | None = None,
    workers: int = 1,
    expand: bool = False,
    render: Callable[[CheckResult], Rendered] | None = None,
) -> Iterator[CheckResult | Rendered]:
    """One result per document, as each is judged: nothing is kept once the caller has it.

    ``old`` holds the objects UPDATEs replace (``--old``): a document paired with one is judged as
    that UPDATE, the way the server's ``/validate`` judges it. ``requester`` (``--as``) and ``today``
    decide which policy exceptions hold, as the server's ``userInfo`` and clock do.

    ``workers`` > 1 parses and judges batches of documents in that many processes
    (:func:`webhook.pool.ordered`), yielding exactly the results of one worker in the same order.
    With ``old`` it stays 1: pairing a document with the object it replaces consumes that object,
    which only one process can do in input order.

    ``render`` (module-level, so it pickles): what a pool worker applies to each of its results before
    sending it back (:class:`Rendered`: the report's text for it); the results made in this process,
    and every result on one worker, come as they are. So the caller's writer must take both."""
    judge = _Judge(policy, namespaces, explain, cluster, old, requester, today, expand, render)
    if workers > 1 and old is None:
        yield from _parallel(judge, sources, workers)
        return
    for source in sources:
        if source.error is not None:
            yield CheckResult(source.name, 0, Status.ERROR, message=source.error)
            continue
        if source.empty is not None:
            yield CheckResult(source.name, 0, Status.EMPTY, message=source.empty)
            continue
        if source.note is not None:
            yield CheckResult(source.name, 0, Status.SKIPPED, message=source.note, noted=True)
            continue
        found = False
        try:
            bad: list[ReadError] = []
            for result in _readable(judge, source.name, yamlpos.iter_block_chunks(source.blocks(bad)), bad):
                found = True
                yield result
        except ReadError as exc:
            found = True
            yield CheckResult(source.name, exc.line, Status.ERROR, message=exc.message)
        if not found:
            yield CheckResult(source.name, 0, Status.EMPTY, message="no documents (an empty file, or only comments)")


def _readable(
    judge: _Judge, name: str, chunks: Iterable[tuple[int, str]], bad: list[ReadError]
) -> Iterator[CheckResult]:
    """Judge each document, except one holding a line that is not UTF-8: that one is an error at the
    line, and the file's other documents are still judged."""
    for start, text in chunks:
        end = start + text.count("\n")
        problem = next((e for e in bad if start <= e.line <= end), None)
        if problem is not None:
            bad[:] = [e for e in bad if not start <= e.line <= end]
            yield CheckResult(name, problem.line, Status.ERROR, message=problem.message)
            continue
        yield from judge.chunks(name, ((start, text),))


BATCH_DOCUMENTS = 64
"""Documents per task of the process pool: enough to amortise a task's pickling round trip (about
50 µs), few enough that the window of in-flight batches stays a few hundred kilobytes."""
BATCH_CHARS = 256 * 1024


@dataclass(frozen=True, slots=True)
class _Begin:
    """A readable source starts: the results after it are that source's."""


@dataclass(frozen=True, slots=True)
class _End:
    """A readable source ends: if it produced no result it is EMPTY, as in the serial loop."""

    name: str


_WORKER_JUDGE: _Judge | None = None  # a pool worker's judge, set once by its initializer


def _init_worker(judge: _Judge) -> None:
    global _WORKER_JUDGE
    _WORKER_JUDGE = judge


def _judge_batch(name: str, chunks: list[tuple[int, str]]) -> list[CheckResult] | list[Rendered]:
    """A pool task: parse and judge a batch of one file's documents (module-level, so it pickles)."""
    assert _WORKER_JUDGE is not None, "the pool's initializer sets the judge"
    render = _WORKER_JUDGE.render
    if render is None:
        return list(_WORKER_JUDGE.chunks(name, chunks))
    return [render(r) for r in _WORKER_JUDGE.chunks(name, chunks)]


def _parallel(judge: _Judge, sources: Iterable[Source], workers: int) -> Iterator[CheckResult | Rendered]:
    """:func:`check_sources` on ``workers`` processes. This process reads the files and splits them
    into documents (cheap, and it must: reading is where a source's errors and order come from);
    the workers parse and judge. Everything the serial loop decides without the engine (unreadable
    sources, bad UTF-8 lines, empty files) is decided here, in the same order."""
    from webhook import pool

    found = False
    jobs = _jobs(sources)
    for value in pool.ordered(
        jobs, workers, initializer=_init_worker, initargs=(judge,), min_size=2 * BATCH_DOCUMENTS,
        group=BATCH_DOCUMENTS,
    ):
        if isinstance(value, _Begin):
            found = False
        elif isinstance(value, _End):
            if not found:
                yield CheckResult(value.name, 0, Status.EMPTY, message="no documents (an empty file, or only comments)")
        else:
            for result in value:
                found = True
                yield result


def _batch_task(name: str, batch: list[tuple[int, str]], chars: int) -> Any:
    """A batch of one file's documents as a task; its size, by which the pool groups tasks of small
    files into one round trip, counts a big document as the documents its characters would hold, so
    that a group of big files stays as small as one batch."""
    from webhook.pool import Task

    return Task(_judge_batch, (name, batch), max(len(batch), chars * BATCH_DOCUMENTS // BATCH_CHARS))


def _jobs(sources: Iterable[Source]) -> Iterator[Any]:
    """The pool's jobs for :func:`_parallel`: ready results, markers and batches of documents."""
    from webhook.pool import Ready

    for source in sources:
        if source.error is not None:
            yield Ready([CheckResult(source.name, 0, Status.ERROR, message=source.error)])
            continue
        if source.empty is not None:
            yield Ready([CheckResult(source.name, 0, Status.EMPTY, message=source.empty)])
            continue
        if source.note is not None:
            yield Ready([CheckResult(source.name, 0, Status.SKIPPED, message=source.note, noted=True)])
            continue
        yield Ready(_Begin())
        batch: list[tuple[int, str]] = []
        size = 0
        bad: list[ReadError] = []
        try:
            for start, text in yamlpos.iter_block_chunks(source.blocks(bad)):
                end = start + text.count("\n")
                problem = next((e for e in bad if start <= e.line <= end), None)
                if problem is not None:  # as _readable: this document is an error, the others are judged
                    bad[:] = [e for e in bad if not start <= e.line <= end]
                    if batch:
                        yield _batch_task(source.name, batch, size)
                        batch, size = [], 0
                    yield Ready([CheckResult(source.name, problem.line, Status.ERROR, message=problem.message)])
                    continue
                batch.append((start, text))
                size += len(text)
                if len(batch) >= BATCH_DOCUMENTS or size >= BATCH_CHARS:
                    yield _batch_task(source.name, batch, size)
                    batch, size = [], 0
        except ReadError as exc:
            if batch:
                yield _batch_task(source.name, batch, size)
                batch = []
            yield Ready([CheckResult(source.name, exc.line, Status.ERROR, message=exc.message)])
        if batch:
            yield _batch_task(source.name, batch, size)
        yield Ready(_End(source.name))


@dataclass(slots=True)
class _Judge:
    policy: Policy
    namespaces: Namespaces
    explain: bool
    cluster: Cluster
    old: OldObjects | None = None
    requester: Requester | None = None
    today: date | None = None
    expand: bool = False  # --expand: also judge the pods each workload's controller will create
    render: Callable[[CheckResult], Rendered] | None = None  # a pool worker's results, as sent back

    def chunks(self, name: str, chunks: Iterable[tuple[int, str]]) -> Iterator[CheckResult]:
        for item in yamlpos.iter_chunk_documents(chunks, with_nodes=False):
            if isinstance(item, yamlpos.SyntaxProblem):
                yield CheckResult(
                    name, item.line, Status.ERROR, column=item.column, message=f"YAML syntax error: {item.problem}"
                )
                continue
            data = item.data
            if data is None:
                continue
            if isinstance(data, dict) and data.get("kind") == "List" and isinstance(data.get("items"), list):
                for index, element in enumerate(data["items"]):
                    yield self.object(name, item, element, ("items", index))
                continue
            yield self.object(name, item, data, ())

    def object(
        self, file: str, doc: yamlpos.Document, obj: Any, prefix: tuple[str | int, ...]
    ) -> CheckResult:
        try:
            return _check_object(
                self.policy,
                file,
                doc,
                obj,
                prefix,
                self.namespaces,
                self.explain,
                self.cluster,
                self.old,
                self.requester,
                self.today,
                expand=self.expand,
            )
        except Exception as exc:  # an engine bug must not hide the other documents
            line = doc.line
            with contextlib.suppress(Exception):  # else the document's own line will do
                line = doc.line if not prefix else _position(doc, prefix).line
            return CheckResult(
                file,
                line,
                Status.ENGINE_ERROR,
                obj=obj,
                text=doc.text,
                item_path=prefix,
                message=f"{engine_failure(exc)}; nothing was judged: please report it with this document",
            )


def _check_object(
    policy: Policy,
    file: str,
    doc: yamlpos.Document,
    obj: Any,
    prefix: tuple[str | int, ...],
    namespaces: Namespaces,
    explain: bool,
    cluster: Cluster = EMPTY_CLUSTER,
    old: OldObjects | None = None,
    requester: Requester | None = None,
    today: date | None = None,
    *,
    expand: bool = False,
) -> CheckResult:
    line = doc.line if not prefix else _position(doc, prefix).line
    why_not = not_a_manifest(obj) if isinstance(obj, dict) else None
    if why_not is None and isinstance(obj, dict) and obj.get("apiVersion") and obj.get("kind"):
        why_not = tool_document(obj)
    if why_not is not None:  # an AdmissionReview, a PolicyTest, CI configuration, ...: no advice about kinds
        return CheckResult(file, line, Status.SKIPPED, obj=obj, text=doc.text, item_path=prefix, message=why_not)
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
    refused = refused_by_apiserver(obj)
    if refused:  # the apiserver refuses it before any webhook: passing here would promise an admission
        path, _ = refused[0]
        return CheckResult(
            file,
            _position(doc, (*prefix, *path)).line,
            Status.INVALID,
            obj=obj,
            text=doc.text,
            item_path=prefix,
            message="the apiserver would refuse it: "
            + "; ".join(f"{'.'.join(where)}: {why}" for where, why in refused),
        )
    claim = is_claim_object(obj)  # judged on its own, when it has something to judge
    if classify(obj, policy) is None and not claim:
        if obj.get("kind") in CONTEXT_KINDS:
            message = f"{obj.get('kind')}: read as cluster context, not judged"
            return CheckResult(file, line, Status.SKIPPED, obj=obj, text=doc.text, item_path=prefix, message=message)
        found = gpu_or_intent(policy, obj, doc.text)
        result = CheckResult(
            file,
            line,
            Status.SKIPPED,
            obj=obj,
            text=doc.text,
            item_path=prefix,
            message=f"{obj.get('apiVersion')} {obj.get('kind')} carries no pod template the engine checks",
        )
        if found is not None:
            what, path = found
            result.attention = path
            result.message = (
                f"unknown kind: declare it in the policy's workloadKinds; {obj.get('apiVersion')} "
                f"{obj.get('kind')} carries {what} ({path}) and was not judged"
            )
            result.line = _position(doc, (*prefix, *parse_dotted(path))).line
        return result
    ns, labels = namespaces.for_object(obj)
    previous = old.take(obj) if old is not None else None
    request = Request(
        obj,
        operation="CREATE" if previous is None else "UPDATE",
        namespace=ns,
        namespace_labels=labels,
        old_object=previous,
        cluster=cluster,
        requester=requester,
        today=today,
    )
    decision = (explain_entry if explain else report)(policy, request)
    if not decision.relevant:
        result = CheckResult(
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
        if claim:
            result.message = f"{obj.get('kind')}: read as cluster context, not judged"
            return result
        lookalike = gpu_lookalike(policy, obj, doc.text)
        if lookalike is not None:  # not hidden: CI shows it on its own line with how to make it judged
            name, path = lookalike
            result.attention = path
            result.message = (
                f"{name} looks like a GPU but is not one this policy knows, so nothing was judged; add it to "
                "settings.gpuResourcePrefixes, or pass the DeviceClass that serves it (extendedResourceName) "
                "with --cluster-objects"
            )
            result.line = _position(doc, (*prefix, *parse_dotted(path))).line
        return result
    result = CheckResult(
        file, line, verdict(decision), obj=obj, decision=decision, text=doc.text, item_path=prefix, namespace=ns
    )
    if decision.violations:
        located = doc.ensure_nodes()
        for v in decision.violations:
            result.lines[v.path] = located.position((*prefix, *parse_dotted(v.path))).line
    if expand and decision.allowed:  # a denied workload creates no pods
        result.expanded = expand_pods(
            policy, decision.mutated or obj, namespace=ns, labels=labels, cluster=cluster, today=today
        )
        # the pods are what runs: a pod the webhook would deny (or warn about) fails CI like the workload would
        worst = [verdict(e.decision) for e in result.expanded]
        if Status.DENIED in worst:
            result.status = Status.DENIED
        elif Status.WARNED in worst and result.status is Status.ADMITTED:
            result.status = Status.WARNED
    return result


def engine_failure(exc: BaseException) -> str:
    """``the engine failed on this object (KeyError: 'x')``: an engine bug, named in one short line."""
    detail = str(exc).splitlines()[0][:200] if str(exc) else ""
    return f"the engine failed on this object ({type(exc).__name__}{': ' + detail if detail else ''})"


FAIL_ON = ("deny", "would-deny", "warn")
"""``check --fail-on``, strictest last: ``deny`` fails what the cluster denies (under an observe enforcement
mode, nothing: what passes CI is admitted); ``would-deny`` also what ``enforce`` would deny; ``warn`` also
every warning."""


def fails(v: Violation, fail_on: str) -> bool:
    """Whether one finding fails a ``check`` run under ``--fail-on``."""
    if v.action is Action.DENY:
        return True
    if v.would_deny:
        return fail_on != "deny"
    return v.action is Action.WARN and fail_on == "warn"


def verdict(decision: Decision, *, enforced: bool = False) -> Status:
    """Denied, warned or admitted: what ``check`` and ``audit`` report for a judged object. ``enforced``: as
    ``enforce`` would decide, a finding the policy's observe mode admitted counted as the denial it would be
    (``audit`` reports the rules' verdict and says the mode; ``check`` reports the cluster's)."""
    if not decision.allowed or (enforced and decision.would_deny):
        return Status.DENIED
    if any(v.action is Action.WARN for v in decision.violations):
        return Status.WARNED
    return Status.ADMITTED


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
    engine_errors: int = 0
    would_deny: int = 0  # admitted or warned only because the policy's enforcement mode observes
    empty: int = 0  # inputs that held no document (not counted in documents)
    unjudged_gpu: int = 0  # skipped documents that carry GPU resources or intent keys

    def as_dict(self) -> dict[str, int]:
        return {_camel(k): getattr(self, k) for k in self.__dataclass_fields__}  # type: ignore[attr-defined]


    def add(self, r: CheckResult | Rendered) -> None:
        if r.status is Status.EMPTY:
            self.empty += 1
            return
        self.documents += 1
        counter = _COUNTER[r.status]
        setattr(self, counter, getattr(self, counter) + 1)
        if r.attention:
            self.unjudged_gpu += 1
        if r.patched:
            self.mutated += 1
        if r.observed:
            self.would_deny += 1


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def summarize(results: Iterable[CheckResult]) -> Summary:
    summary = Summary()
    for r in results:
        summary.add(r)
    return summary


_COUNTER = {
    Status.ADMITTED: "admitted",
    Status.WARNED: "warned",
    Status.DENIED: "denied",
    Status.SKIPPED: "skipped",
    Status.INVALID: "invalid",
    Status.ERROR: "errors",
    Status.ENGINE_ERROR: "engine_errors",
}


def _dotted(path: tuple[str | int, ...]) -> str:
    out = ""
    for part in path:
        if isinstance(part, int) or any(c in part for c in "./[]"):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


def gpu_lookalike(policy: Policy, obj: dict[str, Any], text: str) -> tuple[str, str] | None:
    """(name, path) of the first extended resource whose name says GPU (``example.com/gpu``) in a
    document the engine found no GPU in: a device the policy does not know, which CI must not hide."""
    if "gpu" not in text.lower():
        return None
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(obj, ())]
    while stack:
        node, path = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("limits", "requests") and isinstance(value, dict):
                    for k, amount in value.items():
                        named = isinstance(k, str) and "/" in k and "gpu" in k.rsplit("/", 1)[1].lower()
                        if named and amount not in (0, "0"):
                            return k, _dotted((*path, key, k))
                elif isinstance(value, (dict, list)):
                    stack.append((value, (*path, key)))
        elif isinstance(node, list):
            stack.extend((v, (*path, i)) for i, v in enumerate(node) if isinstance(v, (dict, list)))
    return None


def gpu_or_intent(policy: Policy, obj: dict[str, Any], text: str) -> tuple[str, str] | None:
    """Where a document the engine does not judge carries GPU resources or intent keys, if anywhere.

    Such a document is a workload the policy does not know (a CRD), and passing it silently would
    let it reach GPUs unjudged. Only documents whose text names the intent prefix or a GPU resource
    prefix are walked, so Services and ConfigMaps cost a substring search.
    """
    intent = f"{policy.settings.prefix}/"
    markers = (intent, *policy.gpu_prefixes, "nvidia.com/", *policy.fraction_keys)
    if not any(m in text for m in markers):
        return None
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(obj, ())]
    while stack:
        node, path = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if not isinstance(key, str):
                    continue
                if key in ("labels", "annotations") and isinstance(value, dict):
                    for k in value:
                        if isinstance(k, str) and k.startswith(intent):
                            return "an intent key", _dotted((*path, key, k))
                        if key == "annotations" and k in policy.fraction_keys:
                            return "a GPU-fraction annotation", _dotted((*path, key, k))
                elif key in ("limits", "requests") and isinstance(value, dict):
                    for k in value:
                        if isinstance(k, str) and (
                            policy.is_gpu_resource(k) or k.startswith(("nvidia.com/gpu", "nvidia.com/mig-"))
                        ):
                            return "a GPU resource", _dotted((*path, key, k))
                if isinstance(value, (dict, list)):
                    stack.append((value, (*path, key)))
        elif isinstance(node, list):
            for index, value in enumerate(node):
                if isinstance(value, (dict, list)):
                    stack.append((value, (*path, index)))
    return None

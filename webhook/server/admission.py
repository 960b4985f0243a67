"""One AdmissionReview in, one response out: the only place the server talks to the engine.

``/mutate`` answers with the patch only (always allowed): the apiserver calls ``/validate`` on the
final object, after every mutating webhook (ours, Kueue's, Volcano's) has run, so warnings and
denials computed at mutation time would judge an object that does not exist yet.

An exception from the engine is a bug, not the user's fault. It never becomes a 500 (the apiserver
would apply ``failurePolicy`` with an opaque ``failed calling webhook`` message) nor a dead worker.
``/validate`` denies it (rule ``engine-error``, never off): it is the last word on what gets stored,
and admitting an object it did not judge would let one character that trips a bug carry a privileged,
non-entitled pod past every rule. ``/mutate`` follows the policy's ``settings.failure``: ``allow``
admits unchanged (the object then meets ``/validate``), ``deny`` rejects. Both name the problem and
the uid to find in the log.

Under an observe enforcement mode (``settings.enforcement: warn|audit``) nothing the webhook answers
denies: a platform team turns it on to learn what enforce would refuse, and must be able to trust that it
never blocks their cluster. An engine error is then admitted on the record, like every finding a rule
would deny: an audit annotation (and, under ``warn``, an admission warning) marked "would deny", the
error log line with the uid, ``gpu_admission_engine_errors_total{failure="allow"}`` and
``gpu_admission_would_deny_total{rule="engine-error"}``. Nothing is enforced in those modes, so an
object the engine could not judge gains nothing an attacker could not have had by asking plainly; what
it must not do is pass unrecorded. A review admitted only because of the mode is counted with
``decision="warned"`` or ``decision="audited"``.

A review's namespace labels come from the namespace source. In cluster mode a namespace the watch
cache does not know is first judged unknown (``Cluster.unknown_namespaces``), without I/O: most
objects are none of the webhook's business and are answered at once. Only when the engine says
the object needs the namespace (``Decision.namespace_unknown``) is it looked up with one GET and
judged again; if it stays unknown, ``/mutate`` leaves the object unmutated and ``/validate`` denies
it (``class-not-allowed``, "namespace unknown, retry") instead of judging it by the catch-all
entitlement an unlabelled namespace would get. So forged reviews of plain pods in random
namespaces cost no GET, and those of GPU pods only what the source's caps allow.

Dry-run reviews (``kubectl apply --dry-run=server``) get the same decision; the webhook has no side
effects to skip beyond metrics, where they are counted with ``dry_run="true"`` in
``gpu_admission_requests_total`` and left out of ``gpu_admission_rule_violations_total``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from webhook.actions import ENGINE_ERROR, Enforcement
from webhook.engine import DeadlineExceeded, Decision, Request, Stage, mutate, validate
from webhook.engine.model.cluster import EMPTY_CLUSTER, Cluster
from webhook.engine.model.decision import WOULD_DENY, short_warning
from webhook.engine.model.grants import GrantKeys
from webhook.engine.scale import SCALE_SUBRESOURCE
from webhook.policy.model import Settings
from webhook.server import metrics
from webhook.server.logs import log_decision, server_log
from webhook.server.namespaces import NamespaceSource, NamespaceUnknown
from webhook.server.reload import PolicyStore
from webhook.server.review import Review, allow, deny, parse_review
from webhook.server.scale import ParentReader, ParentUnavailable, parent_update

ENGINE_ERROR_RULE = ENGINE_ERROR
LARGE_BODY = 256 * 1024
"""Reviews larger than this are handled one at a time per worker (see ``Admitter.handle``)."""
"""Not in the engine's rule registry: no check finds it, the server gives it when the engine raises."""

Entry = Callable[[Any, Request], Decision]
"""An engine entry: the policy and the request in, the decision out."""

ENTRIES: Mapping[str, Entry] = MappingProxyType({"mutate": mutate, "validate": validate})
"""The engine's entry behind each endpoint: ``/mutate`` asks for the patch, ``/validate`` for the verdict."""


class Admitter:
    """Turns request bodies into response documents; holds no per-request state."""

    def __init__(
        self,
        store: PolicyStore,
        namespaces: NamespaceSource,
        entries: Mapping[str, Entry] = ENTRIES,
        engine_deadline: float | None = None,
        cluster: Callable[[], Cluster] | None = None,
        parents: ParentReader | None = None,
        grant_keys: GrantKeys | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ):
        self.store = store
        # HMAC keys of exception grants (``serve --grant-key``): without them pods a controller creates
        # never carry an exception (docs/policy.md "Exceptions"); the clock gives exceptions their date
        self.grant_keys = grant_keys
        self.clock = clock
        self.namespaces = namespaces
        # reads the object a `<resource>/scale` review scales (webhook.server.scale); None: offline
        self.parents = parents
        # what the watches know beyond namespaces (DRA claim templates, claims, device classes)
        self.cluster = cluster or (lambda: EMPTY_CLUSTER)
        self.entries = entries  # injectable so tests can make the engine fail on purpose
        # seconds the engine may take per review, below the webhook's timeoutSeconds: past it the
        # engine stops (DeadlineExceeded) and the answer is an engine error like any other
        self.engine_deadline = engine_deadline
        self._large = threading.BoundedSemaphore(1)  # one big review parsed and judged at a time

    def handle(self, endpoint: str, body: bytes) -> dict[str, Any]:
        """The AdmissionReview response for one POST to ``/mutate`` or ``/validate``; raises ReviewError.

        A big body (over ``LARGE_BODY``) waits for the worker's other big review to finish: parsed,
        a 3 MiB review can take tens of MiB of Python objects, and eight threads doing that at once
        would take a worker towards the pod's memory limit. Real reviews are a few KiB."""
        if len(body) <= LARGE_BODY:
            return self._handle(endpoint, body)
        with self._large:
            return self._handle(endpoint, body)

    def _handle(self, endpoint: str, body: bytes) -> dict[str, Any]:
        started = time.perf_counter()
        review = parse_review(body)  # ReviewError -> the app answers 4xx
        policy = self.store.policy  # read once: this request sees one policy even if a reload swaps it
        if review.operation in ("DELETE", "CONNECT") or (
            endpoint == "mutate"
            and review.operation != "CREATE"
            and not (review.operation == "UPDATE" and self.grant_keys is not None and policy.spec.exceptions)
        ):
            # nothing to decide: the engine mutates only on CREATE (and, for exception grants, on the
            # UPDATE of a controller's template) and validates only CREATE/UPDATE
            doc = allow(review)
            self._account(endpoint, review, started, "ignored", review.obj or review.old_object, extra={})
            return doc
        policy = self.store.policy  # read once: this request sees one policy even if a reload swaps it
        obj, old_object = review.obj, review.old_object
        if review.sub_resource == SCALE_SUBRESOURCE and endpoint == "validate":
            try:
                found = parent_update(policy, review.resource, review.namespace, review.name, obj, self.parents)
            except ParentUnavailable as exc:
                extra = {"error": "scale parent unavailable", "rules": [ENGINE_ERROR_RULE], "policy": policy.digest}
                mode = policy.settings.enforcement
                if mode is Enforcement.ENFORCE:
                    doc = deny(review, _unjudged_scale(review, exc.reason))
                    self._account(endpoint, review, started, "denied", obj, {"allowed": False, **extra})
                    return doc
                if not review.dry_run:
                    metrics.WOULD_DENY.labels(ENGINE_ERROR_RULE, mode.value, metrics.kind_label(obj)).inc()
                doc = _admitted_on_record(review, _unjudged_scale(review, exc.reason, observed=True), mode)
                self._account(endpoint, review, started, _OBSERVED[mode], obj, {"allowed": True, **extra})
                return doc
            if found is not None:  # judged as the UPDATE of the object it scales
                obj, old_object = found
        try:
            cluster = self.cluster()
            # one deadline for the review, even when it is judged twice (after a namespace lookup)
            deadline = None if self.engine_deadline is None else time.monotonic() + self.engine_deadline
            labels = self.namespaces.labels(review.namespace) if review.namespace else None
            missing = labels is None and bool(review.namespace) and self.namespaces.speaks_for_cluster
            judged = (obj, old_object)
            decision = self._evaluate(
                policy, review, judged, endpoint, labels,
                _unknown(cluster, review.namespace) if missing else cluster, deadline,
            )
            if missing and decision.namespace_unknown:
                # the object needs the namespace's labels and the cache lacks them: one GET (capped,
                # a recent 404 remembered); objects that are none of the webhook's business never get here
                try:
                    labels = self.namespaces.lookup(review.namespace)
                except NamespaceUnknown:  # logged and counted by the source; the engine denies (never the catch-all)
                    pass
                else:
                    decision = self._evaluate(policy, review, judged, endpoint, labels, cluster, deadline)
            doc, outcome, extra = self._respond(endpoint, review, decision)
        except Exception as exc:
            doc, outcome, extra = self._engine_failed(endpoint, review, policy.settings, exc)
        extra["policy"] = policy.digest
        self._account(endpoint, review, started, outcome, obj, extra)
        return doc

    def _evaluate(
        self,
        policy: Any,
        review: Review,
        judged: tuple[Any, Any],
        endpoint: str,
        labels: dict[str, str] | None,
        cluster: Cluster,
        deadline: float | None,
    ) -> Decision:
        """``judged``: the object and old object to judge (a scale's are those of the object it scales)."""
        obj, old_object = judged
        request = Request(
            obj,
            operation=review.operation,
            namespace=review.namespace,
            namespace_labels=labels,
            old_object=old_object,
            # /validate sees the object the apiserver will store, after every mutating webhook
            stage=Stage.STORED if endpoint == "validate" else Stage.MANIFEST,
            cluster=cluster,
            deadline=deadline,
            requester=review.requester,
            today=self.clock().date() if policy.spec.exceptions else None,  # the day, only if it matters
            grant_keys=self.grant_keys,
        )
        return self.entries[endpoint](policy, request)

    def _respond(self, endpoint: str, review: Review, decision: Decision) -> tuple[dict[str, Any], str, dict[str, Any]]:
        if endpoint == "mutate":
            patch = decision.patch
            outcome = "patched" if patch else ("allowed" if decision.relevant else "ignored")
            extra = _about(decision, True)
            extra["patch_ops"] = len(patch)
            return allow(review, patch=patch), outcome, extra
        violations = decision.violations
        if not violations:  # the usual answer: nothing to warn, audit or deny
            extra = _about(decision, True)
            extra["rules"], extra["warnings"] = [], 0
            return allow(review), "allowed" if decision.relevant else "ignored", extra
        warnings = decision.warnings
        audit = decision.audit_annotations
        allowed = decision.allowed
        observed = decision.would_deny
        if allowed:
            doc = allow(review, warnings=warnings, audit=audit)
            # admitted only because the policy observes: what enforce would have denied, counted as such
            outcome = _OBSERVED[observed[0].action] if observed else "allowed" if decision.relevant else "ignored"
        else:
            doc = deny(review, decision.message, warnings=warnings, audit=audit)
            outcome = "denied"
        extra = _about(decision, allowed)
        extra["rules"], extra["warnings"] = [v.rule for v in violations], len(warnings)
        if not review.dry_run:
            kind = metrics.kind_label(review.obj)
            for v in violations:
                metrics.VIOLATIONS.labels(v.rule, v.action.value, kind).inc()
                if v.exception is not None:
                    metrics.EXCEPTION_USES.labels(v.exception, v.rule, kind).inc()
                if v.would_deny:
                    metrics.WOULD_DENY.labels(v.rule, v.action.value, kind).inc()
        used = decision.exceptions
        if used:
            extra["exceptions"] = {name: list(rules) for name, rules in used.items()}
        return doc, outcome, extra

    def _engine_failed(
        self, endpoint: str, review: Review, settings: Settings, exc: Exception
    ) -> tuple[dict[str, Any], str, dict[str, Any]]:
        what = type(exc).__name__
        if isinstance(exc, DeadlineExceeded):
            what = f"no decision within {self.engine_deadline:g}s, at {exc.stage}"
        mode = settings.enforcement
        if mode is not Enforcement.ENFORCE:
            applied = "allow"  # an observe mode never blocks: admitted on the record (the module's docstring)
            log = f"engine error; admitted on the record (settings.enforcement {mode})"
        elif endpoint == "mutate":
            applied, log = settings.failure, "engine error; applying settings.failure"
        else:
            applied, log = "deny", "engine error; denied"  # /validate never admits what it did not judge
        server_log.error(
            log,
            exc_info=exc,
            extra={"fields": {"uid": review.uid, "endpoint": endpoint, "failure": applied, "error": what}},
        )
        metrics.ENGINE_ERRORS.labels(endpoint, applied).inc()
        extra: dict[str, Any] = {"error": what, "failure": applied, "rules": [ENGINE_ERROR_RULE]}
        if applied == "allow" and endpoint == "validate":  # observe mode: enforce would have denied it
            extra["allowed"] = True
            message = (
                f"[{ENGINE_ERROR_RULE}] gpu-admission could not evaluate this object ({what}); look up uid "
                f"{review.uid} in the webhook log"
            )
            if not review.dry_run:
                metrics.WOULD_DENY.labels(ENGINE_ERROR_RULE, mode.value, metrics.kind_label(review.obj)).inc()
            return _admitted_on_record(review, message, mode), "error", extra
        if applied == "allow":  # /mutate: the object still meets /validate
            extra["allowed"] = True
            return allow(review), "error", extra
        why = (
            "and the policy's settings.failure is deny"
            if endpoint == "mutate"
            else "and an object that was not judged is never admitted"
        )
        message = (
            f"[{ENGINE_ERROR_RULE}] gpu-admission could not evaluate this object ({what}) {why}; retry, or ask "
            f"the platform team to look up uid {review.uid} in the webhook log"
        )
        extra["allowed"] = False
        return deny(review, message), "error", extra

    def _account(
        self,
        endpoint: str,
        review: Review,
        started: float,
        outcome: str,
        obj: Any,
        extra: dict[str, Any],
    ) -> None:
        elapsed = time.perf_counter() - started
        metrics.TALLY.record(endpoint, outcome, metrics.kind_label(obj), review.dry_run, elapsed)
        if "kind" not in extra:  # no decision names the object (ignored operation, engine error)
            meta = obj.get("metadata") if isinstance(obj, dict) else None
            meta = meta if isinstance(meta, dict) else {}
            extra = {
                "kind": obj.get("kind") if isinstance(obj, dict) else None,
                "name": meta.get("name") or meta.get("generateName"),
                "allowed": True,
                **extra,
            }
        log_decision(
            {
                "endpoint": endpoint,
                "uid": review.uid,
                "operation": review.operation,
                "namespace": review.namespace,
                "decision": outcome,
                "dry_run": review.dry_run,
                "latency_ms": round(elapsed * 1000, 3),
                **extra,
            }
        )


_OBSERVED: Mapping[str, str] = MappingProxyType({"warn": "warned", "audit": "audited"})
"""The ``decision`` of a review admitted only because the policy's enforcement mode observes, by the mode
(or by a would-deny finding's action, which is the mode's: both are ``warn`` or ``audit``)."""


def _admitted_on_record(review: Review, message: str, mode: Enforcement) -> dict[str, Any]:
    """An unjudged object under an observe mode: admitted, with the denial enforce would have given as an
    audit annotation (and, under ``warn``, a warning), marked as the engine marks its would-deny findings."""
    warnings = (short_warning(f"{ENGINE_ERROR_RULE}, {WOULD_DENY}", message),) if mode is Enforcement.WARN else ()
    return allow(review, warnings=warnings, audit={ENGINE_ERROR_RULE: f"{message} [{WOULD_DENY}]"})


def _unjudged_scale(review: Review, reason: str, *, observed: bool = False) -> str:
    """Why a scale was not judged; ``observed``: admitted on the record by an observe enforcement mode."""
    group, _, resource = review.resource or ("", "", "the object")
    what = f"{resource}.{group}" if group else resource
    then = "" if observed else ", and a scale it did not judge is never admitted; retry"
    return (
        f"[{ENGINE_ERROR_RULE}] gpu-admission could not read {what} {review.namespace}/{review.name}, whose "
        f"size this scale changes ({reason}){then}"
    )


def _unknown(cluster: Cluster, namespace: str) -> Cluster:
    return replace(cluster, unknown_namespaces=cluster.unknown_namespaces | {namespace})


def _about(decision: Decision, allowed: bool) -> dict[str, Any]:
    """The decision line's fields that every answer from the engine carries, in the line's order."""
    return {"kind": decision.kind, "name": decision.name, "relevant": decision.relevant, "allowed": allowed}

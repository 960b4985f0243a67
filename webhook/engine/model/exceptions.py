"""Exceptions (SPEC §14): which findings of one evaluation a policy exception covers, and the grants that
carry an exception from a controller object to the pods its controller creates. Pure: the requester,
the date and the signing keys are inputs; nothing here reads a clock, a file or the network.

The chain (docs/policy.md "Exceptions"):

1. **At the object the person or pipeline sends** (a Pod, a Deployment, a Job, any kind of the kind
   table) the requester (``userInfo``) is matched against the exception's subjects. That is the only
   place a subject is ever checked.
2. **At that object's ``/mutate``** (CREATE and UPDATE) the webhook writes a *grant* into each pod
   template: ``<prefix>/exception-grant``, a token signed with HMAC-SHA256 under a key only the
   webhook holds, binding the exception, the subject it was issued to, the namespace, the object's
   API group, kind and name, and a digest of the template's content.
3. **At an object a controller creates from that template** (a ReplicaSet, a Job of a CronJob, the
   pods) the requester is the controller (``settings.controllers``), and the grant is honoured only
   when its signature verifies, its namespace is the object's, the object is of a kind the granted
   object's controller creates and its controlling owner is the granted object (or, for a pod, one level
   down, a child of the kind the granted object creates, named ``<name>-<hash>``), and what it runs is
   what the grant was issued for (each container the template names, with its image, privileged bits,
   devices and toolkit variables; the pod's host paths and namespaces: ``pod_content.grant_content``).
   On the granted object itself a grant holds, whoever sends it, while the template still has the
   granted digest.
4. **A pod UPDATE that changes what the pod runs** (an image, an ephemeral container) is judged as if no
   grant were carried: the grant does not hold for the new pod, and a finding the old pod had only
   through its grant is not the old pod's to keep (:func:`granted_rules`).

A tenant cannot forge it: it has no key, so it cannot write a grant; a grant it copies names another
object (its own objects' names differ, and names are unique per namespace and kind), or a template it
has changed (digest), or a pod whose content it swapped; a pod it creates itself is judged by *its*
identity, never by a grant, whatever service account or owner reference the pod names. The uid is left
out on purpose: the mutating webhook sees a CREATE before the apiserver assigns one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from webhook.engine.model.grants import (
    COPIED_VERBATIM,
    GRANT_NAME,
    Grant,
    GrantKeys,
    api_group,
    grant_annotation,
    issue,
    owner_problem,
    read_grants,
    template_digest,
)
from webhook.engine.model.pod_content import grant_content, runs_granted
from webhook.engine.model.requester import Requester
from webhook.policy.compiled import Policy
from webhook.policy.model import PolicyException

__all__ = [
    "GRANT_NAME", "Grant", "GrantKeys", "Holding", "ObjectView", "Requester", "api_group", "grant_annotation",
    "grant_values", "granted_rules", "holding",
]  # fmt: skip


@dataclass(frozen=True, slots=True)
class Holding:
    """What one evaluation may use: the exception covering each rule id, why an exception that would have
    covered a rule did not (appended to that finding's message), and trace lines for ``--explain``."""

    by_rule: dict[str, str] = field(default_factory=dict)  # rule id -> exception name
    notes: dict[str, str] = field(default_factory=dict)  # rule id -> why an exception for it did not apply
    trace: tuple[str, ...] = ()
    carried: tuple[Grant, ...] = ()
    """The grants honoured because a controller carried them here: what an audit, which has no requester
    to check, must verify against the owners it read (an owner reference is the object's own word)."""


NONE = Holding()


def _scope(exc: PolicyException, kind: str, name: str) -> bool:
    return (not exc.kinds or kind in exc.kinds) and (not exc.names or name in exc.names)


def _subject_ref(exc: PolicyException, requester: Requester) -> str | None:
    for subject in exc.subjects:
        if subject.matches(requester.username, requester.groups):
            return subject.ref
    return None


@dataclass(frozen=True, slots=True)
class ObjectView:
    """The facts of the object exceptions need: identity, and its pod templates as (path, node) pairs."""

    kind: str
    name: str
    namespace: str
    meta: Mapping[str, Any]
    templates: tuple[tuple[tuple[str | int, ...], Mapping[str, Any]], ...]
    is_pod: bool
    group: str = ""  # the API group of its apiVersion ("" for the core group)
    runs: tuple[Mapping[str, Any], ...] = ()  # per template: what its pods will run (after our mutation)
    content_changed: bool = False  # a pod UPDATE that changes what the pod runs (old vs new content digest)

    def run(self, index: int) -> Mapping[str, Any]:
        return self.runs[index] if index < len(self.runs) else {}


def applicable(policy: Policy, labels: dict[str, str], today: date | None) -> tuple[PolicyException, ...]:
    """Exceptions in force today for a namespace with these labels (none without a date: fail closed)."""
    if today is None or not policy.spec.exceptions:
        return ()
    return tuple(e for e in policy.spec.exceptions if e.active(today) and e.namespaces.matches(labels))


def direct(candidates: Iterable[PolicyException], view: ObjectView, requester: Requester | None) -> dict[str, str]:
    """Exceptions the requester itself holds for this object: name -> the subject it matched."""
    if requester is None:
        return {}
    out: dict[str, str] = {}
    for exc in candidates:
        if _scope(exc, view.kind, view.name):
            ref = _subject_ref(exc, requester)
            if ref is not None:
                out[exc.name] = ref
    return out


def bound_here(grant: Grant, view: ObjectView, digest: str) -> bool:
    """The grant was issued for this very object and template content."""
    return (grant.namespace, grant.group, grant.kind, grant.name, grant.digest) == (
        view.namespace, view.group, view.kind, view.name, digest,
    )  # fmt: skip


def carried(grant: Grant, view: ObjectView, runs: Mapping[str, Any]) -> bool:
    """The grant reached this object the way a controller copies a template (:func:`not_carried`)."""
    return not_carried(grant, view, runs) is None


def not_carried(grant: Grant, view: ObjectView, runs: Mapping[str, Any]) -> str | None:
    """Why the grant did not reach this object the way a controller copies a template, or None: same
    namespace, the object of a kind the granted object's controller creates, under the granted object (or
    its child), and running what the grant was issued for (``runs``: this template, or the pod, as it will
    run; :func:`runs_granted`. A v1 grant has no content to compare, and holds as before on what a
    controller creates, but never across a pod UPDATE that changes what the pod runs)."""
    if grant.namespace != view.namespace:
        return f"it was issued in namespace {grant.namespace}"
    if view.content_changed:
        return "this UPDATE changes what the pod runs; re-create the pod from its owner instead"
    problem = owner_problem(view.meta, grant, ("", "Pod") if view.is_pod else (view.group, view.kind))
    if problem is not None:
        return problem
    if grant.content and not runs_granted(runs, grant.content):
        return f"it does not run what the grant was issued for ({grant.kind}/{grant.name}'s pod template)"
    return None


def holding(
    policy: Policy,
    view: ObjectView,
    labels: dict[str, str],
    *,
    requester: Requester | None,
    today: date | None,
    keys: GrantKeys | None,
    judged_as_stored: bool,
) -> Holding:
    """Which rules an exception covers for this object, by the requester or by grants it carries."""
    candidates = applicable(policy, labels, today)
    if not candidates:
        return NONE
    by_name = {e.name: e for e in candidates}
    annotation = grant_annotation(policy)
    trace: list[str] = []
    held: dict[str, str] = {}
    notes: dict[str, str] = {}
    mine = direct(candidates, view, requester)
    needs_grant = keys is not None and judged_as_stored and not view.is_pod and bool(view.name)
    trusted = requester is not None and requester.username in policy.settings.controllers
    granted, refused = _granted(policy, view, keys, by_name, trusted, annotation) if keys is not None else ({}, {})
    for name, why in sorted(refused.items()):
        if name in granted or name in mine:
            continue
        trace.append(f"exception {name}: grant not honoured: {why}")
        for rule_id in by_name[name].rules:
            notes.setdefault(rule_id, f"grant of exception {name} not honoured: {why}")
    for name, ref in mine.items():
        if needs_grant and view.templates and granted.get(name) != "bound":
            # its controller would create pods without the grant, and they would be denied one by one
            why = (
                "an object named by generateName cannot carry it (its name is unknown at /mutate): give it a name"
                if view.meta.get("generateName")
                else "the mutating webhook did not run on this request, or a later one changed the template: re-apply"
            )
            for rule_id in by_name[name].rules:
                notes.setdefault(
                    rule_id, f"exception {name} holds for {ref} but the pod template lacks its grant; {why}"
                )
            trace.append(f"exception {name}: requester {ref} matches, but no grant on the template: not applied")
            continue
        trace.append(f"exception {name}: requester {ref} matches")
        for rule_id in by_name[name].rules:
            held.setdefault(rule_id, name)
    for name, how in sorted(granted.items()):
        if name in mine:
            continue
        trace.append(
            f"exception {name}: grant bound to {view.kind}/{view.name} and its template verified"
            if how == "bound"
            else f"exception {name}: grant carried from the owner by controller {requester.username}"  # type: ignore[union-attr]
        )
        for rule_id in by_name[name].rules:
            held.setdefault(rule_id, name)
    carried_grants: list[Grant] = []
    for name, how in sorted(granted.items()):
        if how == "carried" and name not in mine:
            carried_grants.extend(_carried_grants(view, keys, name, annotation))
    return Holding(held, notes, tuple(trace), tuple(carried_grants))


def _carried_grants(view: ObjectView, keys: GrantKeys | None, name: str, annotation: str) -> tuple[Grant, ...]:
    """The grants of exception ``name`` the object's templates carry (one per template, deduplicated)."""
    if keys is None:
        return ()
    out: list[Grant] = []
    for _, node in view.templates:
        for g in read_grants(keys, _annotations(node).get(annotation))[0]:
            if g.exception == name and g not in out:
                out.append(g)
    return tuple(out)


def granted_rules(
    policy: Policy, old: Mapping[str, Any], labels: dict[str, str], *, today: date | None, keys: GrantKeys | None
) -> frozenset[str]:
    """The rules grants on a stored pod (``old``) cover: findings its UPDATE may not keep as "already true of
    the old pod" once the UPDATE changes what the pod runs (the old pod had them only through its grant)."""
    if keys is None:
        return frozenset()
    by_name = {e.name: e for e in applicable(policy, labels, today)}
    grants, _ = read_grants(keys, _annotations(old).get(grant_annotation(policy)))
    return frozenset(rule for g in grants if g.exception in by_name for rule in by_name[g.exception].rules)


def _granted(
    policy: Policy,
    view: ObjectView,
    keys: GrantKeys,
    by_name: dict[str, PolicyException],
    trusted: bool,
    annotation: str,
) -> tuple[dict[str, str], dict[str, str]]:
    """Exceptions every pod template of the object holds a good grant for: name -> ``bound`` (issued for
    this very object and template content; honoured whoever sends it, since only a subject's request
    can have produced it) or ``carried`` (copied by a trusted controller from the granted owner); and, for a
    controller's request or a pod UPDATE that changes what it runs, why a grant that verifies was not
    honoured (name -> why: the finding says so)."""
    if not view.templates:
        return {}, {}
    per_template: list[dict[str, str]] = []
    refused: dict[str, str] = {}
    for index, (_, node) in enumerate(view.templates):
        grants, _bad = read_grants(keys, _annotations(node).get(annotation))
        digest = None if view.is_pod or not grants else template_digest(node, annotation)
        found: dict[str, str] = {}
        for g in grants:
            exc = by_name.get(g.exception)
            if exc is None or not _scope(exc, g.kind, g.name):
                continue
            if not any(s.ref == g.by for s in exc.subjects):  # the subject was removed: revoked
                continue
            if digest is not None and bound_here(g, view, digest):
                found[g.exception] = "bound"
                continue
            why = not_carried(g, view, view.run(index)) if trusted or view.content_changed else None
            if trusted and why is None:
                found.setdefault(g.exception, "carried")
            elif why is not None:
                refused.setdefault(g.exception, why)
        per_template.append(found)
    common = set.intersection(*(set(f) for f in per_template))
    found_all = {name: ("bound" if all(f[name] == "bound" for f in per_template) else "carried") for name in common}
    return found_all, refused


def _annotations(node: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = node.get("metadata")
    values = meta.get("annotations") if isinstance(meta, dict) else None
    return values if isinstance(values, dict) else {}


def grant_values(
    policy: Policy,
    view: ObjectView,
    labels: dict[str, str],
    *,
    requester: Requester | None,
    today: date | None,
    keys: GrantKeys,
) -> list[tuple[tuple[str | int, ...], str | None]]:
    """At ``/mutate``: per template path, the grant annotation it must carry (None: none at all).

    Issued for the requester's own exceptions; otherwise a grant the template already carries is kept
    only where it still holds (a child object a controller creates, an UPDATE that leaves the template
    alone) and removed everywhere else, so a copied or stale grant is never stored."""
    annotation = grant_annotation(policy)
    candidates = applicable(policy, labels, today)
    mine = direct(candidates, view, requester) if view.name else {}
    trusted = requester is not None and requester.username in policy.settings.controllers
    out: list[tuple[tuple[str | int, ...], str | None]] = []
    for index, (path, node) in enumerate(view.templates):
        digest = template_digest(node, annotation)
        runs = view.run(index)
        content = grant_content(runs, verbatim=(view.group, view.kind) in COPIED_VERBATIM) if runs else ""
        tokens: list[str] = []
        for name, ref in sorted(mine.items()):
            grant = Grant(name, ref, view.namespace, view.group, view.kind, view.name, digest, content)
            tokens.append(issue(keys, grant))
        existing = _annotations(node).get(annotation)
        if existing is not None and not mine:
            grants, _ = read_grants(keys, existing)
            keep = [g for g in grants if bound_here(g, view, digest) or (trusted and carried(g, view, runs))]
            tokens = [issue(keys, g) for g in keep]
        out.append((path, " ".join(tokens) if tokens else None))
    return out

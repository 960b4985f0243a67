"""The admission path as the API server runs it, around the real engine and the rendered configurations.

For every object created: the mutating webhook is called when its ``rules`` and ``matchConditions``
(evaluated with cel-python, ``tests/deploy/cel_match.py``) say so, and its JSON patch is applied with
``jsonpatch`` (``failurePolicy: Ignore``: an engine error leaves the object unmutated); then the
validating webhook judges the stored object (``validate`` of a ``Stage.STORED`` request) when its own rules
and conditions match (``failurePolicy: Fail``: a condition that errors rejects). An object neither
webhook is asked about is stored as written. Controllers' pods go through the same path.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import jsonpatch

from tests.deploy.cel_match import CALL, REJECT, Webhook, resource_of
from tests.oracle.controllers import pods_of
from tests.oracle.workloads import Scenario
from webhook.engine import Request, Stage, mutate, report
from webhook.engine.model.cluster import Cluster
from webhook.policy.compiled import Policy
from webhook.render.core import render


@dataclass
class Hooks:
    mutating: Webhook
    validating: Webhook

    @classmethod
    def of(cls, policy: Policy) -> Hooks:
        docs = render(policy)
        (mut,) = next(d for d in docs if d["kind"] == "MutatingWebhookConfiguration")["webhooks"]
        (val,) = next(d for d in docs if d["kind"] == "ValidatingWebhookConfiguration")["webhooks"]
        return cls(Webhook(mut), Webhook(val))


@dataclass
class Admitted:
    obj: dict[str, Any]  # as stored
    judged: bool  # /validate was asked (False: the configurations let it through unjudged)
    updated: bool = False  # the user's UPDATE of a stored pod


def _called(hook: Webhook, obj: dict[str, Any], operation: str = "CREATE", old: dict | None = None) -> str:
    group, _version, resource = resource_of(obj) or ("", "", "")
    if not hook.matches_rules(group, resource, operation):
        return "skip"
    return hook.decide(obj, operation=operation, old=old)


def _context(scenario: Scenario) -> dict[str, Any]:
    kw: dict[str, Any] = {"namespace": scenario.namespace, "namespace_labels": scenario.namespace_labels}
    if scenario.known is not None:
        kw["cluster"] = Cluster(nodes=tuple(n.as_k8s() for n in scenario.nodes if n.name in scenario.known))
    return kw


def admit(policy: Policy, hooks: Hooks, obj: dict[str, Any], scenario: Scenario) -> Admitted | None:
    """The stored object, or None when admission refuses it."""
    kw = _context(scenario)
    obj = copy.deepcopy(obj)
    obj["metadata"]["namespace"] = scenario.namespace
    # The CEL of matchConditions is evaluated only where its answer changes the outcome (cel-python is
    # slow): for the mutating webhook when our patch is not empty, for the validating one when the
    # engine denies (a skipped call admits unjudged; a rejected one denies like the engine).
    stored = obj
    try:
        m = mutate(policy, Request(obj, **kw))
    except Exception:  # failurePolicy Ignore: stored unmutated
        m = None
    if m is not None and m.patch:
        called = _called(hooks.mutating, obj)
        if called == REJECT:
            return None
        if called == CALL:
            stored = jsonpatch.apply_patch(obj, list(m.patch))
    decision = report(
        policy, Request(stored, stage=Stage.STORED, **kw)
    )  # an exception here fails the test: never hidden
    if decision.allowed:
        return Admitted(stored, judged=True)
    called = _called(hooks.validating, stored)
    if called in (CALL, REJECT):
        return None
    return Admitted(stored, judged=False)


def update(policy: Policy, hooks: Hooks, old: dict[str, Any], scenario: Scenario) -> Admitted | None:
    """The user's UPDATE of a stored pod, as the API server lets it change a pod (``ValidatePodUpdate``:
    tolerations may only be added; labels and annotations change freely): the updated pod as stored, or
    None when refused. The validating webhook judges it as stored, against the old object."""
    new = copy.deepcopy(old)
    meta = new["metadata"]
    labels = dict(meta.get("labels") or {})
    for key, value in scenario.relabel.items():
        if value is None:
            labels.pop(key, None)
        else:
            labels[key] = value
    meta["labels"] = labels
    if scenario.add_tolerations:
        new["spec"]["tolerations"] = [*(new["spec"].get("tolerations") or []), *scenario.add_tolerations]
    if new == old:
        return None
    decision = report(policy, Request(new, operation="UPDATE", old_object=old, **_context(scenario)))
    if decision.allowed:
        return Admitted(new, judged=True, updated=True)
    if _called(hooks.validating, new, "UPDATE", old) in (CALL, REJECT):
        return None
    return Admitted(new, judged=False, updated=True)


def admitted_pods(policy: Policy, hooks: Hooks, scenario: Scenario) -> list[Admitted]:
    """The pods that end up stored: the object's own admission, then each pod its controller creates,
    and each of those as the user's UPDATE leaves it when admitted."""
    top = admit(policy, hooks, scenario.obj, scenario)
    if top is None:
        return []
    out = []
    for pod in pods_of(top.obj, scenario.nodes):
        pod.setdefault("metadata", {})
        got = admit(policy, hooks, pod, scenario)
        if got is not None:
            out.append(got)
            updated = update(policy, hooks, got.obj, scenario)
            if updated is not None:
                out.append(updated)
    return out

"""``check --expand``: the pods a controller will create from a workload, each judged as the webhook judges it.

A Deployment, a Job or a Volcano Job is admitted on its own, but the GPUs, the pool and the gang land on its
pods, which the webhook mutates when the controller creates them. ``check`` on the workload alone shows no
pod; like gator's ``expand``, this builds the pod of each template as the controller would create it (from
the workload *as admitted*: the template's metadata and spec, ``generateName``, a controller owner
reference) and runs it through the same engine as a CREATE from the controller, so CI shows the pod the
cluster will run: its resources, nodeSelector, tolerations and priority, and what the webhook says of it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from webhook.engine import Request, report
from webhook.engine.model.cluster import Cluster
from webhook.engine.model.decision import Decision
from webhook.engine.model.requester import Requester
from webhook.engine.model.workload import classify, dotted, templates
from webhook.policy.compiled import Policy


@dataclass(frozen=True, slots=True)
class ExpandedPod:
    """One template's pod: where the template is, how many such pods, and the pod as admitted."""

    template: str  # dotted path of the template in the workload, e.g. spec.template
    replicas: int  # pods of this template the workload asks for (one gang's worth)
    pod: dict[str, Any]  # as the controller creates it, after the webhook's mutation
    decision: Decision  # the webhook's judgement of that CREATE


def pod_from_template(owner: dict[str, Any], metadata: dict[str, Any], spec: dict[str, Any],
                      namespace: str) -> dict[str, Any]:
    """The pod a controller creates from a template: its labels, annotations and spec, a generated name
    and a controller reference to the workload (the ReplicaSet in between a Deployment and its pods is
    not modelled: it copies the template unchanged)."""
    meta = owner.get("metadata") if isinstance(owner.get("metadata"), dict) else {}
    name = str(meta.get("name") or meta.get("generateName") or "workload").rstrip("-")
    pod_meta: dict[str, Any] = {"generateName": f"{name}-", "namespace": namespace}
    for section in ("labels", "annotations"):
        if isinstance(metadata.get(section), dict) and metadata[section]:
            pod_meta[section] = copy.deepcopy(metadata[section])
    pod_meta["ownerReferences"] = [
        {"apiVersion": owner.get("apiVersion"), "kind": owner.get("kind"), "name": name, "controller": True}
    ]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": copy.deepcopy(spec)}


def expand(
    policy: Policy,
    admitted: dict[str, Any],
    *,
    namespace: str,
    labels: dict[str, str] | None,
    cluster: Cluster,
    today: Any = None,
) -> list[ExpandedPod]:
    """Each pod template of ``admitted`` (the workload after the webhook's mutation) as a judged pod;
    empty for a Pod, a kind without templates, or a template the engine only reads (TrainJob's)."""
    kind = classify(admitted, policy)
    if kind is None or (admitted.get("kind") == "Pod" and admitted.get("apiVersion") == "v1"):
        return []
    controller = policy.settings.controllers[0] if policy.settings.controllers else None
    out: list[ExpandedPod] = []
    for template in templates(admitted, kind):
        if template.path == () or template.virtual:
            continue
        pod = pod_from_template(admitted, template.metadata, template.spec, namespace)
        request = Request(
            pod,
            operation="CREATE",
            namespace=namespace,
            namespace_labels=labels,
            cluster=cluster,
            requester=Requester(controller) if controller else None,
            today=today,
        )
        decision = report(policy, request)
        out.append(ExpandedPod(dotted(template.path), template.replicas, decision.mutated or pod, decision))
    return out

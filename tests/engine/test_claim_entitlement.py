"""A claim template created after its pod is judged where it is written (issue: claim templates created
after the pod are never judged).

A pod naming a ResourceClaimTemplate that does not exist yet is admitted with ``claim-unresolved``; the
template created afterwards is what the pod gets. So the template (or a ResourceClaim) is judged at its
CREATE on what a pod's judgement reads of it, against the namespace's entitlement: the GPUs it counts,
``allocationMode: All``, ``adminAccess``, and classes no entitled pool serves.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from tests.engine.helpers import intent
from tests.engine.test_dra import claim_pod, cluster_of, exactly, rct
from webhook.engine import Request, report
from webhook.policy import load_policy_texts

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "dra-policy" / "policy.yaml"
STRICT = {"gpu-admission.io/tier": "serving", "gpu-admission.io/raw-gpus": "denied"}  # classes only
SERVING = {"gpu-admission.io/tier": "serving"}  # raw GPU requests warned, not denied
SANDBOX = {"gpu-admission.io/tier": "sandbox"}  # dev only: the A10 pool, whole cards shared by memory
MONITORING = {"platform/monitoring": "true"}


@pytest.fixture(scope="module")
def dra_policy():
    doc = yaml.safe_load(EXAMPLE.read_text())
    spec = doc["spec"]
    spec["namespaces"].insert(
        0, {"name": "sandbox", "selector": {"matchLabels": SANDBOX}, "classes": ["dev"]}
    )
    spec["rules"]["raw-gpu-request"]["namespaces"] = [
        {"selector": {"matchLabels": {"gpu-admission.io/raw-gpus": "denied"}}, "action": "deny"}
    ]
    spec["rules"]["privileged-gpu"] = {"exempt": [{"matchLabels": MONITORING}]}
    return load_policy_texts([("policy.yaml", yaml.safe_dump(doc))])


def judged(policy, obj: dict, labels: dict[str, str], operation: str = "CREATE"):
    ns = {**labels, "kubernetes.io/metadata.name": "team-a"}
    return report(policy, Request(copy.deepcopy(obj), operation=operation, namespace="team-a", namespace_labels=ns))


def found(decision) -> dict[str, str]:
    return {v.rule: v.message for v in decision.violations}


def as_claim(template: dict) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": template["metadata"]["name"], "namespace": "team-a"},
        "spec": copy.deepcopy(template["spec"]["spec"]),
    }


ALL = rct("every-gpu", exactly("gpu.nvidia.com", allocationMode="All"))
THREE = rct("three", exactly("gpu.nvidia.com", count=3))
TWO = rct("two", exactly("gpu.nvidia.com", count=2))
ADMIN = rct("watch", exactly("gpu.nvidia.com", adminAccess=True))
MIG = rct("mig", exactly("mig.nvidia.com"))


def test_the_pod_first_then_the_template_the_template_is_denied(dra_policy):
    """The attack: the inference pod names a template that does not exist (admitted, warned), then the
    template takes every GPU of a node; judged with the pod it would have been denied."""
    pod = claim_pod("every-gpu", meta=intent("inference", isolation="exclusive"))
    before = judged(dra_policy, pod, STRICT)
    assert before.allowed and "claim-unresolved" in found(before)
    with_it = report(dra_policy, Request(pod, namespace="team-a", namespace_labels=STRICT, cluster=cluster_of(ALL)))
    assert "gpu-count-exceeded" in found(with_it)
    for obj in (ALL, as_claim(ALL)):
        decision = judged(dra_policy, obj, STRICT)
        assert not decision.allowed, obj["kind"]
        message = found(decision)["gpu-count-exceeded"]
        assert "allocationMode All" in message and "every GPU of a node (8 on pool infer-a100)" in message
        assert "ExactCount" in message


def test_a_count_past_every_entitled_class_is_denied(dra_policy):
    decision = judged(dra_policy, THREE, STRICT)
    assert "gpu-count-exceeded" in found(decision)
    assert "asks for 3 GPUs" in found(decision)["gpu-count-exceeded"]
    assert "at most 2, class 'inference'" in found(decision)["gpu-count-exceeded"]
    assert judged(dra_policy, TWO, STRICT).allowed  # an inference pod may hold two


def test_where_raw_gpu_requests_are_allowed_no_class_bounds_the_count(dra_policy):
    """A raw pod (no class) is held to no class maximum; the template gives it nothing it could not ask
    for itself, so it is not denied for its count (the pod that names it is judged as usual)."""
    assert judged(dra_policy, THREE, SERVING).allowed
    assert judged(dra_policy, ALL, SERVING).allowed


def test_admin_access_is_privileged_gpu_unless_the_namespace_is_exempt(dra_policy):
    for obj in (ADMIN, as_claim(ADMIN)):
        decision = judged(dra_policy, obj, SERVING)
        assert not decision.allowed
        assert "adminAccess on a GPU" in found(decision)["privileged-gpu"]
    assert judged(dra_policy, ADMIN, {**SERVING, **MONITORING}).allowed


def test_a_class_no_entitled_pool_serves_is_denied(dra_policy):
    decision = judged(dra_policy, MIG, SANDBOX)
    assert not decision.allowed
    message = found(decision)["pool-spoofing"]
    assert "mig.nvidia.com" in message and "entitled: dev-a10" in message
    assert judged(dra_policy, MIG, SERVING).allowed  # the A100 pool serves MIG
    assert judged(dra_policy, rct("one", exactly("gpu.nvidia.com")), SANDBOX).allowed


def test_a_claim_that_holds_no_gpu_is_not_judged(dra_policy):
    channel = rct("channel", exactly("compute-domain-default-channel.nvidia.com", allocationMode="All"))
    assert not judged(dra_policy, channel, STRICT).relevant


def test_an_update_of_a_stored_claim_reports_nothing_new(dra_policy):
    """The spec is immutable: a finalizer write on a stored claim is not its CREATE again."""
    claim = as_claim(ALL)
    later = copy.deepcopy(claim)
    later["metadata"]["finalizers"] = ["resource.kubernetes.io/delete-protection"]
    decision = report(
        dra_policy,
        Request(later, operation="UPDATE", old_object=claim, namespace="team-a", namespace_labels=STRICT),
    )
    assert decision.allowed and not decision.violations


def test_the_platforms_own_templates_are_admitted_wherever_render_puts_them(dra_policy):
    """``policy render`` gives a namespace every template of its entitled pools (gpu-admission-gpu-1..8):
    the pods that name them are judged with the policy's spec, so their size is not the template's fault.
    A template under a platform name with other content is judged as any other."""
    from webhook.render.claimtemplates import render
    from webhook.render.core import RenderOptions

    labels = {"a": STRICT, "b": {**SANDBOX, "gpu-admission.io/raw-gpus": "denied"}, "c": SERVING}
    rendered = render(dra_policy, RenderOptions(namespace_labels=labels))
    assert len(rendered) > 20
    for obj in rendered:
        ns = obj["metadata"]["namespace"]
        decision = report(
            dra_policy,
            Request(obj, namespace=ns, namespace_labels={**labels[ns], "kubernetes.io/metadata.name": ns}),
        )
        assert decision.allowed and not decision.violations, (ns, obj["metadata"]["name"], decision.violations)
    forged = copy.deepcopy(ALL)
    forged["metadata"]["name"] = "gpu-admission-gpu-2"
    assert "gpu-count-exceeded" in found(judged(dra_policy, forged, STRICT))

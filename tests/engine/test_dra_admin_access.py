"""DRA ``adminAccess`` is a way past the device grant: ``privileged-gpu`` judges it.

A claim request with ``adminAccess: true`` (``resource.k8s.io/v1``, in ``exactly`` or in a
``firstAvailable`` subrequest) gets the container devices already allocated to other pods: on a
sliced or shared pool, other tenants' slices. The apiserver allows it only in namespaces labelled
``resource.kubernetes.io/admin-access: "true"``; that label is the namespace owner's to set, so the
webhook judges it as it judges ``privileged: true``: denied in a GPU pod, unless the policy exempts the
namespace (node monitoring agents).
"""

from __future__ import annotations

import yaml

from tests.conftest import POLICIES
from tests.engine.helpers import container, pod, rules, run, violation
from tests.engine.test_dra import cluster_of, exactly, rct
from webhook.policy import load_policy_texts

ADMIN_NS = {"resource.kubernetes.io/admin-access": "true"}

ADMIN_GPU = rct("monitor-gpus", exactly("gpu.nvidia.com", adminAccess=True, allocationMode="All"))
PLAIN_GPU = rct("one-gpu", exactly("gpu.nvidia.com"))
ADMIN_SUBREQUEST = rct(
    "any-accel",
    {
        "name": "accel",
        "firstAvailable": [
            {"name": "whole", "deviceClassName": "gpu.nvidia.com"},
            {"name": "mig", "deviceClassName": "mig.nvidia.com", "adminAccess": True},
        ],
    },
)
TWO_REQUESTS = rct(
    "train-and-watch",
    exactly("gpu.nvidia.com", name="gpu"),
    exactly("gpu.nvidia.com", name="watch", adminAccess=True),
)
ADMIN_CHANNEL = rct(  # an IMEX channel is not a GPU: adminAccess on it reaches no GPU
    "channel", exactly("compute-domain-default-channel.nvidia.com", name="channel", adminAccess=True)
)
CLUSTER = cluster_of(ADMIN_GPU, PLAIN_GPU, ADMIN_SUBREQUEST, TWO_REQUESTS, ADMIN_CHANNEL)


def claimed(template: str, *containers: dict, claim: str = "gpu") -> dict:
    ctrs = list(containers) or [container("agent", resources={"claims": [{"name": claim}]})]
    return pod(None, ctrs, resourceClaims=[{"name": claim, "resourceClaimTemplateName": template}])


def test_admin_access_in_exactly_is_denied_at_the_pods_claim_entry(policy):
    d = run(policy, claimed("monitor-gpus"), cluster=CLUSTER, labels=ADMIN_NS)
    assert not d.allowed
    v = violation(d, "privileged-gpu")
    assert v.path == "spec.resourceClaims[0]"
    assert v.message.startswith(
        "container 'agent' gets request 'gpu' of claim 'gpu' (ResourceClaimTemplate monitor-gpus) with adminAccess "
        "in a pod holding GPUs"
    ), v.message
    assert "devices other pods hold" in v.message
    assert "drop adminAccess" in v.message and "exempt" in v.message


def test_admin_access_in_a_first_available_subrequest_is_denied(policy):
    d = run(policy, claimed("any-accel"), cluster=CLUSTER, labels=ADMIN_NS)
    v = violation(d, "privileged-gpu")
    assert v.path == "spec.resourceClaims[0]"
    assert "request 'accel/mig' of claim 'gpu' (ResourceClaimTemplate any-accel) with adminAccess" in v.message


def test_a_claim_without_admin_access_passes(policy):
    d = run(policy, claimed("one-gpu"), cluster=CLUSTER, labels=ADMIN_NS)
    assert "privileged-gpu" not in rules(d), [v.render() for v in d.violations]


def test_only_containers_that_get_the_admin_request_are_named(policy):
    obj = claimed(
        "train-and-watch",
        container("train", resources={"claims": [{"name": "gpu", "request": "gpu"}]}),
        container("watch", resources={"claims": [{"name": "gpu", "request": "watch"}]}),
        container("all", resources={"claims": [{"name": "gpu"}]}),  # no request: the whole claim
    )
    found = [v for v in run(policy, obj, cluster=CLUSTER, labels=ADMIN_NS).violations if v.rule == "privileged-gpu"]
    named = sorted(v.message.split("'")[1] for v in found)
    assert named == ["all", "watch"], [v.render() for v in found]


def test_a_sidecar_or_init_container_getting_the_admin_request_counts(policy):
    obj = claimed("monitor-gpus", container("main"))
    obj["spec"]["initContainers"] = [
        container("exporter", restartPolicy="Always", resources={"claims": [{"name": "gpu"}]})
    ]
    v = violation(run(policy, obj, cluster=CLUSTER, labels=ADMIN_NS), "privileged-gpu")
    assert v.message.startswith("sidecar container 'exporter' gets request 'gpu'"), v.message


def test_an_admin_claim_no_container_names_is_the_pods(policy):
    # the claim is still allocated to the pod and prepared on its node: judged at the pod's entry
    obj = claimed("monitor-gpus", container("main"))
    v = violation(run(policy, obj, cluster=CLUSTER, labels=ADMIN_NS), "privileged-gpu")
    assert v.path == "spec.resourceClaims[0]"
    assert v.message.startswith("the pod's claim 'gpu' (ResourceClaimTemplate monitor-gpus) has request 'gpu' with")


def test_admin_access_on_a_device_that_is_no_gpu_passes(policy):
    d = run(policy, claimed("channel"), cluster=CLUSTER, labels=ADMIN_NS)
    assert "privileged-gpu" not in rules(d), [v.render() for v in d.violations]


def test_a_namespace_the_policy_exempts_may_run_admin_access_agents():
    doc = yaml.safe_load((POLICIES / "default.yaml").read_text(encoding="utf-8"))
    doc["spec"]["rules"]["privileged-gpu"] = {"exempt": [{"matchLabels": {"platform/monitoring": "true"}}]}
    pol = load_policy_texts([("default.yaml", yaml.safe_dump(doc))])
    monitoring = {**ADMIN_NS, "platform/monitoring": "true"}
    assert "privileged-gpu" not in rules(run(pol, claimed("monitor-gpus"), cluster=CLUSTER, labels=monitoring))
    assert "privileged-gpu" in rules(run(pol, claimed("monitor-gpus"), cluster=CLUSTER, labels=ADMIN_NS))


def test_a_container_naming_another_subrequest_does_not_get_the_admin_one(policy):
    whole = claimed("any-accel", container("agent", resources={"claims": [{"name": "gpu", "request": "accel/whole"}]}))
    assert "privileged-gpu" not in rules(run(policy, whole, cluster=CLUSTER, labels=ADMIN_NS))
    mig = claimed("any-accel", container("agent", resources={"claims": [{"name": "gpu", "request": "accel/mig"}]}))
    assert "privileged-gpu" in rules(run(policy, mig, cluster=CLUSTER, labels=ADMIN_NS))


def test_a_shared_resource_claim_and_the_v1beta1_form_count_too(policy):
    shared = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "node-watch", "namespace": "team-a"},
        "spec": {"devices": {"requests": [exactly("gpu.nvidia.com", adminAccess=True)]}},
    }
    beta = rct("old-form", {"name": "gpu", "deviceClassName": "gpu.nvidia.com", "adminAccess": True}, version="v1beta1")
    cluster = cluster_of(shared, beta)
    obj = pod(
        None,
        [container("agent", resources={"claims": [{"name": "gpu"}]})],
        resourceClaims=[{"name": "gpu", "resourceClaimName": "node-watch"}],
    )
    v = violation(run(policy, obj, cluster=cluster, labels=ADMIN_NS), "privileged-gpu")
    assert "of claim 'gpu' (ResourceClaim node-watch) with adminAccess" in v.message
    v = violation(run(policy, claimed("old-form"), cluster=cluster, labels=ADMIN_NS), "privileged-gpu")
    assert "(ResourceClaimTemplate old-form) with adminAccess" in v.message

"""Grants bound to the content they were issued for, pods included (issue 41, items 2 and 3).

A grant names the object it was issued for and carries a digest of what its pods run: images,
commands, environment, devices, privileged bits, volumes (less what the apiserver and the kubelet add
on their own). These tests are the attacker's: a tenant with create and update rights on Pods and
workloads of the namespace swaps a granted pod's image, or makes a controller create a pod under an
owner of the wrong kind; each is judged as if no grant were carried. The legitimate chain still holds
with pods as the apiserver stores them (defaults, the service-account volume, default tolerations).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest

from tests.engine.test_exceptions import (
    GRANT,
    KEYS,
    MALLORY,
    NS,
    POLICY_DIR,
    REPLICASET_CONTROLLER,
    a_deployment,
    deploy,
    grant_of,
    judge,
    legit_pod,
    mutate,
    placed,
    pod_of,
    replicaset_of,
    verdict,
)
from webhook.engine.model.grants import issue, read_grants
from webhook.engine.model.requester import Requester
from webhook.policy import load_policy

STATEFULSET_CONTROLLER = Requester("system:serviceaccount:kube-system:statefulset-controller")
KUBELET_SA = Requester("system:node:gpu-1", ("system:nodes",))


@pytest.fixture(scope="module")
def policy():
    return load_policy(POLICY_DIR)


def as_stored(pod: dict[str, Any]) -> dict[str, Any]:
    """What the apiserver adds to a pod a controller creates before ``/validate`` sees it: defaulting, and
    the ServiceAccount and DefaultTolerationSeconds admission plugins."""
    pod = copy.deepcopy(pod)
    spec = pod["spec"]
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    spec.setdefault("priority", 0)
    spec.setdefault("serviceAccount", spec.get("serviceAccountName", "default"))
    spec.setdefault("tolerations", []).extend(
        {"key": f"node.kubernetes.io/{key}", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
        for key in ("not-ready", "unreachable")
    )
    spec.setdefault("volumes", []).append(
        {"name": "kube-api-access-x7k2p", "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1",
                                                                          "fieldPath": "metadata.namespace"}}]}},
        ]}}
    )  # fmt: skip
    for c in spec["containers"]:
        c.setdefault("imagePullPolicy", "IfNotPresent")
        c.setdefault("terminationMessagePath", "/dev/termination-log")
        c.setdefault("terminationMessagePolicy", "File")
        resources = c.setdefault("resources", {})
        if "limits" in resources:  # requests default to limits (pods only, not templates)
            resources["requests"] = {**resources["limits"], **resources.get("requests", {})}
        c.setdefault("volumeMounts", []).append(
            {"name": "kube-api-access-x7k2p", "readOnly": True,
             "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}
        )  # fmt: skip
    pod["metadata"]["name"] = pod["metadata"].get("name") or pod["metadata"]["generateName"] + "x9z4q"
    return pod


def test_a_pod_of_the_chain_as_the_apiserver_stores_it_keeps_its_grant(policy):
    deployment = a_deployment()
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["env"] = [{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]
    container["volumeMounts"] = [{"name": "cfg", "mountPath": "/etc/dcgm"}]
    deployment["spec"]["template"]["spec"]["volumes"] = [{"name": "cfg", "configMap": {"name": "dcgm"}}]
    rs = replicaset_of(mutate(policy, deployment, Requester("alice")))
    pod = placed(policy, pod_of(rs), REPLICASET_CONTROLLER)
    stored = as_stored(pod)  # defaults of its own: the env's fieldRef apiVersion, the volume's defaultMode
    stored["spec"]["containers"][0]["env"][0]["valueFrom"]["fieldRef"]["apiVersion"] = "v1"
    stored["spec"]["volumes"][0]["configMap"]["defaultMode"] = 420
    d = judge(policy, stored, REPLICASET_CONTROLLER)
    assert d.allowed and verdict(d) == ("audit", "dcgm-diag")


def test_the_grant_carries_a_digest_of_what_the_pods_run(policy):
    (grant,), _ = read_grants(KEYS, grant_of(deploy(policy)["spec"]["template"]))
    assert grant.content  # a v2 grant: bound to the pods' content, not only to the template's


# --- item 2: a granted pod's content changed by UPDATE ----------------------------------------------------------


def swapped(pod: dict[str, Any], image: str = "registry.example/miner:1") -> dict[str, Any]:
    new = copy.deepcopy(pod)
    new["spec"]["containers"][0]["image"] = image
    return new


def test_attack_an_image_swap_on_a_granted_pod_is_judged_without_the_grant(policy):
    old = as_stored(legit_pod(policy))
    d = judge(policy, swapped(old), MALLORY, operation="UPDATE", old_object=old)
    assert verdict(d) == ("deny", None) and not d.allowed


def test_attack_an_image_swap_sent_by_a_controller_is_judged_without_the_grant(policy):
    """Whoever sends it (a controller of ``settings.controllers`` too): the grant is for the old image."""
    old = as_stored(legit_pod(policy))
    d = judge(policy, swapped(old), REPLICASET_CONTROLLER, operation="UPDATE", old_object=old)
    assert verdict(d) == ("deny", None) and not d.allowed


def test_attack_an_init_container_image_swap_is_judged_without_the_grant(policy):
    deployment = a_deployment()
    deployment["spec"]["template"]["spec"]["initContainers"] = [{"name": "prep", "image": "busybox:1.36"}]
    rs = replicaset_of(mutate(policy, deployment, Requester("alice")))
    old = as_stored(placed(policy, pod_of(rs), REPLICASET_CONTROLLER))
    assert judge(policy, old, REPLICASET_CONTROLLER).allowed
    new = copy.deepcopy(old)
    new["spec"]["initContainers"][0]["image"] = "registry.example/miner:1"
    assert verdict(judge(policy, new, MALLORY, operation="UPDATE", old_object=old)) == ("deny", None)


def test_an_update_that_leaves_the_content_alone_keeps_the_grant(policy):
    """Labels, annotations, the image's own digest resolved by nobody: a bound pod keeps updating."""
    old = as_stored(legit_pod(policy))
    new = copy.deepcopy(old)
    new["metadata"].setdefault("labels", {})["phase"] = "diagnosing"
    new["spec"]["activeDeadlineSeconds"] = 3600
    for who in (MALLORY, REPLICASET_CONTROLLER, KUBELET_SA):
        d = judge(policy, new, who, operation="UPDATE", old_object=old)
        assert d.allowed and not [v for v in d.violations if v.rule == "privileged-gpu"], who


def test_an_image_swap_of_a_pod_without_a_grant_is_judged_as_before(policy):
    """Only what a grant held is judged again: a finding the old pod had by itself stays the old pod's."""
    old = placed(policy, pod_of(replicaset_of(a_deployment())), REPLICASET_CONTROLLER)  # no grant
    d = judge(policy, swapped(old), MALLORY, operation="UPDATE", old_object=old)
    assert not [v for v in d.violations if v.rule == "privileged-gpu"]


# --- item 3: the owner the controller created the pod under -----------------------------------------------------


def with_owner(pod: dict[str, Any], kind: str, name: str, api_version: str) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    pod["metadata"]["ownerReferences"] = [
        {"apiVersion": api_version, "kind": kind, "name": name, "uid": "f-1", "controller": True}
    ]
    return pod


def test_attack_a_pod_under_an_owner_of_a_kind_no_controller_creates_it_under(policy):
    pod = legit_pod(policy)
    for kind, name, api in (
        ("ConfigMap", "dcgm-abc12", "v1"),  # any kind, named <granted-name>-<suffix>
        ("StatefulSet", "dcgm-abc12", "apps/v1"),  # a workload kind, not the Deployment's child kind
        ("Deployment", "dcgm", "apps/v1"),  # the granted Deployment itself: it creates ReplicaSets, not pods
        ("Job", "dcgm-29412180", "batch/v1"),
    ):
        forged = with_owner(pod, kind, name, api)
        assert verdict(judge(policy, forged, REPLICASET_CONTROLLER)) == ("deny", None), kind


def test_attack_a_replicaset_owned_by_something_else_named_like_the_deployment(policy):
    granted = deploy(policy)
    rs = replicaset_of(granted)
    rs["metadata"]["ownerReferences"][0].update({"kind": "StatefulSet", "name": "dcgm"})
    assert verdict(judge(policy, rs, REPLICASET_CONTROLLER)) == ("deny", None)
    sts = copy.deepcopy(granted)  # a StatefulSet object carrying the Deployment's grant, owned by it
    sts.update(kind="StatefulSet")
    sts["metadata"] = {"name": "dcgm-abc12", "namespace": NS, "ownerReferences": [
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "dcgm", "uid": "d-1", "controller": True}]}
    assert verdict(judge(policy, sts, STATEFULSET_CONTROLLER)) == ("deny", None)


def test_attack_a_controller_created_pod_whose_content_differs_from_the_grant(policy):
    """Another mutating webhook, or a ReplicaSet template edited past /mutate: the pod is not what the
    grant was issued for."""
    rs = replicaset_of(deploy(policy))
    rs["spec"]["template"]["spec"]["containers"][0]["image"] = "registry.example/miner:1"
    pod = placed(policy, pod_of(rs), REPLICASET_CONTROLLER)
    assert GRANT in pod["metadata"]["annotations"]
    assert verdict(judge(policy, pod, REPLICASET_CONTROLLER)) == ("deny", None)


# --- grants issued before the content digest (v1) ---------------------------------------------------------------


def legacy(token: str) -> str:
    """The same grant as a v1 token (8 fields, no content digest), as an older webhook signed it."""
    (grant,), _ = read_grants(KEYS, token)
    return issue(KEYS, dataclasses.replace(grant, content=""))


def test_a_v1_grant_still_holds_on_the_pods_a_controller_creates(policy):
    rs = replicaset_of(deploy(policy))
    rs["spec"]["template"]["metadata"]["annotations"][GRANT] = legacy(grant_of(rs["spec"]["template"]))
    assert grant_of(rs["spec"]["template"]).startswith("v1.")
    assert mutate(policy, rs, Requester("system:serviceaccount:kube-system:deployment-controller")) == rs
    pod = as_stored(placed(policy, pod_of(rs), REPLICASET_CONTROLLER))
    assert verdict(judge(policy, pod, REPLICASET_CONTROLLER)) == ("audit", "dcgm-diag")
    # ...but not across an UPDATE that swaps what the pod runs, whoever sends it
    for who in (MALLORY, REPLICASET_CONTROLLER):
        assert verdict(judge(policy, swapped(pod), who, operation="UPDATE", old_object=pod)) == ("deny", None)


def test_a_cronjobs_job_and_its_pods_keep_the_grant_and_an_owner_of_another_kind_does_not(policy):
    from tests.engine.test_exceptions import CRONJOB_CONTROLLER, JOB_CONTROLLER, a_cronjob

    carol = Requester("carol")
    cron = mutate(policy, a_cronjob(), carol)
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "nightly-29412180", "namespace": NS,
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob", "name": "nightly",
                                          "uid": "c-1", "controller": True}]},
        "spec": copy.deepcopy(cron["spec"]["jobTemplate"]["spec"]),
    }  # fmt: skip
    job = mutate(policy, job, CRONJOB_CONTROLLER)
    pod = as_stored(placed(policy, pod_of(job), JOB_CONTROLLER))
    assert verdict(judge(policy, pod, JOB_CONTROLLER)) == ("audit", "nightly-only")
    forged = with_owner(pod, "Deployment", "nightly-29412180", "apps/v1")  # not what a CronJob creates
    assert verdict(judge(policy, forged, JOB_CONTROLLER)) == ("deny", None)


def test_the_denial_says_why_the_grant_was_not_honoured(policy):
    pod = as_stored(legit_pod(policy))
    d = judge(policy, swapped(pod), MALLORY, operation="UPDATE", old_object=pod)
    assert "grant of exception dcgm-diag not honoured: this UPDATE changes what the pod runs" in d.message
    d = judge(policy, with_owner(pod, "ConfigMap", "dcgm-abc12", "v1"), REPLICASET_CONTROLLER)
    assert "its owner ConfigMap/dcgm-abc12 is not of a kind Deployment/dcgm creates" in d.message


TRAINING_OPERATOR = Requester("system:serviceaccount:kubeflow:training-operator")


@pytest.fixture(scope="module")
def with_operator():
    """The test policy with the training operator's service account among ``settings.controllers``."""
    from webhook.policy import load_policy_texts
    from webhook.policy.model import DEFAULT_CONTROLLERS

    texts = [(f.name, f.read_text()) for f in sorted(POLICY_DIR.glob("*.yaml"))]
    extra = "apiVersion: gpu-admission.io/v1\nkind: GPUPolicy\nspec:\n  settings:\n    controllers:\n" + "".join(
        f"      - {name}\n" for name in (*DEFAULT_CONTROLLERS, TRAINING_OPERATOR.username)
    )
    return load_policy_texts([*texts, ("zz-operators.yaml", extra)])


def a_pytorchjob() -> dict[str, Any]:
    template = copy.deepcopy(a_deployment()["spec"]["template"])
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "burn", "namespace": NS},
        "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 1, "template": template}}},
    }


def test_what_an_operator_and_injectors_add_to_its_pods_keeps_the_grant(with_operator):
    """Between the template and the pod others add what is theirs: an operator's env, volumes and command
    (PyTorchJob's RANK, Volcano's hosts file, KubeRay's ``ray start``), an injected sidecar and init
    container. The grant binds what the template's own containers get of devices, not those."""
    policy = with_operator
    job = mutate(policy, a_pytorchjob(), Requester("alice"))
    template = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    pod = pod_of(job, template)  # as the operator (and the injectors before /mutate) made it
    pod["metadata"]["generateName"] = "burn-worker-"
    pod["spec"]["containers"][0].setdefault("env", []).append({"name": "RANK", "value": "0"})
    pod["spec"]["containers"][0]["command"] = ["/bin/bash", "-lc", "--", "ulimit -n 65536; exec dcgm"]
    pod["spec"]["containers"].append({"name": "istio-proxy", "image": "istio/proxyv2:1.22"})
    pod["spec"]["initContainers"] = [{"name": "wait-gcs-ready", "image": "busybox:1.36"}]
    pod["spec"]["volumes"] = [{"name": "hosts", "configMap": {"name": "job-svc"}}]
    d = judge(policy, as_stored(placed(policy, pod, TRAINING_OPERATOR)), TRAINING_OPERATOR)
    assert verdict(d) == ("audit", "dcgm-diag")
    swapped_pod = copy.deepcopy(pod)  # ...and what gives its containers devices stays bound
    swapped_pod["spec"]["containers"][0]["image"] = "registry.example/miner:1"
    d = judge(policy, as_stored(placed(policy, swapped_pod, TRAINING_OPERATOR)), TRAINING_OPERATOR)
    assert verdict(d) == ("deny", None)


def test_a_deployments_pods_are_bound_to_its_commands_too(policy):
    """kube-controller-manager copies a template as it is: a ReplicaSet whose command was changed past
    /mutate (it failed open) creates pods that are not what the grant was issued for."""
    rs = replicaset_of(deploy(policy))
    rs["spec"]["template"]["spec"]["containers"][0]["command"] = ["/bin/sh", "-c", "mine"]
    pod = placed(policy, pod_of(rs), REPLICASET_CONTROLLER)
    assert verdict(judge(policy, pod, REPLICASET_CONTROLLER)) == ("deny", None)


def test_what_gives_a_named_container_devices_is_bound(policy):
    pod = placed(policy, pod_of(replicaset_of(deploy(policy))), REPLICASET_CONTROLLER)
    for change in (
        lambda c, s: c.update(image="registry.example/miner:1"),
        lambda c, s: c["resources"]["limits"].update({"nvidia.com/gpu": "8"}),
        lambda c, s: c.setdefault("env", []).append({"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}),
        lambda c, s: s.update(volumes=[{"name": "dev", "hostPath": {"path": "/dev"}}]),
        lambda c, s: s.update(hostPID=True),
        lambda c, s: c.update(name="renamed"),
    ):
        changed = copy.deepcopy(pod)
        change(changed["spec"]["containers"][0], changed["spec"])
        assert ("audit", "dcgm-diag") not in [
            (v.action.value, v.exception) for v in judge(policy, changed, REPLICASET_CONTROLLER).violations
        ]

"""DRA as Kubernetes 1.36 serves it: only GPUs are GPUs, device taints, the scheduler's claim marker,
consumable capacity, ComputeDomains. Upstream names come from ``tests/engine/upstream_dra.py``."""

from __future__ import annotations

from tests.engine.helpers import container, intent, pod, rules, run
from tests.engine.test_dra import claim_pod, cluster_of, exactly, rct

NS = "team-a"


def device_class(name: str, driver: str, **spec) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{driver}'"}}], **spec},
    }


NIC = device_class("rdma-nic.example.com", "dra.net")
FPGA = device_class("fpga.example.com", "fpga.example.com")


# --- only GPUs are GPUs ------------------------------------------------------------------------------


def test_a_known_non_gpu_class_holds_no_gpu(policy):
    cluster = cluster_of(FPGA, rct("fpga", exactly("fpga.example.com", name="fpga")), complete=True)
    decision = run(policy, claim_pod("fpga"), cluster=cluster)
    assert not decision.relevant  # no claim-unresolved, no raw-gpu-request, no pinning
    assert decision.patch == () and decision.violations == ()
    # the same pod with the class unknown is judged as a GPU pod
    unknown = run(policy, claim_pod("fpga"), cluster=cluster_of(rct("fpga", exactly("fpga.example.com"))))
    assert "claim-unresolved" in rules(unknown)


def test_nic_and_gpu_in_one_training_pod(policy):
    cluster = cluster_of(
        NIC,
        rct("nic", exactly("rdma-nic.example.com", name="nic")),
        rct("gpu", exactly("gpu.nvidia.com", allocationMode="ExactCount", count=1)),
        complete=True,
    )
    # 8 GPUs by intent (the class maximum) and a NIC claim: the NIC adds no GPU, nothing unresolved
    obj = claim_pod("nic", meta=intent("training", gpus=8))
    decision = run(policy, obj, training=True, cluster=cluster)
    assert decision.allowed, [v.render() for v in decision.violations]
    assert decision.violations == ()
    assert decision.placements[0].pool == "train-h100"
    # a GPU claim next to it still counts: 8 + 1 exceed the class maximum
    both = claim_pod("nic", "gpu", meta=intent("training", gpus=8))
    denied = run(policy, both, training=True, cluster=cluster)
    assert set(rules(denied)) == {"gpu-count-exceeded"}
    assert "1 in claim 'c1'" in denied.violations[0].message


def test_a_raw_pod_with_nic_and_gpu_claims_is_pinned_for_its_gpu_claim_only(policy):
    cluster = cluster_of(NIC, rct("nic", exactly("rdma-nic.example.com")), complete=True)
    nic_only = run(policy, claim_pod("nic"), cluster=cluster)
    assert not nic_only.relevant
    raw = pod(None, [container(limits={"nvidia.com/gpu": "1"})])
    raw["spec"]["resourceClaims"] = [{"name": "nic", "resourceClaimTemplateName": "nic"}]
    decision = run(policy, raw, cluster=cluster)
    assert decision.relevant and "claim-unresolved" not in rules(decision)
    assert "raw-gpu-request" in rules(decision)  # for the device-plugin GPU, not the NIC

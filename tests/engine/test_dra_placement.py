"""DRA in the reachability model: what a user who may create Pods in one namespace can write with
resource claims to reach nodes or devices outside the namespace's entitlement.

The policy is ``examples/dra-policy`` (inference pool serving MIG and whole GPUs through DRA, dev pool
serving memory slices through DRA, training pool on the device plugin), plus an untainted pool
``amd-mi300`` whose nodes serve ``gpu.amd.com`` through DRA and that no class grants. The scheduler's
DynamicResources filter is emulated from its documented behaviour (a claim is allocated only from
devices a node's driver publishes; each request needs one satisfiable ``firstAvailable`` alternative),
independently of the engine: each test states the pools the claim can be allocated on.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from tests.conftest import SERVING_NS
from tests.engine.helpers import container, intent, pod, rules, run, violation
from tests.engine.test_dra import claim_pod, cluster_of, exactly, rct
from webhook.engine import Request, Stage, report
from webhook.engine.model.cluster import Cluster
from webhook.policy import load_policy_texts

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "dra-policy" / "policy.yaml"
NS = "team-a"
BLANKET = [{"operator": "Exists"}]


def _variant(raw: str = "pin", *, dra_free: bool = False):
    doc = yaml.safe_load(EXAMPLE.read_text())
    spec = doc["spec"]
    spec["settings"]["rawRequests"] = raw
    # the example's GB200 NVL72 pool (ComputeDomain gangs) is left out: these cases pin the reach of the
    # inference, dev and training pools, and another pool serving gpu.nvidia.com would join every set
    spec["pools"].pop("train-nvl72", None)
    spec["classes"].pop("training-nvl", None)
    for rule in spec["namespaces"]:
        rule["classes"] = [c for c in rule["classes"] if c != "training-nvl"]
    if dra_free:
        for pool in spec["pools"].values():
            pool.pop("dra", None)
            if pool.get("isolation") == ["shared"]:
                pool["sharing"] = {"provider": "hami"}
    else:
        spec["pools"]["amd-mi300"] = {
            "description": "AMD nodes, DRA driver gpu.amd.com; granted to no class",
            "gpuModel": "H100-80GB",
            "gpusPerNode": 8,
            "nodeSelector": {"workload": "gpu-amd"},
            "isolation": ["exclusive"],
            "dra": {"serves": ["gpu.amd.com"]},
        }
    return load_policy_texts([("policy.yaml", yaml.safe_dump(doc))])


PIN = _variant("pin")
DENY = _variant("deny")
DRA_FREE_DENY = _variant("deny", dra_free=True)

CLUSTER = cluster_of(
    rct("whole", exactly("gpu.nvidia.com")),
    rct("mig", exactly("mig.nvidia.com")),
    rct("amd", exactly("gpu.amd.com")),
    rct(
        "amd-or-mig",
        {
            "name": "accel",
            "firstAvailable": [
                {"name": "amd", "deviceClassName": "gpu.amd.com"},
                {"name": "mig", "deviceClassName": "mig.nvidia.com"},
            ],
        },
    ),
)


def spoofed(decision) -> set[str]:
    """Pools the pool-spoofing findings name as reachable."""
    out = set()
    for v in decision.violations:
        if v.rule == "pool-spoofing" and "scheduled onto pool " in v.message:
            out.add(v.message.split("scheduled onto pool ")[1].split(",")[0])
    return out


def serving(policy, obj, cluster: Cluster = CLUSTER, **kw):
    return run(policy, obj, cluster=cluster, labels=SERVING_NS, namespace=NS, **kw)


# --- a pool offers its DRA classes -------------------------------------------------------------------


def test_a_whole_gpu_claim_with_a_blanket_toleration_reaches_only_pools_serving_its_class():
    # gpu.nvidia.com is served by infer-a100 (entitled) and dev-a10 (not); train-h100 runs the device
    # plugin only and amd-mi300 serves gpu.amd.com: the claim can never be allocated there
    d = serving(DENY, claim_pod("whole", tolerations=BLANKET))
    assert spoofed(d) == {"dev-a10"}
    v = violation(d, "pool-spoofing")
    assert "it serves DeviceClass gpu.nvidia.com (the pod's resource claims)" in v.message
    assert v.path == "spec.tolerations[0]"


def test_a_mig_claim_with_a_blanket_toleration_reaches_only_the_mig_pool():
    d = serving(DENY, claim_pod("mig", tolerations=BLANKET))
    assert "pool-spoofing" not in rules(d)  # only infer-a100 serves mig.nvidia.com, and it is entitled


def test_first_available_reaches_every_pool_serving_any_alternative():
    d = serving(DENY, claim_pod("amd-or-mig", tolerations=BLANKET))
    assert spoofed(d) == {"amd-mi300"}


def test_a_claim_class_only_a_non_entitled_pool_offers_is_denied_not_pinned_elsewhere():
    # no entitled pool serves gpu.amd.com: a pin onto infer-a100 would be a pod that never schedules,
    # and the untainted amd-mi300 stays open to it; like a raw device-plugin request no entitled pool
    # offers, it is not pinned and pool-spoofing denies the reach it keeps
    d = serving(PIN, claim_pod("amd"))
    assert spoofed(d) == {"amd-mi300"}
    assert "nodeSelector" not in d.mutated["spec"]


def test_a_raw_dra_pod_is_pinned_to_an_entitled_pool_serving_its_class():
    d = run(PIN, claim_pod("whole", tolerations=BLANKET), cluster=CLUSTER, namespace=NS)  # everyone-else
    assert d.mutated["spec"]["nodeSelector"] == {"workload": "gpu-infer"}
    assert "pool-spoofing" not in rules(d)
    # a memory slice on gpu.nvidia.com: the first entitled pool serving the class
    sliced = cluster_of(rct("slice", exactly("gpu.nvidia.com", capacity={"requests": {"memory": "4Gi"}})))
    d = run(PIN, claim_pod("slice"), cluster=sliced, namespace=NS)
    assert d.mutated["spec"]["nodeSelector"] == {"workload": "gpu-infer"}


def test_raw_dra_pods_under_raw_requests_deny_are_judged_as_written():
    d = serving(DENY, claim_pod("whole"))  # no tolerations: the tainted pools stay closed
    assert "pool-spoofing" not in rules(d) and "nodeSelector" not in d.mutated["spec"]
    d = serving(DENY, claim_pod("amd"))  # the untainted AMD pool is open to it
    assert spoofed(d) == {"amd-mi300"}


def test_an_unresolved_claim_may_be_any_gpu():
    d = serving(DENY, claim_pod("nobody-knows", tolerations=BLANKET))
    assert "claim-unresolved" in rules(d)
    assert spoofed(d) == {"dev-a10", "train-h100", "amd-mi300"}
    pinned = serving(PIN, claim_pod("nobody-knows", tolerations=BLANKET))
    assert pinned.mutated["spec"]["nodeSelector"] == {"workload": "gpu-infer"}


def test_a_policy_that_names_no_dra_pool_lets_claims_reach_every_pool():
    # nothing says where DRA drivers run: a whole-GPU claim may be served on any pool
    d = serving(DRA_FREE_DENY, claim_pod("whole", tolerations=BLANKET))
    assert spoofed(d) == {"dev-a10", "train-h100"}


def test_an_extended_resource_a_device_class_maps_reaches_device_plugin_and_dra_pools(policy):
    # deviceclass.resource.kubernetes.io/<class> (KEP-5004): served by the class's DRA driver; before,
    # no pool "offered" the name, so the pod reached none and was judged to be going nowhere
    asks = pod(
        None,
        [container(limits={"deviceclass.resource.kubernetes.io/gpu.nvidia.com": "1"})],
        tolerations=BLANKET,
    )
    d = serving(DENY, asks)
    assert spoofed(d) == {"dev-a10"}
    d = run(policy, asks, labels=SERVING_NS, namespace=NS)  # the default policy names no DRA pool: pinned
    assert d.mutated["spec"].get("nodeSelector"), "a DRA-mapped resource must be pinned like any GPU request"
    pinned = serving(PIN, asks)
    assert pinned.mutated["spec"]["nodeSelector"] == {"workload": "gpu-infer"}


def test_with_nodes_known_the_pool_of_a_node_must_serve_the_claim():
    nodes = (
        {"metadata": {"name": "dev-1", "labels": {"workload": "gpu-dev"}}, "status": {"allocatable": {}}},
        {"metadata": {"name": "amd-1", "labels": {"workload": "gpu-amd"}}, "status": {"allocatable": {}}},
    )
    cluster = Cluster(claim_templates=CLUSTER.claim_templates, nodes=nodes)
    d = serving(DENY, claim_pod("amd"), cluster=cluster)
    assert spoofed(d) == {"amd-mi300"}
    d = serving(DENY, claim_pod("whole", tolerations=BLANKET), cluster=cluster)
    assert spoofed(d) == {"dev-a10"}


def test_node_name_on_a_dra_pod_is_denied():
    assert "node-name-set" in rules(serving(DENY, claim_pod("amd", nodeName="amd-1")))
    translated = run(PIN, pod(intent("inference", gpu_memory="4Gi"), nodeName="infer-1"), namespace=NS)
    assert "node-name-set" in rules(translated)
    assert "resourceClaims" in translated.mutated["spec"]


def test_a_class_pod_cannot_add_a_claim_only_a_non_entitled_pool_serves():
    # the webhook pins the class pod to infer-a100, which cannot allocate gpu.amd.com: the pod will
    # never run there, so the extra claim is no way onto amd-mi300 (reach is empty, nothing to deny)
    obj = claim_pod("amd", meta=intent("inference", gpu_memory="4Gi"))
    d = serving(PIN, obj)
    assert "pool-spoofing" not in rules(d)
    assert d.mutated["spec"]["nodeSelector"] == {"workload": "gpu-infer"}
    # with its own nodeSelector onto the AMD pool it is spoofing
    obj = claim_pod("amd", meta=intent("inference", gpu_memory="4Gi"), nodeSelector={"workload": "gpu-amd"})
    assert "pool-spoofing" in rules(serving(PIN, obj)) or "intent-invalid" in rules(serving(PIN, obj))


# --- placement-missing: the mutation failed open -------------------------------------------------------


@pytest.mark.parametrize(
    "strip",
    [
        pytest.param(lambda s: s.pop("resourceClaims"), id="no spec.resourceClaims"),
        pytest.param(lambda s: s["containers"][0]["resources"].pop("claims"), id="no resources.claims"),
        pytest.param(
            lambda s: s["resourceClaims"][0].update(resourceClaimTemplateName="gpu-admission-mig-7g-40gb"),
            id="another template",
        ),
    ],
)
def test_a_stored_class_pod_on_a_dra_pool_without_its_claim_is_placement_missing(strip):
    limits = {"cpu": "1", "memory": "1Gi"}
    obj = pod(intent("inference", gpu_memory="4Gi"), [container("server", limits=limits, requests=limits)])
    mutated = run(PIN, obj, namespace=NS).mutated
    assert "placement-missing" not in rules(run(PIN, mutated, namespace=NS, stage=Stage.STORED))
    stored = copy.deepcopy(mutated)
    strip(stored["spec"])
    v = violation(run(PIN, stored, namespace=NS, stage=Stage.STORED), "placement-missing")
    assert "gpu-admission-mig-1g-5gb" in v.message and "create it again" in v.message


def test_an_unmutated_class_pod_on_a_dra_pool_is_placement_missing():
    obj = pod(intent("inference", gpu_memory="4Gi"))
    found = [v for v in run(PIN, obj, namespace=NS, stage=Stage.STORED).violations if v.rule == "placement-missing"]
    assert any(v.path == "spec.resourceClaims" for v in found), [v.render() for v in found]


# --- MIG profile in a claim vs the pool's GPU model ---------------------------------------------------


def test_a_per_profile_class_the_pools_model_does_not_offer_is_mig_profile_unavailable():
    # 1g.12gb is an H100-94GB/H200 profile; the inference pool has A100-40GB cards
    cluster = cluster_of(rct("small", exactly("mig-1g-12gb.gpu.nvidia.com")))
    d = serving(PIN, claim_pod("small"), cluster=cluster)
    v = violation(d, "mig-profile-unavailable")
    assert v.path == "spec.resourceClaims[0]"
    assert "1g.12gb" in v.message and "infer-a100" in v.message and "1g.5gb" in v.message


def test_a_cel_profile_the_pools_model_does_not_offer_is_mig_profile_unavailable():
    expr = "device.attributes['gpu.nvidia.com'].profile == '1g.24gb'"
    cluster = cluster_of(rct("p", exactly("mig.nvidia.com", selectors=[{"cel": {"expression": expr}}])))
    d = serving(PIN, claim_pod("p", meta=intent("inference", gpu_memory="4Gi")), cluster=cluster)
    assert "1g.24gb" in violation(d, "mig-profile-unavailable").message
    ok = "device.attributes['gpu.nvidia.com'].profile == '2g.10gb'"
    fine = cluster_of(rct("p", exactly("mig.nvidia.com", selectors=[{"cel": {"expression": ok}}])))
    assert "mig-profile-unavailable" not in rules(serving(PIN, claim_pod("p"), cluster=fine))


def test_a_profile_no_gpu_model_offers_is_reported_without_a_pool(policy):
    cluster = cluster_of(rct("odd", exactly("mig-1g-1gb.gpu.nvidia.com")))
    decision = report(DENY, Request(claim_pod("odd"), cluster=cluster, namespace=NS))  # not pinned: deny mode
    assert "mig-profile-unavailable" in rules(decision)


def test_the_message_says_a_pool_only_may_serve_a_class_when_the_policy_names_no_dra_pool():
    d = serving(DRA_FREE_DENY, claim_pod("whole", tolerations=BLANKET))
    assert "may serve (no pool has a dra: block) DeviceClass gpu.nvidia.com" in violation(d, "pool-spoofing").message


def test_a_daemonset_of_dra_pods_reaches_only_the_pools_serving_its_class():
    # a DaemonSet is never pinned (one pod per node it selects): its template's reach is judged
    template = claim_pod("whole", tolerations=BLANKET)
    ds = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "probe"},
        "spec": {
            "selector": {"matchLabels": {"app": "probe"}},
            "template": {"metadata": {"labels": {"app": "probe"}}, "spec": template["spec"]},
        },
    }
    assert spoofed(serving(PIN, ds)) == {"dev-a10"}
    ds["spec"]["template"]["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = "mig"
    assert "pool-spoofing" not in rules(serving(PIN, ds))


def test_an_unpinned_claim_is_judged_against_the_pools_it_can_reach():
    # rawRequests deny: not pinned; the per-profile class reaches only infer-a100 (the MIG pool), whose
    # A100-40GB cards have no 1g.12gb, although an H100-94GB in the catalogue would
    cluster = cluster_of(rct("small", exactly("mig-1g-12gb.gpu.nvidia.com")))
    v = violation(serving(DENY, claim_pod("small", tolerations=BLANKET), cluster=cluster), "mig-profile-unavailable")
    assert "no pool it can reach offers (infer-a100)" in v.message and "1g.5gb" in v.message


# --- a claim the user adds to a class pod is a device of its own ---------------------------------------

ISOLATION = cluster_of(rct("whole", exactly("gpu.nvidia.com")), rct("mig", exactly("mig.nvidia.com")))


@pytest.mark.parametrize("who", ["main", "side"])
def test_a_whole_gpu_claim_in_a_mig_class_pod_breaks_its_isolation(policy, who):
    # the webhook gives 'main' a MIG slice; a whole card claimed next to it (in the GPU container or
    # a sidecar) sees what the class promised to keep apart
    side = container("side", resources={"claims": [{"name": "c0"}]} if who == "side" else {})
    main = container(resources={"claims": [{"name": "c0"}]} if who == "main" else {})
    obj = claim_pod("whole", meta=intent("inference", gpu_memory="4Gi"), containers=[main, side])
    d = run(policy, obj, cluster=ISOLATION, namespace=NS)
    v = violation(d, "gpu-kind-mixed")
    assert not d.allowed and "claim 'c0'" in v.message and f"from {who!r}" in v.message


def test_a_mig_claim_next_to_the_webhooks_mig_slice_is_two_mig_devices(policy):
    d = run(policy, claim_pod("mig", meta=intent("inference", gpu_memory="4Gi")), cluster=ISOLATION, namespace=NS)
    assert "2 MIG devices" in violation(d, "gpu-kind-mixed").message and not d.allowed


def test_a_whole_gpu_claim_in_a_whole_gpu_class_pod_is_only_counted(policy):
    d = run(policy, claim_pod("whole", meta=intent("training", gpus=8)), cluster=ISOLATION, namespace=NS)
    assert "gpu-kind-mixed" not in rules(d) and "gpu-count-exceeded" in rules(d)

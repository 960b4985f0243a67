"""DRA as Kubernetes 1.36 serves it: only GPUs are GPUs, device taints, the scheduler's claim marker,
consumable capacity, ComputeDomains. Upstream names come from ``tests/engine/upstream_dra.py``."""

from __future__ import annotations

from tests.conftest import POLICIES
from tests.engine.helpers import container, intent, pod, rules, run
from tests.engine.test_dra import claim_pod, cluster_of, exactly, rct
from webhook.engine.model.devices import SHARED, WHOLE

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


# --- device-taint tolerations -------------------------------------------------------------------------

from tests.engine.upstream_dra import (  # noqa: E402
    EXTENDED_RESOURCE_CLAIM_ANNOTATION,
    EXTENDED_RESOURCE_CLAIM_VALUE,
    NVIDIA_TAINTS,
    SCHEDULER_USERNAME,
)
from webhook.engine import Request, explain, report  # noqa: E402
from webhook.engine.model.requester import Requester  # noqa: E402
from webhook.policy import load_policy_texts  # noqa: E402

BLANKET = {"operator": "Exists"}
XID = {"key": "gpu.nvidia.com/xid", "operator": "Exists", "effect": "NoSchedule"}
LOST = {"key": "gpu.nvidia.com/gpu-lost", "operator": "Exists"}
UNMONITORED = {"key": "gpu.nvidia.com/unmonitored", "operator": "Exists"}


def test_the_builtin_device_taints_are_nvidias(policy):
    assert {k: policy.device_taints[k] for k in NVIDIA_TAINTS} == NVIDIA_TAINTS


def tolerating(*tolerations: dict, sub: bool = False, name: str = "t") -> dict:
    if sub:
        request = {
            "name": "gpu",
            "firstAvailable": [
                {"name": "whole", "deviceClassName": "gpu.nvidia.com"},
                {"name": "mig", "deviceClassName": "mig.nvidia.com", "tolerations": list(tolerations)},
            ],
        }
    else:
        request = exactly("gpu.nvidia.com", tolerations=list(tolerations))
    return rct(name, request)


def test_blanket_and_health_tolerations_are_denied_in_templates(policy):
    for tol, what in ((BLANKET, "every device taint"), (XID, "gpu.nvidia.com/xid"), (LOST, "gpu.nvidia.com/gpu-lost")):
        for sub in (False, True):
            decision = report(policy, Request(tolerating(tol, sub=sub), namespace=NS))
            assert decision.relevant and not decision.allowed
            (v,) = decision.violations
            assert v.rule == "device-taint-tolerated" and what in v.message and "allowedDeviceTaints" in v.message
            field = "firstAvailable[1]" if sub else "exactly"
            assert v.path == f"spec.spec.devices.requests[0].{field}.tolerations[0]"


def test_an_informational_taint_may_be_tolerated_by_key(policy):
    assert report(policy, Request(tolerating(UNMONITORED), namespace=NS)).violations == ()
    # a toleration of an effect the taint does not have tolerates nothing
    assert report(policy, Request(tolerating({**LOST, "effect": "NoExecute"}), namespace=NS)).violations == ()
    # a key the policy does not know: judged as a taint that keeps devices out of service
    unknown = report(policy, Request(tolerating({"key": "example.com/reserved", "operator": "Exists"}), namespace=NS))
    assert "does not know" in unknown.violations[0].message


def test_a_resource_claim_is_judged_too(policy):
    claim = tolerating(BLANKET)
    claim["kind"] = "ResourceClaim"
    claim["spec"] = claim["spec"]["spec"]
    (v,) = report(policy, Request(claim, namespace=NS)).violations
    assert v.path == "spec.devices.requests[0].exactly.tolerations[0]"


def test_a_pod_naming_a_tolerant_template_is_denied(policy):
    cluster = cluster_of(tolerating(XID, name="hot"), complete=True)
    decision = run(policy, claim_pod("hot", meta=intent("inference")), cluster=cluster)
    found = [v for v in decision.violations if v.rule == "device-taint-tolerated"]
    assert found and found[0].path == "spec.resourceClaims[0]" and "hot" in found[0].message
    assert not decision.allowed


def test_a_non_gpu_request_is_not_judged(policy):
    cluster = cluster_of(NIC)
    nic = rct("nic", exactly("rdma-nic.example.com", tolerations=[BLANKET]))
    assert not report(policy, Request(nic, namespace=NS, cluster=cluster)).relevant


ALLOWING = """
  deviceTaints:
    example.com/reserved: {effect: NoSchedule, description: cards held for the on-call team}
"""


def allowing_policy(where: str):

    text = (POLICIES / "default.yaml").read_text()
    if where == "class":
        text = text.replace(
            "      priorityClassName: gpu-training\n",
            "      priorityClassName: gpu-training\n      allowedDeviceTaints: [example.com/reserved]\n",
            1,
        )
    else:
        text = text.replace("      adoptAs: training", "      allowedDeviceTaints: ['*']\n      adoptAs: training", 1)
    return load_policy_texts([("default.yaml", text + ALLOWING)])


def test_the_entitlement_allows_device_taints_per_class_or_pool(policy):
    reserved = {"key": "example.com/reserved", "operator": "Exists"}
    custom = allowing_policy("class")
    training = {"gpu-admission.io/tier": "training"}
    assert report(custom, Request(tolerating(reserved), namespace=NS, namespace_labels=training)).violations == ()
    serving = {"gpu-admission.io/tier": "serving"}  # a namespace not entitled to training may not
    assert report(custom, Request(tolerating(reserved), namespace=NS, namespace_labels=serving)).violations
    # a pod of another class may not, even in the training namespace
    cluster = cluster_of(tolerating(reserved, name="r"), complete=True)
    infer = run(custom, claim_pod("r", meta=intent("inference")), training=True, cluster=cluster)
    assert "device-taint-tolerated" in rules(infer)
    # '*' on the pool allows a blanket toleration to its tenants
    pool = allowing_policy("pool")
    assert report(pool, Request(tolerating(BLANKET), namespace=NS, namespace_labels=training)).violations == ()
    assert report(pool, Request(tolerating(BLANKET), namespace=NS, namespace_labels=serving)).violations


# --- the scheduler's extended-resource-claim marker ----------------------------------------------------


def marked(kind: str) -> dict:
    obj = rct("extended", exactly("gpu.nvidia.com"))
    annotations = {EXTENDED_RESOURCE_CLAIM_ANNOTATION: EXTENDED_RESOURCE_CLAIM_VALUE}
    if kind == "ResourceClaim":
        obj["kind"] = kind
        obj["spec"] = obj["spec"]["spec"]
        obj["metadata"]["annotations"] = annotations
    else:
        obj["spec"]["metadata"] = {"annotations": annotations}
    return obj


def test_only_the_scheduler_may_mark_a_claim(policy):
    for kind, at in (
        ("ResourceClaim", "metadata.annotations"),
        ("ResourceClaimTemplate", "spec.metadata.annotations"),
    ):
        alice = report(
            policy, Request(marked(kind), namespace=NS, requester=Requester("alice", ("system:authenticated",)))
        )
        (v,) = alice.violations
        assert v.rule == "scheduler-claim-forged" and not alice.allowed
        assert v.path == f"{at}[{EXTENDED_RESOURCE_CLAIM_ANNOTATION}]" and "'alice'" in v.message
        offline = report(policy, Request(marked(kind), namespace=NS))  # check: a manifest is a user's
        assert [x.rule for x in offline.violations] == ["scheduler-claim-forged"]
        scheduler = report(policy, Request(marked(kind), namespace=NS, requester=Requester(SCHEDULER_USERNAME)))
        assert scheduler.violations == () and scheduler.relevant
        # a group name is not the scheduler's identity
        group = report(
            policy, Request(marked(kind), namespace=NS, requester=Requester("mallory", (SCHEDULER_USERNAME,)))
        )
        assert group.violations


def test_an_update_that_adds_the_marker_is_denied_and_one_that_keeps_it_is_not(policy):
    plain = rct("extended", exactly("gpu.nvidia.com"))
    plain["kind"] = "ResourceClaim"
    plain["spec"] = plain["spec"]["spec"]
    alice = Requester("alice")
    added = report(
        policy, Request(marked("ResourceClaim"), operation="UPDATE", old_object=plain, namespace=NS, requester=alice)
    )
    assert [v.rule for v in added.violations] == ["scheduler-claim-forged"]
    kept = report(
        policy,
        Request(
            marked("ResourceClaim"),
            operation="UPDATE",
            old_object=marked("ResourceClaim"),
            namespace=NS,
            requester=Requester("system:serviceaccount:kube-system:resourceclaim-controller"),
        ),
    )
    assert kept.violations == ()


# --- consumable capacity ------------------------------------------------------------------------------

from webhook.engine.model.claims import ClaimResolver  # noqa: E402
from webhook.engine.model.cluster import Cluster  # noqa: E402
from webhook.quantity import GIB  # noqa: E402


def resource_slice(name: str, *, driver: str = "gpu.nvidia.com", policy: dict | None = None, value: str = "80Gi",
                   shared: bool = True, version: str = "v1") -> dict:  # fmt: skip
    capacity: dict = {"memory": {"value": value}}
    if policy is not None:
        capacity["memory"]["requestPolicy"] = policy
    device: dict = {"name": "gpu-0", "capacity": capacity}
    if shared:
        device["allowMultipleAllocations"] = True
    if version == "v1beta1":
        device = {"name": "gpu-0", "basic": {k: v for k, v in device.items() if k != "name"}}
    return {
        "apiVersion": f"resource.k8s.io/{version}",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {"driver": driver, "nodeName": "node-1", "pool": {"name": "node-1"}, "devices": [device]},
    }


RANGE = {"default": "8Gi", "validRange": {"min": "8Gi", "max": "80Gi", "step": "8Gi"}}  # dra-example-driver PR#236
VALUES = {"default": "10Gi", "validValues": ["10Gi", "20Gi", "40Gi"]}


def with_slices(*slices: dict, objs: tuple = ()) -> Cluster:
    base = cluster_of(*objs)
    return Cluster(
        claim_templates=base.claim_templates,
        claims=base.claims,
        device_classes=base.device_classes,
        resource_slices={s["metadata"]["name"]: s for s in slices},
        complete=True,
    )


def memory(size: str, name: str = "slice") -> dict:
    return rct(name, exactly("gpu.nvidia.com", capacity={"requests": {"memory": size}}))


def test_a_request_is_rounded_up_to_the_request_policy(policy):
    for slice_policy, asked, allocated in ((RANGE, "20Gi", 24), (RANGE, "1Gi", 8), (VALUES, "25Gi", 40),
                                           (VALUES, "10Gi", 10), (None, "20Gi", 20)):  # fmt: skip
        cluster = with_slices(resource_slice("s", policy=slice_policy))
        (request,) = ClaimResolver(policy, cluster, NS).requests(memory(asked)["spec"]["spec"])
        (ask,) = request.capacity
        assert ask.allocated == allocated * GIB and ask.devices == 1, (slice_policy, asked)
        assert request.memory == allocated * GIB  # what the counts and memory rules judge
        decision = explain(policy, Request(memory(asked), namespace=NS, cluster=cluster))
        assert decision.violations == ()
        if allocated * GIB != int(ask.requested):
            assert any(f"will be allocated as {allocated}Gi" in line for line in decision.explanation)
    # a device that is not shared is allocated whole; v1beta1 slices (device.basic) read the same
    whole = with_slices(resource_slice("s", shared=False, version="v1beta1"))
    (request,) = ClaimResolver(policy, whole, NS).requests(memory("20Gi")["spec"]["spec"])
    assert request.capacity[0].allocated == 80 * GIB


def test_a_request_no_device_can_satisfy_is_denied_with_the_largest_valid_value(policy):
    for slice_policy, asked, largest in ((RANGE, "100Gi", "80Gi"), (VALUES, "50Gi", "40Gi"), (None, "96Gi", "80Gi")):
        cluster = with_slices(resource_slice("a", policy=slice_policy), resource_slice("b", policy=slice_policy))
        decision = report(policy, Request(memory(asked), namespace=NS, cluster=cluster))
        (v,) = decision.violations
        assert v.rule == "claim-capacity-unsatisfiable" and not decision.allowed
        assert v.message.startswith(f"ask for at most {largest}:") and "2 device(s)" in v.message
        assert v.path == "spec.spec.devices.requests[0].exactly.capacity.requests[memory]"
    # the largest of several devices counts: one that fits is enough
    mixed = with_slices(resource_slice("a", policy=VALUES), resource_slice("b", policy=RANGE))
    assert report(policy, Request(memory("50Gi"), namespace=NS, cluster=mixed)).violations == ()
    # another driver's devices say nothing about this class
    other = with_slices(resource_slice("a", driver="gpu.amd.com", policy=VALUES))
    assert report(policy, Request(memory("50Gi"), namespace=NS, cluster=other)).violations == ()
    # no slices known: nothing to judge, nothing denied
    assert report(policy, Request(memory("500Gi"), namespace=NS)).violations == ()


def test_a_pod_naming_an_unsatisfiable_template_is_denied(policy):
    cluster = with_slices(resource_slice("a", policy=RANGE), objs=(memory("100Gi", "big"),))
    decision = run(policy, claim_pod("big"), cluster=cluster)
    found = [v for v in decision.violations if v.rule == "claim-capacity-unsatisfiable"]
    assert found and found[0].path == "spec.resourceClaims[0]" and "in big devices.requests[0]" in found[0].message


def test_the_waste_report_uses_what_the_device_really_allocates():
    from pathlib import Path

    from webhook.policy import load_policy

    dra = load_policy(Path("examples/dra-policy"))
    notebook = pod(intent("dev", gpu_memory="1Gi"), [container(limits={"cpu": "1", "memory": "2Gi"})])
    plain = run(dra, notebook)
    assert plain.waste is not None and plain.waste.device_bytes == 1 * GIB
    step = {"default": "2Gi", "validRange": {"min": "2Gi", "max": "24Gi", "step": "2Gi"}}
    cluster = with_slices(resource_slice("a10", policy=step, value="24Gi"))
    rounded = run(dra, notebook, cluster=cluster)
    assert rounded.waste is not None and rounded.waste.device_bytes == 2 * GIB
    assert "rounded up to 2Gi" in rounded.waste.device


# --- ComputeDomains -----------------------------------------------------------------------------------

from tests.engine.helpers import vcjob  # noqa: E402
from tests.engine.upstream_dra import COMPUTE_DOMAIN_API  # noqa: E402
from webhook.engine.model.claims import cluster_entry  # noqa: E402


def domain(name: str, num_nodes: int | None = None) -> dict:
    spec: dict = {"channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}}}
    if num_nodes is not None:
        spec["numNodes"] = num_nodes
    return {"apiVersion": COMPUTE_DOMAIN_API, "kind": "ComputeDomain", "metadata": {"name": name, "namespace": NS},
            "spec": spec}  # fmt: skip


def with_domains(*domains: dict, users: dict | None = None) -> Cluster:
    templates = {}
    for d in domains:
        _, key, tpl = cluster_entry(d)
        templates[key] = tpl
    return Cluster(
        claim_templates=templates,
        compute_domains={(NS, d["metadata"]["name"]): d for d in domains},
        domain_users=users or {},
        complete=True,
    )


def task(name: str, replicas: int, channel: str | None, gpus: int = 8) -> dict:
    spec: dict = {"restartPolicy": "OnFailure", "containers": [container(resources={"claims": [{"name": "imex"}]})]}
    if channel is None:
        spec["containers"] = [container()]
    else:
        spec["resourceClaims"] = [{"name": "imex", "resourceClaimTemplateName": channel}]
    meta = intent("training", gpus=gpus)
    return {"name": name, "replicas": replicas, "template": {"metadata": meta, "spec": spec}}


def gang(*tasks: dict, name: str = "train-nvl") -> dict:
    total = sum(t["replicas"] for t in tasks)
    return vcjob(name=name, min_available=total, tasks=list(tasks))


def cd_rules(decision) -> list[str]:
    return [v.rule for v in decision.violations if v.rule.startswith("compute-domain")]


def test_a_gang_on_one_compute_domain_is_admitted(policy):
    cluster = with_domains(domain("nvl-a", num_nodes=2))
    decision = run(policy, gang(task("master", 1, "nvl-a-channel"), task("worker", 1, "nvl-a-channel")),
                   training=True, cluster=cluster)  # fmt: skip
    assert cd_rules(decision) == [], [v.render() for v in decision.violations]


def test_pods_of_one_gang_naming_different_domains_or_none_are_denied(policy):
    cluster = with_domains(domain("nvl-a"), domain("nvl-b"))
    mixed = run(policy, gang(task("master", 1, "nvl-a-channel"), task("worker", 2, "nvl-b-channel")),
                training=True, cluster=cluster)  # fmt: skip
    (v,) = [v for v in mixed.violations if v.rule == "compute-domain-invalid"]
    assert "use ComputeDomain nvl-a's channel template (nvl-a-channel)" in v.message and "nvl-b" in v.message
    assert v.path == "spec.tasks[1].template.spec.resourceClaims[0]" and not mixed.allowed
    missing = run(policy, gang(task("master", 1, "nvl-a-channel"), task("worker", 2, None)),
                  training=True, cluster=cluster)  # fmt: skip
    (v,) = [v for v in missing.violations if v.rule == "compute-domain-invalid"]
    assert "holds GPUs but no channel" in v.message and v.path == "spec.tasks[1].template.spec.resourceClaims"


def test_two_gangs_do_not_share_a_domain(policy):
    cluster = with_domains(domain("nvl-a"), users={(NS, "nvl-a"): frozenset({"Job/other-run", "Job/train-nvl"})})
    decision = run(policy, gang(task("worker", 2, "nvl-a-channel")), training=True, cluster=cluster)
    (v,) = [v for v in decision.violations if v.rule == "compute-domain-invalid"]
    assert "also claimed by Job/other-run" in v.message and "train-nvl" not in v.message.split("claimed by")[1]
    # a LeaderWorkerSet makes one gang per group: replicas 2 would share the domain
    lws = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "serve-nvl"},
        "spec": {
            "replicas": 2,
            "leaderWorkerTemplate": {
                "size": 2,
                "workerTemplate": task("w", 1, "nvl-a-channel")["template"],
            },
        },
    }
    groups = run(policy, lws, training=True, cluster=with_domains(domain("nvl-a")))
    assert any("makes 2 gangs" in v.message for v in groups.violations if v.rule == "compute-domain-invalid")
    lws["spec"]["replicas"] = 1
    one = run(policy, lws, training=True, cluster=with_domains(domain("nvl-a")))
    assert cd_rules(one) == []


def test_the_gang_fits_the_pools_nvlink_domain(policy):

    text = (POLICIES / "default.yaml").read_text().replace(
        "      adoptAs: training", "      nvlinkDomainNodes: 2\n      adoptAs: training", 1
    )
    nvl = load_policy_texts([("default.yaml", text)])
    cluster = with_domains(domain("nvl-a"))
    fits = run(nvl, gang(task("worker", 2, "nvl-a-channel")), training=True, cluster=cluster)
    assert cd_rules(fits) == []
    big = run(nvl, gang(task("worker", 3, "nvl-a-channel")), training=True, cluster=cluster)
    (v,) = [v for v in big.violations if v.rule == "compute-domain-invalid"]
    assert v.message.startswith("ask for at most 16 GPUs in the gang: it needs 3 nodes of pool train-h100")


def test_num_nodes_that_does_not_match_the_gang_is_a_warning(policy):
    for num, warned in ((2, False), (4, True), (1, True)):
        cluster = with_domains(domain("nvl-a", num_nodes=num))
        decision = run(policy, gang(task("worker", 2, "nvl-a-channel")), training=True, cluster=cluster)
        found = [v for v in decision.violations if v.rule == "compute-domain-num-nodes"]
        assert bool(found) == warned, num
        if found:
            assert found[0].action.value == "warn" and "compute-domain-invalid" not in rules(decision)
            assert f"it says {num}" in found[0].message


# --- extended resources a DeviceClass maps, on a DRA cluster ------------------------------------------


def test_nvidia_gpu_counts_through_the_device_class_that_maps_it_on_a_dra_cluster(policy):
    from pathlib import Path

    from webhook.engine.model.devices import inspect_pod
    from webhook.policy import load_policy

    dra = load_policy(Path("examples/dra-policy"))
    raw = pod(None, [container(limits={"nvidia.com/gpu": "2"})])

    def held(pol, *classes):
        cluster = cluster_of(*classes)
        return inspect_pod(raw["spec"], gpu_prefixes=pol.gpu_prefixes, rdma=pol.rdma_resources,
                           claims=ClaimResolver(pol, cluster, NS))  # fmt: skip

    whole = device_class("gpu.nvidia.com", "gpu.nvidia.com", extendedResourceName="nvidia.com/gpu")
    found = held(dra, whole)
    assert found.gpu_families == {WHOLE} and found.effective_devices() == 2
    # served by the DRA driver through the class (placement: the DRA pools serving it, or a device plugin)
    assert found.mapped == {"nvidia.com/gpu": ("class", "gpu.nvidia.com", "gpu.nvidia.com", "whole")}
    shared = device_class("shared.example.com", "hami-core-gpu.project-hami.io", extendedResourceName="nvidia.com/gpu")
    assert held(dra, shared).gpu_families == {SHARED}  # what the cluster's class hands out, not the name
    # a policy that names no DRA pool keeps the device-plugin reading (the default policy, the corpus)
    assert held(policy, shared).gpu_families == {WHOLE} and held(policy, shared).mapped == {}


def test_the_policys_own_device_taints_are_known():

    text = (POLICIES / "default.yaml").read_text() + (
        "\n  deviceTaints:\n    example.com/reserved: {effect: NoSchedule}\n    example.com/info: {effect: None}\n"
    )
    custom = load_policy_texts([("default.yaml", text)])
    assert custom.device_taints["example.com/reserved"] == "NoSchedule"
    info = report(custom, Request(tolerating({"key": "example.com/info", "operator": "Exists"}), namespace=NS))
    assert info.violations == ()
    (v,) = report(
        custom, Request(tolerating({"key": "example.com/reserved", "operator": "Exists"}), namespace=NS)
    ).violations
    assert "example.com/reserved (NoSchedule" in v.message


def test_a_claim_in_an_unknown_namespace_gets_no_entitlement():
    custom = allowing_policy("pool")  # '*' on the training pool: everyone-else may tolerate anything
    assert report(custom, Request(tolerating(BLANKET), namespace=NS)).violations == ()
    unknown = Cluster(unknown_namespaces=frozenset({NS}))
    assert [v.rule for v in report(custom, Request(tolerating(BLANKET), namespace=NS, cluster=unknown)).violations] == [
        "device-taint-tolerated"
    ]


def test_hostile_claim_shapes_and_slices_never_raise(policy):
    slices = {
        "s": {"spec": {"driver": "gpu.nvidia.com", "devices": [
            {"capacity": {5: {"value": "x", "requestPolicy": {"validValues": "no"}}}},
            "junk",
            {"basic": []},
            {"allowMultipleAllocations": True, "capacity": {"memory": {
                "value": "8Gi", "requestPolicy": {"validRange": {"min": [], "step": "-1", "max": {}}},
            }}},
        ]}},
        "t": {"spec": "x"},
        "u": [],
    }  # fmt: skip
    odd = {"exactly": {"deviceClassName": "gpu.nvidia.com", "tolerations": "x", "capacity": {"requests": {5: "1Gi"}}}}
    claims = [
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"annotations": ["x"]},
         "spec": {"devices": {"requests": "x"}}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": [],
         "spec": {"devices": {"requests": [odd, {"firstAvailable": "x"},
                                           {"firstAvailable": [1, {"deviceClassName": 3, "tolerations": [1]}]}]}}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "spec": "x"},
    ]  # fmt: skip
    cluster = Cluster(resource_slices=slices)
    for obj in claims:
        decision = report(policy, Request(obj, cluster=cluster, operation="UPDATE", old_object=claims[0]))
        assert decision.violations == ()
    # a readable device still judges: 100Gi is more than the only readable card's 8Gi
    (v,) = report(policy, Request(memory("100Gi"), namespace=NS, cluster=cluster)).violations
    assert v.message.startswith("ask for at most 8Gi") and "1 device(s)" in v.message

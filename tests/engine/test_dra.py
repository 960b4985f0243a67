"""DRA recognition: claims and DeviceClass-mapped resources become devices every rule judges.

The corpus's DRA manifests are read in place; each file's ResourceClaimTemplates, DeviceClasses and
ComputeDomains form the cluster view its pods are judged with, as ``check`` does with its inputs.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from tests.conftest import CORPUS, POLICIES, need_shared
from tests.engine.helpers import container, intent, pod, rules, run, vcjob, violation
from webhook.engine import Request, report
from webhook.engine.model.claims import ClaimResolver, cluster_entry
from webhook.engine.model.cluster import Cluster
from webhook.engine.model.devices import MIG, SHARED, UNRESOLVED, WHOLE, inspect_pod
from webhook.engine.model.workload import classify, templates

NS = "team-a"


def rct(name: str, *requests: dict, ns: str = NS, version: str = "v1", config: list | None = None) -> dict:
    devices: dict = {"requests": list(requests)}
    if config is not None:
        devices["config"] = config
    return {
        "apiVersion": f"resource.k8s.io/{version}",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"spec": {"devices": devices}},
    }


def exactly(cls: str, name: str = "gpu", **fields) -> dict:
    return {"name": name, "exactly": {"deviceClassName": cls, **fields}}


def cluster_of(*objs: dict, complete: bool = False) -> Cluster:
    maps: dict = {"claim_templates": {}, "claims": {}, "device_classes": {}}
    for obj in objs:
        entry = cluster_entry(obj)
        assert entry is not None, obj
        maps[entry[0]][entry[1]] = entry[2]
    return Cluster(**maps, complete=complete)


def claim_pod(*templates: str, meta: dict | None = None, containers: list | None = None, **spec) -> dict:
    claims = [{"name": f"c{i}", "resourceClaimTemplateName": t} for i, t in enumerate(templates)]
    ctrs = containers or [container(resources={"claims": [{"name": c["name"]} for c in claims]})]
    return pod(meta, ctrs, resourceClaims=claims, **spec)


def devices(policy, obj: dict, cluster: Cluster):
    spec = obj["spec"]
    return inspect_pod(
        spec,
        gpu_prefixes=policy.gpu_prefixes,
        rdma=policy.rdma_resources,
        claims=ClaimResolver(policy, cluster, NS),
    )


# --- the corpus ------------------------------------------------------------------------------------

DRA_FILES = {
    # file -> {workload name: [(families, devices) per pod template]}
    "k8s-dra-driver-gpu/gpu-test2.yaml": {"pod": [({WHOLE}, 1)]},
    "k8s-dra-driver-gpu/v1beta1-gpu-test1.yaml": {"pod1": [({WHOLE}, 1)], "pod2": [({WHOLE}, 1)]},
    "k8s-dra-driver-gpu/mig-1g-12gb.yaml": {"mig-1g12gb-pod": [({MIG}, 1)]},
    # an MPIJob: the launcher holds nothing, each worker 2 device-plugin GPUs and an IMEX channel claim
    # (a ComputeDomain in the file stands for its channel template: resolved, and not a GPU)
    "k8s-dra-driver-gpu/nvbandwidth-test-job-1.yaml": {"nvbandwidth-test-1": [(set(), 0), ({WHOLE}, 2)]},
    "kueue/sample-dra-counter-job.yaml": {None: [({UNRESOLVED}, 0)]},
    "kai-scheduler/gpu-imex-pod.yaml": {"gpu-imex-pod": [({WHOLE}, 1)]},
    # a JobSet whose template (gpu-claim-template) the file does not include: a GPU pod nobody can size
    "jobset/dra-jobset.yaml": {"training-job": [({UNRESOLVED}, 0)]},
}
"""Every DRA manifest of the corpus (``test_every_dra_manifest_of_the_corpus_is_listed`` keeps it so)."""


def _documents(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]


@pytest.mark.parametrize("name", sorted(DRA_FILES))
def test_corpus_dra_pods_are_recognised_with_their_devices(policy, name):
    path = need_shared(CORPUS / name)
    docs = _documents(path)
    context = [d for d in docs if cluster_entry(d) is not None]
    cluster = cluster_of(*context)
    found = {}
    for doc in docs:
        decision = report(policy, Request(doc, cluster=cluster))
        kind = classify(doc, policy)
        if kind is None or cluster_entry(doc) is not None:
            # cluster context, not a workload: a GPU claim object is judged on its own (what it gives a
            # pod), and the corpus's ordinary templates give nothing the default policy refuses
            assert not decision.relevant or not decision.violations, f"{name}: {doc['kind']} {decision.violations}"
            continue
        assert decision.relevant, f"{name}: {doc['kind']} not recognised as a GPU workload"
        ns = doc["metadata"].get("namespace", "default")
        pods = []
        for tpl in templates(doc, kind):
            pod_devices = inspect_pod(
                tpl.spec,
                gpu_prefixes=policy.gpu_prefixes,
                rdma=policy.rdma_resources,
                claims=ClaimResolver(policy, cluster, ns),
            )
            pods.append((set(pod_devices.gpu_families), pod_devices.effective_devices()))
        found[doc["metadata"].get("name")] = pods
    assert found == DRA_FILES[name]


def test_every_dra_manifest_of_the_corpus_is_listed():
    """A DRA manifest added to the corpus must be added to the recognition test above."""
    corpus = need_shared(CORPUS)
    dra = {
        str(p.relative_to(corpus))
        for p in corpus.rglob("*.yaml")
        if "resourceClaims" in p.read_text(errors="replace") or "resource.k8s.io/" in p.read_text(errors="replace")
    }
    assert dra == set(DRA_FILES)


def test_corpus_dra_kinds_cover_v1_and_v1beta1_and_device_classes():
    """The recognition test above reads both API versions and a DeviceClass: keep it that way."""
    seen = set()
    for name in DRA_FILES:
        for doc in _documents(need_shared(CORPUS / name)):
            if doc.get("apiVersion", "").startswith("resource.k8s.io/"):
                seen.add((doc["apiVersion"], doc["kind"]))
    assert {
        ("resource.k8s.io/v1", "ResourceClaimTemplate"),
        ("resource.k8s.io/v1beta1", "ResourceClaimTemplate"),
        ("resource.k8s.io/v1", "DeviceClass"),
    } <= seen


def test_without_the_template_the_corpus_pod_is_claim_unresolved_and_still_a_gpu_pod(policy):
    docs = _documents(need_shared(CORPUS / "k8s-dra-driver-gpu/gpu-test2.yaml"))
    pod_doc = next(d for d in docs if d["kind"] == "Pod")
    decision = report(policy, Request(pod_doc))
    assert decision.relevant
    v = violation(decision, "claim-unresolved")
    assert v.path == "spec.resourceClaims[0]"
    assert "create ResourceClaimTemplate single-gpu in gpu-test2 first" in v.message
    assert len(v.render()) <= 160 and len(v.message) <= 120


# --- the catalogue ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cls, family",
    [
        ("gpu.nvidia.com", WHOLE),
        ("mig.nvidia.com", MIG),
        ("mig-1g-5gb.gpu.nvidia.com", MIG),
        ("gpu.amd.com", WHOLE),
        ("hami-core-gpu.project-hami.io", SHARED),
        ("unknown.example.com", UNRESOLVED),
    ],
)
def test_builtin_device_classes(policy, cls, family):
    cluster = cluster_of(rct("t", exactly(cls)))
    assert devices(policy, claim_pod("t"), cluster).gpu_families == {family}


def test_a_per_profile_class_is_sized_by_its_profile(policy):
    cluster = cluster_of(rct("t", exactly("mig-2g-10gb.gpu.nvidia.com")))
    claim = devices(policy, claim_pod("t"), cluster).claims[0]
    assert claim.requests[0].profiles == ("2g.10gb",)
    assert claim.requests[0].memory == 10 * 2**30


def test_imex_channels_are_recognised_and_not_gpus(policy):
    cluster = cluster_of(rct("ch", exactly("compute-domain-default-channel.nvidia.com")))
    pd = devices(policy, claim_pod("ch"), cluster)
    assert not pd.has_gpu and pd.claims[0].unresolved is None
    assert not report(policy, Request(claim_pod("ch"), cluster=cluster, namespace=NS)).relevant


def test_the_policy_overrides_and_extends_the_catalogue():
    from webhook.policy import load_policy_texts

    text = (POLICIES / "default.yaml").read_text() + (
        "\n  deviceClasses:\n"
        "    gpu.example.com: {kind: whole, driver: gpu.example.com}\n"
        "    gpu.amd.com: {kind: shared}\n"
        "    '*.accel.example.com': {kind: mig}\n"
    )
    policy = load_policy_texts([("default.yaml", text)])
    for cls, family in (("gpu.example.com", WHOLE), ("gpu.amd.com", SHARED), ("x.accel.example.com", MIG)):
        cluster = cluster_of(rct("t", exactly(cls)))
        assert devices(policy, claim_pod("t"), cluster).gpu_families == {family}, cls


def test_a_cluster_device_class_is_recognised_by_its_driver(policy):
    mig_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "small-mig.platform.example"},
        "spec": {
            "selectors": [
                {
                    "cel": {
                        "expression": "device.driver == 'gpu.nvidia.com' && "
                        "device.attributes['gpu.nvidia.com'].type == 'mig'"
                    }
                }
            ]
        },
    }
    nic = copy.deepcopy(mig_class)
    nic["metadata"]["name"] = "nic.example.com"
    nic["spec"]["selectors"][0]["cel"]["expression"] = "device.driver == 'sriov.example.com'"
    vague = copy.deepcopy(mig_class)
    vague["metadata"]["name"] = "vague.example.com"
    vague["spec"]["selectors"][0]["cel"]["expression"] = "device.attributes['example.com'].kind == 'x'"
    cluster = cluster_of(
        mig_class,
        nic,
        vague,
        rct("t", exactly("small-mig.platform.example")),
        rct("n", exactly("nic.example.com")),
        rct("v", exactly("vague.example.com")),
    )
    assert devices(policy, claim_pod("t"), cluster).gpu_families == {MIG}
    assert devices(policy, claim_pod("n"), cluster).gpu_families == set()  # a known class of a NIC driver
    assert devices(policy, claim_pod("v"), cluster).gpu_families == {UNRESOLVED}  # no driver to read: cannot tell


def test_extended_resources_mapped_by_a_device_class_count(policy):
    mapped = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "gpu.example.com"},
        "spec": {"extendedResourceName": "example.com/gpu"},
    }
    from webhook.policy import load_policy_texts

    text = (POLICIES / "default.yaml").read_text() + "\n  deviceClasses:\n    gpu.example.com: {kind: whole}\n"
    custom = load_policy_texts([("default.yaml", text)])
    cluster = cluster_of(mapped)
    asks = pod(None, [container(limits={"example.com/gpu": "3"})])
    pd = devices(custom, asks, cluster)
    assert pd.gpu_families == {WHOLE} and pd.effective_devices() == 3
    implicit = pod(None, [container(limits={"deviceclass.resource.kubernetes.io/mig.nvidia.com": "1"})])
    assert devices(policy, implicit, Cluster()).gpu_families == {MIG}
    assert not report(policy, Request(asks, namespace=NS)).relevant  # without the DeviceClass: not a GPU resource
    assert report(custom, Request(asks, namespace=NS, cluster=cluster)).relevant


# --- claims: count, memory, sharing, firstAvailable ------------------------------------------------


def test_count_memory_and_sharing_come_from_the_claim(policy):
    cluster = cluster_of(
        rct("four", exactly("gpu.nvidia.com", allocationMode="ExactCount", count=4)),
        rct("slice", exactly("gpu.nvidia.com", capacity={"requests": {"memory": "4Gi"}})),
        rct(
            "cel",
            exactly(
                "gpu.nvidia.com",
                selectors=[
                    {"cel": {"expression": "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0"}}
                ],
            ),
        ),
        rct(
            "mps",
            exactly("gpu.nvidia.com"),
            config=[
                {
                    "requests": ["gpu"],
                    "opaque": {
                        "driver": "gpu.nvidia.com",
                        "parameters": {
                            "apiVersion": "resource.nvidia.com/v1beta1",
                            "kind": "GpuConfig",
                            "sharing": {"strategy": "MPS"},
                        },
                    },
                }
            ],
        ),
    )
    four = devices(policy, claim_pod("four"), cluster)
    assert four.effective_devices() == 4 and four.gpu_families == {WHOLE}
    sliced = devices(policy, claim_pod("slice"), cluster)
    assert sliced.gpu_families == {SHARED} and sliced.claim_memory == 4 * 2**30
    cel = devices(policy, claim_pod("cel"), cluster)
    assert cel.gpu_families == {WHOLE} and cel.claim_memory == 40 * 2**30
    assert devices(policy, claim_pod("mps"), cluster).claims[0].sharing == "MPS"
    both = devices(policy, claim_pod("four", "slice"), cluster)
    assert both.effective_devices() == 5  # claims of one pod add up


FIRST_AVAILABLE = rct(
    "mig-or-gpu",
    {
        "name": "accel",
        "firstAvailable": [
            {
                "name": "mig",
                "deviceClassName": "mig.nvidia.com",
                "selectors": [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].profile == '3g.20gb'"}}],
            },
            {"name": "whole", "deviceClassName": "gpu.nvidia.com", "count": 2},
        ],
    },
)


def test_first_available_is_judged_by_its_worst_case(policy):
    cluster = cluster_of(FIRST_AVAILABLE)
    pd = devices(policy, claim_pod("mig-or-gpu"), cluster)
    assert pd.gpu_families == {MIG, WHOLE}
    assert pd.effective_devices() == 2  # the larger alternative
    assert pd.claim_memory == 20 * 2**30
    # the MIG alternative makes it a sliced-card pod: privileged is denied although a whole GPU may come
    privileged = claim_pod(
        "mig-or-gpu",
        containers=[container(resources={"claims": [{"name": "c0"}]}, securityContext={"privileged": True})],
    )
    assert "privileged-gpu" in rules(run(policy, privileged, cluster=cluster))


def test_first_available_counts_against_the_class_maximum(policy):
    cluster = cluster_of(FIRST_AVAILABLE)
    batch = claim_pod("mig-or-gpu", meta=intent("batch"))  # batch: maxGPUs 1
    v = violation(run(policy, batch, cluster=cluster), "gpu-count-exceeded")
    # the class's own MIG slice (1) plus the claim's larger alternative (2 whole GPUs)
    assert "3 GPUs per pod exceed class 'batch'" in v.message


# --- every rule on DRA pods ------------------------------------------------------------------------

MIG_CLUSTER = cluster_of(
    rct(
        "mig-small",
        exactly(
            "mig.nvidia.com",
            selectors=[{"cel": {"expression": "device.attributes['gpu.nvidia.com'].profile == '1g.5gb'"}}],
        ),
    )
)


def test_privileged_container_next_to_a_claimed_mig_device_is_denied(policy):
    obj = claim_pod(
        "mig-small",
        containers=[
            container(resources={"claims": [{"name": "c0"}]}),
            container("debug", securityContext={"privileged": True}),
        ],
    )
    v = violation(run(policy, obj, cluster=MIG_CLUSTER), "privileged-gpu")
    assert v.path == "spec.containers[1].securityContext.privileged"


def test_an_unresolved_claim_is_judged_as_a_slice_for_privileged_gpu(policy):
    obj = claim_pod("nobody-knows", containers=[container(securityContext={"privileged": True})])
    got = rules(run(policy, obj))
    assert "privileged-gpu" in got and "claim-unresolved" in got


def test_node_name_on_a_dra_pod_is_denied(policy):
    obj = claim_pod("mig-small", nodeName="gpu-node-3")
    assert violation(run(policy, obj, cluster=MIG_CLUSTER), "node-name-set").path == "spec.nodeName"
    assert "node-name-set" in rules(run(policy, claim_pod("unknown-template", nodeName="n1")))


def test_a_dra_pod_selecting_a_pool_it_is_not_entitled_to_is_denied(policy):
    # a serving-only namespace is not entitled to training (train-h100, workload=gpu-train)
    obj = claim_pod("mig-small", nodeSelector={"workload": "gpu-train"})
    serving = {"gpu-admission.io/tier": "serving"}
    assert "pool-spoofing" in rules(run(policy, obj, cluster=MIG_CLUSTER, labels=serving))


def test_claimed_gpus_count_against_the_class_and_the_pool(policy):
    cluster = cluster_of(rct("four", exactly("gpu.nvidia.com", count=4)))
    infer = claim_pod("four", meta=intent("inference", isolation="exclusive"))  # inference: maxGPUs 2
    assert "gpu-count-exceeded" in rules(run(policy, infer, cluster=cluster))
    every = cluster_of(rct("all", exactly("gpu.nvidia.com", allocationMode="All")))
    v = violation(
        run(policy, claim_pod("all", meta=intent("inference", isolation="exclusive")), cluster=every),
        "gpu-count-exceeded",
    )
    assert "allocationMode All" in v.message


def test_claimed_memory_counts_against_the_class_maximum(policy):
    cluster = cluster_of(rct("big", exactly("gpu.nvidia.com", capacity={"requests": {"memory": "32Gi"}})))
    dev = claim_pod("big", meta=intent("dev"))  # dev: maxGPUMemory 24Gi
    v = violation(run(policy, dev, cluster=cluster), "gpu-memory-exceeded")
    assert "32 GiB" in v.message or "32Gi" in v.message


def test_a_pod_mixing_a_device_plugin_gpu_and_a_claim_counts_both(policy):
    cluster = cluster_of(rct("one", exactly("gpu.nvidia.com")))
    obj = claim_pod(
        "one",
        containers=[container(limits={"nvidia.com/gpu": "8"}, resources={"claims": [{"name": "c0"}]})],
        nodeSelector={"workload": "gpu-train"},
        tolerations=[{"key": "workload", "operator": "Equal", "value": "gpu-train", "effect": "NoSchedule"}],
    )
    obj["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "8"}
    pd = devices(policy, obj, cluster)
    assert pd.effective_devices() == 9 and pd.gpu_families == {WHOLE}
    decision = run(policy, obj, cluster=cluster, training=True)
    v = violation(decision, "gpu-count-exceeded")
    assert "9 GPUs per pod" in v.message


# --- shared ResourceClaims and what each container gets --------------------------------------------


def resource_claim(name: str, *requests: dict, ns: str = NS) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"devices": {"requests": list(requests)}},
    }


def test_a_shared_resource_claim_resolves_and_counts_once_per_pod(policy):
    # two pods (or two containers) naming one ResourceClaim share its devices (time-slicing/MPS in the
    # NVIDIA driver): the pod holds the claim's 2 GPUs, not 2 per container
    cluster = cluster_of(resource_claim("shared-pair", exactly("gpu.nvidia.com", count=2)))
    entry = [{"name": "pair", "resourceClaimName": "shared-pair"}]
    ctrs = [
        container("a", resources={"claims": [{"name": "pair"}]}),
        container("b", resources={"claims": [{"name": "pair"}]}),
    ]
    pd = devices(policy, pod(None, ctrs, resourceClaims=entry), cluster)
    assert pd.gpu_families == {WHOLE} and pd.effective_devices() == 2
    a, b = pd.containers
    assert pd.claim_devices_of(a) == pd.claim_devices_of(b) == 2
    assert pd.claim_families_of(a) == {WHOLE}
    missing = devices(policy, pod(None, ctrs, resourceClaims=entry), Cluster())
    assert missing.claims[0].unresolved == "ResourceClaim shared-pair not found"
    v = violation(run(policy, pod(None, ctrs, resourceClaims=entry)), "claim-unresolved")
    assert "create ResourceClaim shared-pair in team-a first" in v.message


def test_each_container_gets_the_requests_it_names(policy):
    cluster = cluster_of(
        rct(
            "mixed",
            exactly("gpu.nvidia.com", name="big", count=2),
            exactly("gpu.nvidia.com", name="slice", capacity={"requests": {"memory": "8Gi"}}),
            FIRST_AVAILABLE["spec"]["spec"]["devices"]["requests"][0],
        )
    )
    ctrs = [
        container("trainer", resources={"claims": [{"name": "c0", "request": "big"}]}),
        container("helper", resources={"claims": [{"name": "c0", "request": "slice"}]}),
        container("either", resources={"claims": [{"name": "c0", "request": "accel"}]}),
        container("all", resources={"claims": [{"name": "c0"}]}),
        container("none"),
    ]
    pd = devices(policy, claim_pod("mixed", containers=ctrs), cluster)
    trainer, helper, either, every, none = pd.containers
    assert pd.claim_devices_of(trainer) == 2 and pd.claim_families_of(trainer) == {WHOLE}
    assert pd.claim_families_of(helper) == {SHARED} and pd.claim_memory_of(helper) == 8 * 2**30
    # firstAvailable: the worst case of a MIG 3g.20gb and two whole GPUs
    assert pd.claim_devices_of(either) == 2 and pd.claim_families_of(either) == {MIG, WHOLE}
    assert pd.claim_memory_of(either) == 20 * 2**30
    assert pd.claim_devices_of(every) == 5 and pd.claim_families_of(every) == {WHOLE, SHARED, MIG}
    assert pd.claim_devices_of(none) == 0 and pd.claim_families_of(none) == frozenset()
    assert pd.effective_devices() == 5  # one claim, allocated once, whoever uses which request


# --- gangs and the waste report read claims too ------------------------------------------------------


def test_claimed_gpus_count_in_the_gang_capacity(policy):
    # 20 training pods x (4 by intent + 4 by claim) = 160 GPUs > train-h100's 16 nodes x 8
    cluster = cluster_of(rct("four", exactly("gpu.nvidia.com", count=4)))
    obj = vcjob(intent("training", gpus=4), replicas=20, min_available=20)
    spec = obj["spec"]["tasks"][0]["template"]["spec"]
    spec["resourceClaims"] = [{"name": "extra", "resourceClaimTemplateName": "four"}]
    spec["containers"][0]["resources"] = {"claims": [{"name": "extra"}]}
    got = run(policy, obj, cluster=cluster, training=True)
    assert "gang-unschedulable" in rules(got)
    spec.pop("resourceClaims")
    spec["containers"][0].pop("resources")
    assert "gang-unschedulable" not in rules(run(policy, obj, cluster=cluster, training=True))  # 10 nodes


def test_the_waste_report_counts_the_translated_claim():
    from webhook.policy import load_policy

    example = load_policy(Path(__file__).resolve().parents[2] / "examples" / "dra-policy")
    d = run(example, pod(intent("inference", isolation="exclusive", gpus=2)))
    assert d.waste is not None and d.waste.devices == 2

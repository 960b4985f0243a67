"""``privileged-gpu`` over every container kind and every trigger, read as an attacker who may create
Pods in one namespace (issue 11 item 5).

Default policy: ``infer-a100`` is MIG-partitioned and ``dev-cgpu`` shared by memory (both "sliced"),
``train-h100`` serves whole GPUs. The admission path is the apiserver's: ``/mutate``, our patch applied
with jsonpatch, then ``/validate`` on the stored object (``admit`` of test_reach_attacks)."""

from __future__ import annotations

import copy

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import POLICIES
from tests.engine.helpers import container, intent, pod, rules, violation
from tests.engine.test_reach_attacks import BLANKET, TRAIN_TAINTS, admit
from tests.engine.test_reach_model import node
from webhook.engine import Request, Stage, report
from webhook.engine.model.cluster import Cluster
from webhook.engine.model.device_reach import container_triggers, dev_volumes, has_trigger, reaches_dev, triggers

MIG_POD = intent("inference", gpu_memory="4Gi")
DEV = [{"name": "dev", "hostPath": {"path": "/dev"}}]


def _all_pools_policy():
    from webhook.policy import load_policy_texts

    doc = yaml.safe_load((POLICIES / "default.yaml").read_text())
    doc["spec"]["settings"]["privilegedGPUPools"] = "all"
    return load_policy_texts([("default.yaml", yaml.safe_dump(doc))])


@pytest.fixture(scope="module")
def all_pools():
    return _all_pools_policy()


# --- every trigger in every container kind ---------------------------------------------------------------

TRIGGERS = {
    "privileged": ({"securityContext": {"privileged": True}}, (), "securityContext.privileged"),
    "SYS_ADMIN": (
        {"securityContext": {"capabilities": {"add": ["NET_RAW", "SYS_ADMIN"]}}},
        (),
        "securityContext.capabilities.add[1]",
    ),
    "ALL": ({"securityContext": {"capabilities": {"add": ["ALL"]}}}, (), "securityContext.capabilities.add[0]"),
    "hostPath mount": ({"volumeMounts": [{"name": "dev", "mountPath": "/host/dev"}]}, DEV, "volumeMounts[0]"),
    "hostPath block device": ({"volumeDevices": [{"name": "dev", "devicePath": "/dev/xvda"}]}, DEV, "volumeDevices[0]"),
    "NVIDIA_VISIBLE_DEVICES": (
        {"env": [{"name": "A", "value": "1"}, {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]},
        (),
        "env[1]",
    ),
    "NVIDIA_DRIVER_CAPABILITIES": (
        {"env": [{"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"}]},
        (),
        "env[0]",
    ),
    "valueFrom": (
        {
            "env": [
                {
                    "name": "NVIDIA_VISIBLE_DEVICES",
                    "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['d']"}},
                }
            ]
        },
        (),
        "env[0]",
    ),
    "envFrom unprefixed": ({"envFrom": [{"configMapRef": {"name": "gpu-env"}}]}, (), "envFrom[0]"),
    "envFrom NVIDIA_ prefix": (
        {
            "envFrom": [
                {"prefix": "APP_", "secretRef": {"name": "a"}},
                {"prefix": "NVIDIA_", "secretRef": {"name": "b"}},
            ]
        },
        (),
        "envFrom[1]",
    ),
}

KINDS = {
    "container": lambda c: {"containers": [container(), container("side", **c)]},
    "init container": lambda c: {"containers": [container()], "initContainers": [container("side", **c)]},
    "sidecar container": lambda c: {
        "containers": [container()],
        "initContainers": [container("side", restartPolicy="Always", **c)],
    },
    "ephemeral container": lambda c: {
        "containers": [container()],
        "ephemeralContainers": [{"name": "side", "image": "busybox", **c}],
    },
}
GROUP = {"container": "containers[1]", "init container": "initContainers[0]", "sidecar container": "initContainers[0]"}


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("trigger", sorted(TRIGGERS))
def test_every_trigger_in_every_container_kind_of_a_mig_pod(policy, kind, trigger):
    fields, volumes, where = TRIGGERS[trigger]
    spec = KINDS[kind](copy.deepcopy(fields))
    if volumes:
        spec["volumes"] = copy.deepcopy(list(volumes))
    containers = spec.pop("containers")
    d, _ = admit(policy, pod(MIG_POD, containers, **spec))
    v = violation(d, "privileged-gpu")
    assert not d.allowed
    assert v.path == f"spec.{GROUP.get(kind, 'ephemeralContainers[0]')}.{where}", v.path
    assert v.message.startswith(f"{kind} 'side' ") and "on pool infer-a100" in v.message, v.message
    assert "; " in v.message  # what; how to fix


def test_the_message_says_what_where_and_how_to_fix(policy):
    c = container(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])
    d, _ = admit(policy, pod(MIG_POD, [c]))
    v = violation(d, "privileged-gpu")
    assert v.message == (
        "container 'main' sets NVIDIA_VISIBLE_DEVICES=all in a pod holding GPUs on pool infer-a100, whose cards "
        "are sliced: it would see every GPU on the node, not only the pod's grant; set it to none or remove it "
        "(the device plugin sets what the container was given)"
    )
    assert v.path == "spec.containers[0].env[0]"


def test_every_trigger_of_a_container_is_listed(policy):
    c = container(
        securityContext={"privileged": True, "capabilities": {"add": ["SYS_ADMIN"]}},
        env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
        volumeMounts=[{"name": "dev", "mountPath": "/d"}],
    )
    d, _ = admit(policy, pod(MIG_POD, [c], volumes=copy.deepcopy(DEV)))
    paths = sorted(v.path for v in d.violations if v.rule == "privileged-gpu")
    assert paths == [
        "spec.containers[0].env[0]",
        "spec.containers[0].securityContext.capabilities.add[0]",
        "spec.containers[0].securityContext.privileged",
        "spec.containers[0].volumeMounts[0]",
    ]


# --- spellings the runtime accepts, paths the kubelet resolves --------------------------------------------


@pytest.mark.parametrize(
    "cap", ["SYS_ADMIN", "CAP_SYS_ADMIN", "sys_admin", "cap_sys_admin", "Cap_Sys_Admin", "ALL", "all", "CAP_ALL"]
)
def test_capability_spellings(policy, cap):
    c = container(securityContext={"capabilities": {"add": [cap]}})
    d, _ = admit(policy, pod(MIG_POD, [c]))
    assert cap in violation(d, "privileged-gpu").message


@pytest.mark.parametrize("cap", ["IPC_LOCK", "NET_ADMIN", "SYS_ADMINS", "SYS_PTRACE"])
def test_other_capabilities_are_not_device_reach(policy, cap):
    c = container(securityContext={"capabilities": {"add": [cap], "drop": ["ALL", "SYS_ADMIN"]}})
    d, _ = admit(policy, pod(MIG_POD, [c]))
    assert "privileged-gpu" not in rules(d), [v.render() for v in d.violations]


@pytest.mark.parametrize(
    "path",
    [
        "/dev",
        "/dev/",
        "//dev",
        "///dev//",
        "/dev/../dev/nvidia0",
        "/dev/nvidia0/",
        "/dev/shm",
        "/",
        "//",
        "dev",
        "/var/../dev",
        "/dev/..",
    ],
)
def test_host_paths_that_reach_dev(policy, path):
    assert reaches_dev(path)
    c = container(volumeMounts=[{"name": "host", "mountPath": "/host"}])
    d, _ = admit(policy, pod(MIG_POD, [c], volumes=[{"name": "host", "hostPath": {"path": path}}]))
    assert violation(d, "privileged-gpu").path == "spec.containers[0].volumeMounts[0]"


HOST_DEVICES_ELSEWHERE = [
    "/proc/1/root/dev",
    "/proc/1/root",
    "/proc/1/root/",
    "/proc/self/root",
    "/proc/self/root/dev/nvidia0",
    "/proc",
    "/proc/",
    "//proc//1/root",
    "/./proc/./1/root/./dev",
    "/var/../proc/1/root",
    "proc/1/root",
    "/sys",
    "/sys/",
    "/sys/bus/pci/devices",
    "//sys/bus/pci/devices/0000:3b:00.0/resource0",
]


@pytest.mark.parametrize("path", HOST_DEVICES_ELSEWHERE)
def test_host_paths_that_reach_the_host_devices_through_proc_or_sys(policy, path):
    """``/proc/1/root`` (or ``/proc/self/root``, resolved by the kubelet on the host) is the host's root,
    so ``/proc/1/root/dev`` is the host's /dev; ``/sys`` maps a GPU's PCI memory (``resource0``) with no
    device node at all. Each passed the /dev test before, however it was spelled."""
    assert reaches_dev(path)
    c = container(volumeMounts=[{"name": "host", "mountPath": "/host"}])
    d, _ = admit(policy, pod(MIG_POD, [c], volumes=[{"name": "host", "hostPath": {"path": path}}]))
    assert violation(d, "privileged-gpu").path == "spec.containers[0].volumeMounts[0]"
    assert "reaches the host's devices" in violation(d, "privileged-gpu").message


@pytest.mark.parametrize("path", ["/procfs", "/system", "/var/proc", "/home/sys", "/proc-data", "/sysroot"])
def test_names_that_only_begin_like_proc_or_sys_are_not_device_reach(policy, path):
    assert not reaches_dev(path)


@pytest.mark.parametrize(
    "path", ["/devices", "/var/dev", "/dev/../etc", "/home/dev", "/var/lib/kubelet/device-plugins"]
)
def test_host_paths_that_do_not_reach_dev(policy, path):
    assert not reaches_dev(path)
    c = container(volumeMounts=[{"name": "host", "mountPath": "/host"}])
    d, _ = admit(policy, pod(MIG_POD, [c], volumes=[{"name": "host", "hostPath": {"path": path}}]))
    assert "privileged-gpu" not in rules(d)


def test_a_dev_volume_counts_only_for_the_containers_that_use_it(policy):
    users = container("user", volumeMounts=[{"name": "dev", "mountPath": "/d"}])
    d, _ = admit(policy, pod(MIG_POD, [container(), users], volumes=copy.deepcopy(DEV)))
    assert [v.path for v in d.violations if v.rule == "privileged-gpu"] == ["spec.containers[1].volumeMounts[0]"]
    d, _ = admit(policy, pod(MIG_POD, [container()], volumes=copy.deepcopy(DEV)))
    assert "privileged-gpu" not in rules(d), "a volume no container mounts reaches nothing"


# --- the environment the kubelet builds ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "env_from", "denied"),
    [
        ([{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}], None, False),
        ([{"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "void"}], None, False),
        (
            [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}, {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}],
            None,
            False,
        ),
        (
            [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}, {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
            None,
            True,
        ),
        ([{"name": "NVIDIA_VISIBLE_DEVICES", "value": ""}], None, True),
        ([{"name": "NVIDIA_VISIBLE_DEVICES", "value": "NONE"}], None, True),
        ([{"name": "NVIDIA_VISIBLE_DEVICES", "value": "$(OTHER)"}], None, True),
        ([{"name": "nvidia_visible_devices", "value": "all"}], None, False),
        (None, [{"prefix": "APP_", "configMapRef": {"name": "x"}}], False),
        (None, [{"prefix": "", "configMapRef": {"name": "x"}}], True),
        (None, [{"prefix": "NVIDIA_VISIBLE", "configMapRef": {"name": "x"}}], True),
        ([{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}], [{"secretRef": {"name": "x"}}], True),
        (
            [
                {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"},
                {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "none"},
            ],
            [{"secretRef": {"name": "x"}}],
            False,
        ),
    ],
)
def test_toolkit_environment_as_the_kubelet_builds_it(policy, env, env_from, denied):
    """env wins over envFrom and the last env entry of a name wins (the kubelet's order)."""
    extra = {}
    if env is not None:
        extra["env"] = env
    if env_from is not None:
        extra["envFrom"] = env_from
    d, _ = admit(policy, pod(MIG_POD, [container(**extra)]))
    assert ("privileged-gpu" in rules(d)) is denied, [v.render() for v in d.violations]


# --- which pods ------------------------------------------------------------------------------------------------


def test_whole_gpu_pod_on_the_training_pool_is_judged_too(policy):
    """A pod that holds GPUs is judged wherever it lands: privileged, it sees the node's other cards."""
    c = container(securityContext={"privileged": True})
    d, _ = admit(policy, pod(intent("training", gpus=4), [c]), labels={"gpu-admission.io/tier": "training"})
    v = violation(d, "privileged-gpu")
    assert "on pool train-h100" in v.message and "sliced" not in v.message


def test_raw_gpu_pod_with_a_privileged_init_container(policy):
    init = container("setup", securityContext={"privileged": True})
    d, _ = admit(policy, pod({}, [container(limits={"nvidia.com/gpu": "1"})], initContainers=[init]))
    assert violation(d, "privileged-gpu").path == "spec.initContainers[0].securityContext.privileged"


def test_an_unresolved_claim_is_a_gpu_pod(policy):
    claims = [{"name": "gpu", "resourceClaimTemplateName": "who-knows"}]
    c = container(securityContext={"privileged": True}, resources={"claims": [{"name": "gpu"}]})
    d, _ = admit(policy, pod({}, [c], resourceClaims=claims))
    assert "privileged-gpu" in rules(d), [v.render() for v in d.violations]


@pytest.mark.parametrize(
    ("what", "spec"),
    [
        ("blanket toleration", {"tolerations": BLANKET}),
        ("the training pool's taints, nvidia.com/gpu among them", {"tolerations": TRAIN_TAINTS}),
        ("the GPU taint tolerated", {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}),
        (
            "the MIG pool's selector",
            {
                "nodeSelector": {"workload": "gpu-infer"},
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            },
        ),
        (
            "NotIn the training pool",
            {
                "tolerations": BLANKET,
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "workload", "operator": "NotIn", "values": ["gpu-train"]}
                                    ]
                                }
                            ]
                        }
                    }
                },
            },
        ),
    ],
)
def test_cpu_only_privileged_pod_that_can_reach_a_sliced_pool(policy, what, spec):
    d, _ = admit(policy, pod({}, [container(securityContext={"privileged": True})], **spec))
    assert d.relevant and not d.allowed, what
    v = violation(d, "privileged-gpu")
    assert "pool of sliced cards (infer-a100)" in v.message, v.message
    assert [x.rule for x in d.violations] == ["privileged-gpu"], "a CPU-only pod meets no other GPU rule"


def test_cpu_only_pod_reaching_only_the_shared_dev_pool(policy):
    spec = {"nodeSelector": {"workload": "gpu-dev"}, "tolerations": BLANKET}
    c = container(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])
    v = violation(admit(policy, pod({}, [c], **spec))[0], "privileged-gpu")
    assert "(dev-cgpu)" in v.message and v.path == "spec.containers[0].env[0]"


@pytest.mark.parametrize(
    "spec",
    [
        {},  # no toleration: every GPU pool is tainted
        {"tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}]},
    ],
)
def test_cpu_only_privileged_pod_that_cannot_reach_a_sliced_pool_is_not_relevant(policy, spec):
    obj = pod({}, [container(securityContext={"privileged": True})], **spec)
    d = report(policy, Request(obj, namespace="team-a"))
    assert not d.relevant, [v.render() for v in d.violations]


def test_cpu_only_privileged_pod_on_the_whole_gpu_pool_only_gets_void_but_is_not_privileged_gpu(policy):
    """It can reach only the whole-GPU pool (its nodeSelector): privileged-gpu does not judge it there
    (``privilegedGPUPools`` is sliced), but its container is given NVIDIA_VISIBLE_DEVICES=void."""
    obj = pod({}, [container(securityContext={"privileged": True})], tolerations=BLANKET,
              nodeSelector={"workload": "gpu-train"})  # fmt: skip
    d, _ = admit(policy, obj)
    assert d.allowed and "privileged-gpu" not in rules(d), [v.render() for v in d.violations]
    first = report(policy, Request(obj, namespace="team-a"))
    assert {"op": "add", "path": "/spec/containers/0/env",
            "value": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]} in first.patch  # fmt: skip


def test_privileged_gpu_pools_all_covers_the_whole_gpu_pool(policy, all_pools):
    obj = pod(
        {},
        [container(securityContext={"privileged": True})],
        tolerations=BLANKET,
        nodeSelector={"workload": "gpu-train"},
    )
    assert "privileged-gpu" not in rules(report(policy, Request(obj, namespace="team-a")))  # whole GPUs: not judged
    d = report(all_pools, Request(obj, namespace="team-a"))
    v = violation(d, "privileged-gpu")
    assert "onto a GPU pool (train-h100)" in v.message and not d.allowed


def test_cpu_only_pod_without_a_trigger_pays_no_reach_computation(policy, monkeypatch):
    """The hot path: a CPU-only pod with no toleration, no ``nodeName`` and no trigger is skipped before
    any reachability is computed (``reach.reachable`` is replaced by one that fails the test): every
    pool of the policy is tainted, so it can reach none. (One with a toleration is judged: it may reach
    a GPU pool, where its containers get NVIDIA_VISIBLE_DEVICES=void.)"""
    from webhook.engine.model import reach

    def boom(*a, **k):
        raise AssertionError("reach computed for a pod without a trigger")

    monkeypatch.setattr(reach, "reachable", boom)
    obj = pod({}, [container(env=[{"name": "A", "value": "1"}])])
    assert not report(policy, Request(obj, namespace="team-a")).relevant


# --- spec.nodeName: no scheduler, so no NoSchedule taint keeps the pod out ---------------------------------


MIG_NODE = node("gpu-infer-3", {"workload": "gpu-infer"}, [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}])
TRAIN_NODE = node(
    "gpu-train-1",
    {"workload": "gpu-train"},
    [
        {"key": "nvidia.com/gpu", "effect": "NoSchedule"},
        {"key": "workload", "value": "gpu-train", "effect": "NoSchedule"},
    ],
)
CPU_NODE = node("cpu-1", {})


def test_cpu_only_privileged_pod_naming_a_mig_node(policy):
    """An attacker with nothing but pods/create: no toleration, no GPU, ``nodeName`` of a MIG node. The
    kubelet admits it (its admission checks only NoExecute taints) and the privileged container sees
    every tenant's slices. Without Node objects any name may be any node: denied."""
    obj = pod({}, [container(securityContext={"privileged": True})], nodeName="gpu-infer-3")
    d, _ = admit(policy, obj)
    v = violation(d, "privileged-gpu")
    assert not d.allowed and [x.rule for x in d.violations] == ["privileged-gpu"]
    assert "spec.nodeName 'gpu-infer-3'" in v.message and "(infer-a100)" in v.message, v.message
    assert "NoSchedule taints do not keep it out" in v.message


def test_node_name_with_the_nodes_known_is_judged_on_that_node(policy):
    cluster = Cluster(nodes=(MIG_NODE, TRAIN_NODE, CPU_NODE))
    privileged = [container(securityContext={"privileged": True})]
    at = {name: pod({}, privileged, nodeName=name) for name in ("gpu-infer-3", "gpu-train-1", "cpu-1", "new-9")}
    assert not admit(policy, at["gpu-infer-3"], cluster=cluster)[0].allowed
    # whole GPUs: nothing shared to see (only NVIDIA_VISIBLE_DEVICES=void); no GPUs: not relevant at all
    assert admit(policy, at["gpu-train-1"], cluster=cluster)[0].allowed
    assert not report(policy, Request(at["cpu-1"], namespace="team-a", cluster=cluster)).relevant
    assert not admit(policy, at["new-9"], cluster=cluster)[0].allowed  # not known yet: may join any pool


def test_a_no_execute_taint_still_keeps_a_named_pod_out(policy):
    evicting = node("gpu-infer-4", {"workload": "gpu-infer"}, [{"key": "quarantine", "effect": "NoExecute"}])
    obj = pod({}, [container(securityContext={"privileged": True})], nodeName="gpu-infer-4")
    assert not report(policy, Request(obj, namespace="team-a", cluster=Cluster(nodes=(evicting,)))).relevant
    obj["spec"]["tolerations"] = [{"key": "quarantine", "operator": "Exists"}]
    assert not admit(policy, obj, cluster=Cluster(nodes=(evicting,)))[0].allowed


def test_kubectl_debug_node_on_a_mig_node(policy):
    """``kubectl debug node/gpu-infer-3 --image=busybox``: the pod kubectl builds (nodeName, the host's
    root filesystem mounted at /host, host namespaces) reaches every slice's device files."""
    obj = pod(
        {},
        [container("debugger", volumeMounts=[{"name": "host-root", "mountPath": "/host"}], stdin=True, tty=True)],
        name="node-debugger-gpu-infer-3-x7k2p",
        nodeName="gpu-infer-3",
        hostIPC=True,
        hostNetwork=True,
        hostPID=True,
        restartPolicy="Never",
        volumes=[{"name": "host-root", "hostPath": {"path": "/"}}],
    )
    d, _ = admit(policy, obj)
    v = violation(d, "privileged-gpu")
    assert v.path == "spec.containers[0].volumeMounts[0]" and not d.allowed, v.render()


def test_a_quiet_pod_parked_on_a_mig_node_then_debugged_privileged(policy):
    """Two steps, each harmless-looking: a CPU-only pod with no trigger and ``nodeName`` of a MIG node
    (admitted, with NVIDIA_VISIBLE_DEVICES=void), then ``kubectl debug --profile=sysadmin`` adds a
    privileged ephemeral container. A bound pod's ``nodeName`` looks the same whether the scheduler or
    the user wrote it, so the UPDATE is judged by where that name may be: denied."""
    parked = pod({}, [container()], nodeName="gpu-infer-3")
    assert admit(policy, parked)[0].allowed
    debugged = copy.deepcopy(parked)
    debugged["spec"]["ephemeralContainers"] = [
        {"name": "debugger", "image": "busybox", "securityContext": {"privileged": True}}
    ]
    d = report(policy, Request(debugged, operation="UPDATE", old_object=parked, namespace="team-a", stage=Stage.STORED))
    v = violation(d, "privileged-gpu")
    assert not d.allowed and v.path == "spec.ephemeralContainers[0].securityContext.privileged"
    # with the Node objects known, a pod bound to a CPU node is debugged freely
    at_cpu = pod({}, [container()], nodeName="cpu-1")
    debugged = copy.deepcopy(at_cpu)
    debugged["spec"]["ephemeralContainers"] = [
        {"name": "debugger", "image": "busybox", "securityContext": {"privileged": True}}
    ]
    cluster = Cluster(nodes=(MIG_NODE, TRAIN_NODE, CPU_NODE))
    d = report(
        policy,
        Request(
            debugged, operation="UPDATE", old_object=at_cpu, namespace="team-a", stage=Stage.STORED, cluster=cluster
        ),
    )
    assert d.allowed and "privileged-gpu" not in rules(d)


# --- controllers: the same judgement on their pod templates -----------------------------------------------


def _controller(kind, spec, api="apps/v1"):
    body = {"selector": {"matchLabels": {"app": "x"}}, "template": {"metadata": {"labels": {"app": "x"}}, "spec": spec}}
    return {"apiVersion": api, "kind": kind, "metadata": {"name": "x"}, "spec": body}


def test_daemonset_of_privileged_cpu_pods_tolerating_everything(policy):
    ds = _controller(
        "DaemonSet", {"containers": [container(securityContext={"privileged": True})], "tolerations": BLANKET}
    )
    d = report(policy, Request(ds, namespace="team-a"))
    v = violation(d, "privileged-gpu")
    assert v.path == "spec.template.spec.containers[0].securityContext.privileged" and not d.allowed
    quiet = _controller("DaemonSet", {"containers": [container(securityContext={"privileged": True})]})
    assert not report(policy, Request(quiet, namespace="team-a")).relevant


def test_deployment_of_mig_pods_with_a_hostpath_dev_sidecar(policy):
    spec = {
        "containers": [container(), container("exporter", volumeMounts=[{"name": "dev", "mountPath": "/dev"}])],
        "volumes": [{"name": "dev", "hostPath": {"path": "/dev/"}}],
    }
    dep = _controller("Deployment", spec)
    dep["spec"]["template"]["metadata"] = intent("inference", gpu_memory="4Gi")
    d = report(policy, Request(dep, namespace="team-a", namespace_labels={"gpu-admission.io/tier": "serving"}))
    v = violation(d, "privileged-gpu")
    assert v.path == "spec.template.spec.containers[1].volumeMounts[0]" and "spec.volumes[0]" in v.message


# --- UPDATEs --------------------------------------------------------------------------------------------------


def test_an_update_that_already_had_the_trigger_is_not_news(policy):
    old = pod({}, [container(securityContext={"privileged": True})], tolerations=BLANKET)
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"team": "b"}
    d = report(policy, Request(new, operation="UPDATE", old_object=old, namespace="team-a", stage=Stage.STORED))
    assert "privileged-gpu" not in rules(d)


def test_debugging_a_tolerant_cpu_pod_with_a_privileged_ephemeral_container(policy):
    old = pod({}, [container()], tolerations=BLANKET)
    new = copy.deepcopy(old)
    new["spec"]["ephemeralContainers"] = [
        {"name": "debugger", "image": "busybox", "securityContext": {"privileged": True}}
    ]
    d = report(policy, Request(new, operation="UPDATE", old_object=old, namespace="team-a", stage=Stage.STORED))
    v = violation(d, "privileged-gpu")
    assert v.path == "spec.ephemeralContainers[0].securityContext.privileged" and not d.allowed
    assert v.message.startswith("ephemeral container 'debugger' is privileged")


def test_triggers_are_read_in_container_order():
    spec = {
        "initContainers": [{"name": "i", "securityContext": {"privileged": True}}],
        "containers": [{"name": "c", "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "0"}]}],
        "ephemeralContainers": [{"name": "e", "securityContext": {"capabilities": {"add": ["CAP_SYS_ADMIN"]}}}],
    }
    assert [(t.role, t.name) for t in triggers(spec)] == [
        ("container", "c"),
        ("init container", "i"),
        ("ephemeral container", "e"),
    ]


# --- the cheap screen agrees with the full reading --------------------------------------------------------


_FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "securityContext": st.fixed_dictionaries(
            {},
            optional={
                "privileged": st.sampled_from([True, False, None]),
                "runAsNonRoot": st.just(True),
                "capabilities": st.fixed_dictionaries(
                    {}, optional={"add": st.lists(st.sampled_from(["IPC_LOCK", "CAP_SYS_ADMIN", "all", "NET_RAW"]))}
                ),
            },
        ),
        "env": st.lists(
            st.fixed_dictionaries(
                {"name": st.sampled_from(["A", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES"])},
                optional={"value": st.sampled_from(["none", "void", "all", ""])},
            ),
            max_size=4,
        ),
        "envFrom": st.lists(
            st.fixed_dictionaries(
                {"configMapRef": st.just({"name": "c"})}, optional={"prefix": st.sampled_from(["", "APP_", "NVIDIA_"])}
            ),
            max_size=2,
        ),
        "volumeMounts": st.lists(
            st.fixed_dictionaries({"name": st.sampled_from(["a", "b"]), "mountPath": st.just("/m")}), max_size=2
        ),
        "volumeDevices": st.lists(
            st.fixed_dictionaries({"name": st.sampled_from(["a", "b"]), "devicePath": st.just("/d")}), max_size=1
        ),
    },
)
_SPECS = st.fixed_dictionaries(
    {"containers": st.lists(_FIELDS, min_size=1, max_size=3)},
    optional={
        "initContainers": st.lists(_FIELDS, max_size=2),
        "ephemeralContainers": st.lists(_FIELDS, max_size=1),
        "volumes": st.lists(
            st.fixed_dictionaries(
                {
                    "name": st.sampled_from(["a", "b"]),
                    "hostPath": st.fixed_dictionaries({"path": st.sampled_from(["/dev", "/var/log", "/", "/dev/shm"])}),
                }
            ),
            max_size=2,
        ),
    },
)


def _every_trigger(spec):
    """Each container read in full, with no screen: what ``triggers`` and ``has_trigger`` must find."""
    volumes = dev_volumes(spec)
    return [
        t
        for group in ("containers", "initContainers", "ephemeralContainers")
        for index, c in enumerate(spec.get(group) or [])
        for t in container_triggers(group, index, c, volumes)
    ]


@settings(max_examples=300, deadline=None)
@given(_SPECS)
def test_the_screen_never_misses_a_trigger(spec):
    """Both readers screen each container cheaply before reading it; neither may lose a trigger."""
    every = _every_trigger(spec)
    assert list(triggers(spec)) == every
    assert has_trigger(spec) == bool(every)

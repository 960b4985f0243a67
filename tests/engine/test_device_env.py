"""The image opens every GPU: ``NVIDIA_VISIBLE_DEVICES=void`` on containers without a GPU grant.

CUDA base images set ``ENV NVIDIA_VISIBLE_DEVICES=all``, and with the NVIDIA container toolkit's stock
settings that value is honoured in an unprivileged container: a CPU pod that tolerates a GPU pool, or a
GPU-less sidecar or init container in a MIG pod, sees every GPU of its node while the pod spec shows
nothing. ``/mutate`` now writes ``void`` into each such container's ``env`` (a pod-spec entry wins over
the image's); a user's ``void``/``none`` is kept, any other value is ``privileged-gpu`` on any GPU pool,
and ``/validate`` denies a stored pod whose void is missing (the mutation failed open).

The admission path is the apiserver's (``admit``: ``/mutate``, our JSON patch applied with jsonpatch,
``/validate`` on the stored object); every mutated object is checked against the Kubernetes OpenAPI
schema (strict) of the oldest and newest supported release, and mutating it again yields no patch.
"""

from __future__ import annotations

import copy

import pytest
import yaml

from tests.conftest import POLICIES
from tests.engine.helpers import container, intent, job, k8s_errors, pod, rules, violation
from tests.engine.test_reach_attacks import BLANKET, admit
from webhook.engine import Request, Stage, mutate, report

VOID = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}
GPU_TAINT = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
MIG_POD = intent("inference", gpu_memory="4Gi")


def env_of(obj: dict, group: str = "containers", index: int = 0) -> list:
    spec = obj["spec"]["template"]["spec"] if obj["kind"] != "Pod" else obj["spec"]
    return spec[group][index].get("env", [])


def mutated(policy, obj: dict, **kw) -> dict:
    """The stored object after /mutate, checked: schema-valid, allowed at /validate, idempotent."""
    v, stored = admit(policy, obj, **kw)
    assert v.allowed, [x.render() for x in v.violations]
    assert k8s_errors(stored) == []
    again = mutate(policy, Request(stored, namespace="team-a"))
    assert again.patch == (), f"not idempotent: {again.patch}"
    return stored


@pytest.mark.parametrize("tolerations", [BLANKET, GPU_TAINT], ids=["blanket", "gpu-taint"])
def test_a_cpu_pod_that_tolerates_a_gpu_pool_gets_void_in_every_container(policy, tolerations):
    obj = pod(
        {},
        [container("app", env=[{"name": "A", "value": "1"}]), container("log")],
        initContainers=[container("init"), container("proxy", restartPolicy="Always")],
        tolerations=tolerations,
    )
    stored = mutated(policy, obj)
    assert env_of(stored) == [{"name": "A", "value": "1"}, VOID]  # appended, the user's env kept
    assert env_of(stored, index=1) == [VOID]
    assert env_of(stored, "initContainers") == [VOID] and env_of(stored, "initContainers", 1) == [VOID]


def test_a_cpu_pod_naming_a_node_gets_void(policy):
    stored = mutated(policy, pod({}, [container()], nodeName="gpu-infer-3"))
    assert env_of(stored) == [VOID]


def test_a_cpu_pod_that_tolerates_no_gpu_taint_is_left_alone(policy):
    obj = pod({}, [container()], tolerations=[{"key": "dedicated", "operator": "Exists"}])
    d = report(policy, Request(obj, namespace="team-a"))
    assert not d.relevant and d.patch == ()


def test_gpu_less_sidecar_and_init_container_of_a_mig_pod_get_void_the_gpu_container_does_not(policy):
    obj = pod(
        MIG_POD,
        [container("vllm"), container("metrics")],
        initContainers=[container("download"), container("mesh", restartPolicy="Always")],
    )
    stored = mutated(policy, obj)
    assert "NVIDIA_VISIBLE_DEVICES" not in {e["name"] for e in env_of(stored)}  # the device plugin sets it
    assert any(k.startswith("nvidia.com/mig-") for k in stored["spec"]["containers"][0]["resources"]["limits"])
    assert env_of(stored, index=1) == [VOID]
    assert env_of(stored, "initContainers") == [VOID] and env_of(stored, "initContainers", 1) == [VOID]


def test_a_raw_request_keeps_its_gpu_container_and_voids_the_rest(policy):
    obj = pod({}, [container("cuda", limits={"nvidia.com/gpu": 1}), container("sidecar")])
    stored = mutated(policy, obj, labels={"gpu-admission.io/raw-gpus": "allowed"})
    assert env_of(stored) == [] and env_of(stored, index=1) == [VOID]


@pytest.mark.parametrize("value", ["void", "none"])
def test_a_users_void_or_none_is_kept(policy, value):
    obj = pod({}, [container(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": value}])], tolerations=BLANKET)
    d = report(policy, Request(obj, namespace="team-a"))
    assert d.patch == () and d.allowed


@pytest.mark.parametrize("nodeSelector", [{"workload": "gpu-train"}, {"workload": "gpu-infer"}], ids=["whole", "mig"])
def test_any_other_value_written_there_is_denied_on_any_gpu_pool(policy, nodeSelector):
    """On a whole-GPU pool too: the webhook voids every container without a grant there, so a value
    written in the pod spec would take that back (before, only pools of sliced cards were judged)."""
    c = container(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])
    d, stored = admit(policy, pod({}, [c], tolerations=BLANKET, nodeSelector=nodeSelector))
    v = violation(d, "privileged-gpu")
    assert not d.allowed and v.path == "spec.containers[0].env[0]"
    assert env_of(stored) == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]  # never overwritten


def test_a_valuefrom_there_is_denied_too(policy):
    c = container(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}])
    d, _ = admit(policy, pod({}, [c], tolerations=BLANKET, nodeSelector={"workload": "gpu-train"}))
    assert "privileged-gpu" in rules(d)


def test_a_stored_pod_without_its_void_is_denied(policy):
    """/mutate failed open (failurePolicy Ignore) or a later webhook removed the entry: /validate sees
    a container that would take the image's value, and does not store it."""
    obj = pod({}, [container("app"), container("side", env=[VOID])], tolerations=BLANKET)
    d = report(policy, Request(obj, namespace="team-a", stage=Stage.STORED))
    v = violation(d, "privileged-gpu")
    assert not d.allowed and v.path == "spec.containers[0].env"
    assert "does not set NVIDIA_VISIBLE_DEVICES" in v.message and "retry" in v.message
    assert len([x for x in d.violations if x.rule == "privileged-gpu"]) == 1  # 'side' has it


def test_an_update_is_not_held_to_the_void(policy):
    """Pods created before this webhook version run without it; their label updates stay possible."""
    old = pod({}, [container()], tolerations=BLANKET, nodeName="gpu-infer-3")
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"team": "b"}
    d = report(policy, Request(new, operation="UPDATE", old_object=old, namespace="team-a", stage=Stage.STORED))
    assert d.allowed, [x.render() for x in d.violations]


def test_a_cpu_job_that_tolerates_a_gpu_pool_gets_void_in_its_template(policy):
    obj = job({}, [container()], parallelism=1, tolerations=BLANKET)
    stored = mutated(policy, obj)
    assert env_of(stored) == [VOID]


def test_a_deployment_is_judged_as_its_voided_pods(policy):
    """Controllers are validated as their pods will be after mutation: the void is there, no denial;
    their pods get it when they are created."""
    dep = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "team-a"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [container()], "tolerations": BLANKET},
            },
        },
    }
    d = report(policy, Request(dep, namespace="team-a", stage=Stage.STORED))
    assert d.relevant and d.allowed and d.patch == ()


def test_kai_fraction_pods_leave_the_regular_containers_to_the_scheduler(policy):
    """KAI's binder gives a fraction pod's container its share (and its env): only init containers,
    which hold none, get void."""
    meta = {"annotations": {"gpu-fraction": "0.5"}}
    obj = pod(meta, [container("app"), container("side")], initContainers=[container("init")])
    m = mutate(policy, Request(obj, namespace="team-a"))
    paths = [op["path"] for op in m.patch if op["path"].endswith("/env")]
    assert paths == ["/spec/initContainers/0/env"], m.patch


def test_no_void_where_privileged_gpu_is_off(policy):
    """The GPU stack's own agents (device plugin, DCGM exporter) need the node's GPUs: a namespace exempt
    from privileged-gpu gets no void, as it gets no privileged-gpu denial."""
    from webhook.policy import load_policy_texts

    doc = yaml.safe_load((POLICIES / "default.yaml").read_text())
    doc["spec"]["rules"]["privileged-gpu"] = {"exempt": [{"matchLabels": {"gpu-stack": "true"}}]}
    exempting = load_policy_texts([("default.yaml", yaml.safe_dump(doc))])
    plugin = pod({}, [container("nvidia-device-plugin")], tolerations=GPU_TAINT)
    d = report(exempting, Request(plugin, namespace="gpu-operator", namespace_labels={"gpu-stack": "true"}))
    assert d.patch == () and d.allowed
    assert report(exempting, Request(plugin, namespace="team-a")).patch != ()  # elsewhere it is voided


def test_a_privileged_cpu_pod_on_a_sliced_pool_is_still_denied(policy):
    c = container(securityContext={"privileged": True})
    d, stored = admit(policy, pod({}, [c], tolerations=BLANKET))
    assert "privileged-gpu" in rules(d) and env_of(stored) == [VOID]

"""Whatever the webhook admits can bind only where its namespace and class are entitled, judged by the oracle.

Objects (Pods, Jobs, Deployments, StatefulSets, DaemonSets, PyTorchJobs, Volcano Jobs) are drawn by
``tests/oracle/workloads.py`` over nodes generated from the policy (``tests/oracle/cluster.py``), sent
through the admission path as the API server runs it (``tests/oracle/admission.py``), and every pod
that ends up stored, at CREATE and after the user's UPDATE, is judged by the independent scheduler
model (``tests/oracle/scheduler.py``).

"Entitled", precisely (the namespace's entitlement is the policy's first ``namespaces`` entry whose
selector matches the namespace's labels):

- a *class pod* (its ``workload`` label names a class of the policy) may bind only to nodes of the
  pools of that class the entitlement grants;
- a *raw GPU request* (any container, of any kind, holds an extended resource the policy counts as a
  GPU: ``settings.gpuResourcePrefixes``, default as docs/policy.md documents it; no class)
  may bind only to nodes of the pools of any class the entitlement grants;
- any other pod (CPU-only, or RDMA alone) may bind anywhere, CPU-only nodes included: the webhook
  does not place non-GPU pods. So may a pod without devices that an UPDATE gave a class label (a
  CPU-only pod relabelled: nothing re-mutates it, and it holds no GPU wherever it runs).

Device grant: a class pod holds at most the class's ``maxGPUs`` devices (whole GPUs, MIG devices,
shared slices; counted as Kubernetes accounts them, over every container) and at most
``maxGPUMemory`` of shared GPU memory per device; and no container of any kind in a pod that holds
GPU devices, or can bind to a node of a pool whose cards are shared or MIG-sliced (every GPU pool
under ``privilegedGPUPools: all``), carries a trigger of device access beyond its grant (privileged,
``SYS_ADMIN``/``ALL``, a hostPath at or under ``/dev``, ``NVIDIA_VISIBLE_DEVICES``/
``NVIDIA_DRIVER_CAPABILITIES`` other than ``none``/``void``).

CI runs a bounded number of examples (``derandomize=True``: the same examples on every run, never
flaky); ``ORACLE_EXAMPLES=20000 pytest tests/oracle`` runs a long one (docs/reliability.md).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from fractions import Fraction

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import DEFAULT_POLICY_DIR, ROOT
from tests.oracle.admission import Admitted, Hooks, admitted_pods
from tests.oracle.cluster import PolicyFacts, read_policy
from tests.oracle.scheduler import Node, pod_requests, reach
from tests.oracle.workloads import Scenario, scenarios
from webhook.policy import load_policy_texts

EXAMPLES = int(os.environ.get("ORACLE_EXAMPLES", "50"))
COMMON = {
    "derandomize": True,
    "deadline": None,
    "database": None,
    "suppress_health_check": list(HealthCheck),
    "print_blob": False,
}
PROPERTY = settings(max_examples=EXAMPLES, **COMMON)

# name -> (policy file, settings overridden). ``rawRequests: deny`` leaves raw requests unpinned, so
# every one of them is judged by the engine's reachability model alone: the oracle's sharpest test.
POLICIES = {
    "default": (DEFAULT_POLICY_DIR / "default.yaml", {}),
    "default-raw-deny": (DEFAULT_POLICY_DIR / "default.yaml", {"rawRequests": "deny"}),
    "dra-example": (ROOT / "examples" / "dra-policy" / "policy.yaml", {}),
    "providers": (ROOT / "tests" / "engine" / "policies" / "providers.yaml", {}),
}
DEVICE_COUNTS = ("nvidia.com/gpu", "nvidia.com/gpu.shared", "volcano.sh/vgpu-number")  # + nvidia.com/mig-*
SHARED_MEMORY_GIB = {  # resource -> how many of its units make a GiB
    "aliyun.com/gpu-mem": 1,
    "tke.cloud.tencent.com/qgpu-memory": 1,
    "nvidia.com/gpumem": 1024,
    "volcano.sh/vgpu-memory": 1024,
}


@dataclass(frozen=True)
class World:
    policy: object
    facts: PolicyFacts
    hooks: Hooks


@functools.cache
def world(name: str) -> World:
    path, overrides = POLICIES[name]
    doc = yaml.safe_load(path.read_text())
    doc["spec"].setdefault("settings", {}).update(overrides)
    policy = load_policy_texts([(path.name, yaml.safe_dump(doc))])
    return World(policy, read_policy(doc), Hooks.of(policy))


def _meta(pod: dict) -> dict:
    return pod.get("metadata") or {}


def class_of(facts: PolicyFacts, pod: dict) -> str | None:
    name = (_meta(pod).get("labels") or {}).get(f"{facts.prefix}/workload")
    return name if name in facts.classes else None


def _containers(pod: dict, kinds=("containers", "initContainers", "ephemeralContainers")) -> list[dict]:
    spec = pod.get("spec") or {}
    return [c for k in kinds for c in spec.get(k) or [] if isinstance(c, dict)]


def gpu_resources(facts: PolicyFacts, pod: dict) -> set[str]:
    out = set()
    for c in _containers(pod):
        resources = c.get("resources") or {}
        for name in {**(resources.get("limits") or {}), **(resources.get("requests") or {})}:
            if name.startswith(facts.gpu_prefixes) and pod_requests({"containers": [c]}).get(name, 0) > 0:
                out.add(name)
    return out


def allowed_pools(facts: PolicyFacts, scenario: Scenario, got: Admitted) -> set[str | None] | None:
    """Pools (None: CPU-only nodes) the pod may bind into; None: anywhere."""
    pod = got.obj
    cls = class_of(facts, pod)
    devices = gpu_resources(facts, pod) or (pod.get("spec") or {}).get("resourceClaims")
    if cls is not None and got.updated and not devices:
        return None  # a class label an UPDATE put on a pod without devices: nothing mutates it, it holds no GPU
    if cls is not None:
        return set(facts.entitled_pools(scenario.namespace_labels, cls))
    if gpu_resources(facts, pod):
        return set(facts.entitled_pools(scenario.namespace_labels, None))
    return None


def _report(scenario: Scenario, got: Admitted, bad: list[Node], why: str) -> str:
    where = ", ".join(f"{n.name} (pool {n.pool or 'cpu-only'})" for n in bad)
    return f"{why}: {where}\nstored pod (judged={got.judged}): {got.obj}\nscenario: {scenario.show()}"


def placement_failures(w: World, scenario: Scenario, pods: list[Admitted]) -> list[str]:
    out = []
    for got in pods:
        allowed = allowed_pools(w.facts, scenario, got)
        if allowed is None:
            continue
        bad = [n for n in reach(got.obj, scenario.nodes) if n.pool not in allowed]
        if bad:
            out.append(_report(scenario, got, bad, f"admitted pod can bind outside its entitlement {sorted(allowed)}"))
    return out


def _class_limits(facts: PolicyFacts, cls: str) -> tuple[int | None, Fraction | None]:
    spec = facts.classes[cls]
    memory = spec.get("maxGPUMemory")
    gib = None
    if memory is not None:
        text = str(memory)
        gib = Fraction(text[:-2]) if text.endswith("Gi") else Fraction(text) / 2**30
    return spec.get("maxGPUs"), gib


def grant_failures(w: World, scenario: Scenario, pods: list[Admitted]) -> list[str]:
    out = []
    for got in pods:
        cls = class_of(w.facts, got.obj)
        if cls is None:
            continue
        max_gpus, max_memory = _class_limits(w.facts, cls)
        demand = pod_requests(got.obj.get("spec") or {})
        devices = sum(v for k, v in demand.items() if k in DEVICE_COUNTS or k.startswith("nvidia.com/mig-"))
        if max_gpus is not None and devices > max_gpus:
            out.append(_report(scenario, got, [], f"class {cls}: {devices} devices > maxGPUs {max_gpus}"))
        memory = sum(v / SHARED_MEMORY_GIB[k] for k, v in demand.items() if k in SHARED_MEMORY_GIB)
        if max_memory is not None and memory > max_memory * (max_gpus or 1):
            out.append(
                _report(
                    scenario, got, [], f"class {cls}: {memory} GiB of shared GPU memory > maxGPUMemory {max_memory}Gi"
                )
            )
    return out


def triggers(pod: dict) -> list[str]:
    spec = pod.get("spec") or {}
    dev_volumes = set()
    for v in spec.get("volumes") or []:
        path = str(((v.get("hostPath") or {}) if isinstance(v, dict) else {}).get("path") or "")
        if path.rstrip("/") == "/dev" or path.startswith("/dev/"):
            dev_volumes.add(v.get("name"))
    out = []
    for c in _containers(pod):
        sc = c.get("securityContext") or {}
        if sc.get("privileged"):
            out.append(f"{c['name']}: privileged")
        if {"SYS_ADMIN", "ALL"} & set((sc.get("capabilities") or {}).get("add") or []):
            out.append(f"{c['name']}: capabilities")
        for env in c.get("env") or []:
            if env.get("name") in ("NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES") and (
                "valueFrom" in env or env.get("value") not in ("none", "void")
            ):
                out.append(f"{c['name']}: env {env['name']}")
        if any(m.get("name") in dev_volumes for m in c.get("volumeMounts") or []):
            out.append(f"{c['name']}: hostPath /dev")
    return out


def privileged_failures(w: World, scenario: Scenario, pods: list[Admitted]) -> list[str]:
    sensitive = {p.name for p in w.facts.pools if p.sliced or w.facts.privileged_all_pools}
    out = []
    for got in pods:
        found = triggers(got.obj)
        if not found:
            continue
        near = [n for n in reach(got.obj, scenario.nodes) if n.pool in sensitive]
        if gpu_resources(w.facts, got.obj) or near:
            out.append(
                _report(scenario, got, near, f"admitted pod with {found} holds GPUs or can reach shared/sliced cards")
            )
    return out


@dataclass
class Run:
    """One bounded search per policy; every property is checked on every example it draws."""

    examples: int = 0
    admitted: int = 0
    placement: str | None = None  # the shrunk counterexample
    grant: list[str] = field(default_factory=list)
    privileged: list[str] = field(default_factory=list)


def _keep(found: list[str], more: list[str]) -> None:
    found.extend(more)
    found.sort(key=len)  # the shortest counterexamples are the readable ones
    del found[3:]


@functools.cache
def run(policy_name: str) -> Run:
    w = world(policy_name)
    result = Run()

    @PROPERTY
    @given(data=st.data())
    def search(data):
        scenario = data.draw(scenarios(w.facts), label="scenario")
        pods = admitted_pods(w.policy, w.hooks, scenario)
        result.examples += 1
        result.admitted += len(pods)
        _keep(result.grant, grant_failures(w, scenario, pods))
        _keep(result.privileged, privileged_failures(w, scenario, pods))
        failures = placement_failures(w, scenario, pods)
        assert not failures, failures[0]

    try:
        search()
    except AssertionError as exc:
        result.placement = str(exc)
    return result


@pytest.mark.parametrize("policy_name", sorted(POLICIES))
def test_admitted_pods_bind_only_to_entitled_pools(policy_name):
    result = run(policy_name)
    print(f"oracle {policy_name}: {result.examples} examples, {result.admitted} admitted pods judged")  # -s shows it
    assert result.placement is None, result.placement
    assert result.admitted > result.examples // 4, "the search admits too few pods to say anything"


@pytest.mark.parametrize("policy_name", sorted(POLICIES))
def test_admitted_class_pods_stay_within_the_class_grant(policy_name):
    found = run(policy_name).grant
    assert not found, found[0]


@pytest.mark.parametrize("policy_name", sorted(POLICIES))
def test_no_device_access_beyond_the_grant_near_shared_cards(policy_name):
    found = run(policy_name).privileged
    assert not found, found[0]

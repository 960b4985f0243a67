"""Hypothesis strategies: the objects a user with permission to create workloads in one namespace may write.

Everything the scheduler's filters or the device plugins read is drawn at random, biased towards the
values that matter on the policy's cluster (its pools' labels and taints, the generated nodes' names
and hostnames): nodeSelectors, required and preferred node affinity with every operator and
``matchFields``, tolerations (blanket, without effect, ``Equal``/``Exists``/``Gt``, random keys),
containers of every kind (regular, init, native sidecar, ephemeral) holding whole GPUs, MIG devices,
shared-memory slices, other vendors' devices or RDMA, the intent contract's keys (valid and invalid),
the triggers of device access beyond the grant, and the namespace's labels from the policy's
entitlements.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from tests.oracle.cluster import EXTRA_LABELS, PolicyFacts, nodes, selector_keys
from tests.oracle.scheduler import EFFECTS, Node

RESOURCES = (
    "nvidia.com/gpu",
    "nvidia.com/gpu.shared",
    "nvidia.com/mig-1g.5gb",
    "nvidia.com/mig-1g.5gb.me",
    "nvidia.com/mig-3g.20gb",
    "nvidia.com/mig-7g.40gb",
    "nvidia.com/mig-1g.10gb",
    "nvidia.com/mig-3g.40gb",
    "aliyun.com/gpu-mem",
    "aliyun.com/gpu-count",
    "nvidia.com/gpumem",
    "volcano.sh/vgpu-number",
    "amd.com/gpu",
    "gpu.intel.com/i915",
    "rdma/rdma_shared_device_a",
    "example.com/fpga",
)
TRIGGERS = (
    {"securityContext": {"privileged": True}},
    {"securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}},
    {"securityContext": {"capabilities": {"add": ["ALL"]}}},
    {"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]},
    {"env": [{"name": "NVIDIA_DRIVER_CAPABILITIES", "valueFrom": {"configMapKeyRef": {"name": "x", "key": "y"}}}]},
    {"volumeMounts": [{"name": "host-dev", "mountPath": "/host-dev"}]},
)
HARMLESS = (
    {"securityContext": {"privileged": False, "capabilities": {"add": ["NET_ADMIN"]}}},
    {"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}]},
)


@dataclass
class Scenario:
    nodes: tuple[Node, ...]
    namespace: str
    namespace_labels: dict[str, str]
    obj: dict[str, Any]
    known: tuple[str, ...] | None
    add_tolerations: list[dict[str, Any]]  # the user's later UPDATE of each stored pod ...
    relabel: dict[str, str | None]  # ... and its label changes (None: removed)
    """Names of the nodes the engine is shown (the server's Node watch at admission time); the others
    join the cluster later. None: the engine knows no Node (the pool model alone)."""

    def show(self) -> str:
        import json

        return json.dumps(
            {
                "namespace_labels": self.namespace_labels,
                "engine_knows_nodes": self.known,
                "update_adds_tolerations": self.add_tolerations,
                "update_relabels": self.relabel,
                "nodes": [n.as_k8s() | {"pool": n.pool} for n in self.nodes],
                "object": self.obj,
            },
            indent=1,
        )


def _small(values):
    return st.sampled_from(sorted(set(values)))


@st.composite
def namespace_labels(draw, facts: PolicyFacts, name: str) -> dict[str, str]:
    labels = {"kubernetes.io/metadata.name": name}
    options: list[dict[str, str]] = [{}]
    for ent in facts.entitlements:
        match = (ent.get("selector") or {}).get("matchLabels") or {}
        if match:
            options.append(dict(match))
    labels.update(draw(st.sampled_from(options)))
    if draw(st.integers(0, 5)) == 0:
        labels[f"{facts.prefix}/raw-gpus"] = "allowed"
    if draw(st.booleans()):
        labels["team"] = draw(st.sampled_from(["a", "b"]))
    return labels


@st.composite
def tolerations(draw, facts: PolicyFacts) -> list[dict[str, Any]]:
    keys = sorted({t["key"] for p in facts.pools for t in p.taints} | {"example.com/other", "workload"})
    values = sorted({t["value"] for p in facts.pools for t in p.taints if t["value"]} | {"present", "", "5"})
    own = [dict(t) for p in (facts.doc["spec"].get("pools") or {}).values() for t in p.get("tolerations") or []]
    effects = st.sampled_from(EFFECTS)
    shapes = st.one_of(
        st.just({"operator": "Exists"}),
        effects.map(lambda e: {"operator": "Exists", "effect": e}),
        st.sampled_from(keys).map(lambda k: {"key": k, "operator": "Exists"}),
        st.tuples(st.sampled_from(keys), effects).map(lambda x: {"key": x[0], "operator": "Exists", "effect": x[1]}),
        st.tuples(st.sampled_from(keys), st.sampled_from(values), effects, st.booleans()).map(
            lambda x: {"key": x[0], "value": x[1], "effect": x[2], **({"operator": "Equal"} if x[3] else {})}
        ),
        st.tuples(st.sampled_from(keys), st.sampled_from(values)).map(
            lambda x: {"key": x[0], "operator": "Equal", "value": x[1]}
        ),
        st.tuples(st.sampled_from(keys), st.sampled_from(["Gt", "Lt"]), st.sampled_from(["0", "3", "10"])).map(
            lambda x: {"key": x[0], "operator": x[1], "value": x[2], "effect": "NoSchedule"}
        ),
        st.sampled_from(own) if own else st.just({"operator": "Exists"}),
    )
    return draw(st.lists(shapes, max_size=3))


@st.composite
def requirement(draw, keys: list[str], values: list[str]) -> dict[str, Any]:
    op = draw(st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]))
    expr: dict[str, Any] = {"key": draw(st.sampled_from(keys)), "operator": op}
    if op in ("In", "NotIn"):
        expr["values"] = draw(st.lists(st.sampled_from(values), min_size=1, max_size=2, unique=True))
    elif op in ("Gt", "Lt"):
        expr["values"] = [draw(st.sampled_from(["0", "3", "10"]))]
    return expr


@st.composite
def node_selector_term(draw, keys: list[str], values: list[str], node_names: list[str]) -> dict[str, Any]:
    term: dict[str, Any] = {}
    exprs = draw(st.lists(requirement(keys, values), max_size=3))
    if exprs:
        term["matchExpressions"] = exprs
    if draw(st.integers(0, 3)) == 0:
        term["matchFields"] = [
            {
                "key": "metadata.name",
                "operator": draw(st.sampled_from(["In", "NotIn"])),
                "values": [draw(st.sampled_from(node_names))],
            }
        ]
    return term


@st.composite
def placement(draw, facts: PolicyFacts, cluster: tuple[Node, ...], *, wild: bool) -> dict[str, Any]:
    """nodeSelector, affinity, tolerations and (rarely) nodeName of a pod template spec."""
    node_names = [n.name for n in cluster] + ["elsewhere"]
    keys = sorted(selector_keys(facts) | set(EXTRA_LABELS) | {"kubernetes.io/hostname", "example.com/absent"})
    values = sorted(
        {v for n in cluster for v in n.labels.values()} | {v for vs in EXTRA_LABELS.values() for v in vs} | {"nope"}
    )
    spec: dict[str, Any] = {}
    if draw(st.integers(0, 2)) == 0:
        selector: dict[str, str] = {}
        for source in draw(st.lists(st.sampled_from(["pool", "host", "label", "random"]), max_size=2)):
            node = draw(st.sampled_from(cluster))
            if source == "pool" and facts.pools:
                selector.update(draw(st.sampled_from(facts.pools)).selector)
            elif source == "host":
                selector["kubernetes.io/hostname"] = node.labels["kubernetes.io/hostname"]
            elif source == "label" and node.labels:
                key = draw(st.sampled_from(sorted(node.labels)))
                selector[key] = node.labels[key]
            else:
                selector[draw(st.sampled_from(keys))] = draw(st.sampled_from(values))
        if selector:
            spec["nodeSelector"] = selector
    affinity: dict[str, Any] = {}
    if draw(st.integers(0, 2)) == 0:
        terms = draw(st.lists(node_selector_term(keys, values, node_names), min_size=1, max_size=3))
        affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": terms}
    if draw(st.integers(0, 4)) == 0:
        affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": draw(st.integers(1, 100)), "preference": draw(node_selector_term(keys, values, node_names))}
        ]
    if affinity:
        spec["affinity"] = {"nodeAffinity": affinity}
    tols = draw(tolerations(facts))
    if tols:
        spec["tolerations"] = tols
    if draw(rarely(4 if wild else 20)):
        spec["nodeName"] = draw(st.sampled_from(node_names))
    return spec


def amount_text(n: int):
    """How a whole number may be written as a quantity. The API server sends webhooks the canonical
    form (``1``); the other spellings are what ``check`` reads from a manifest."""
    if not n:
        return st.just("0")
    return st.sampled_from([str(n), str(n), str(n), f"{n}000m", f"{n}e0", f"+{n}", f"0{n}"])


def rarely(n: int = 8):
    """True about once in ``n`` draws (a middle value: hypothesis favours the bounds of a range)."""
    return st.integers(0, n - 1).map(lambda x: x == n // 2)


@st.composite
def container(draw, name: str, resources: list[str], kind: str = "regular", *, wild: bool) -> dict[str, Any]:
    """``wild``: anything goes (several resources, triggers); otherwise at most one device resource."""
    c: dict[str, Any] = {"name": name, "image": "registry.example/app:1"}
    if kind != "ephemeral" and draw(st.booleans()):
        most = 2 if wild else 1
        wanted = draw(st.dictionaries(st.sampled_from(resources), st.integers(0, 8), min_size=1, max_size=most))
        if "aliyun.com/gpu-mem" in wanted:
            wanted["aliyun.com/gpu-mem"] = draw(st.sampled_from([1, 4, 24, 40, 80]))
        limits = {k: draw(amount_text(v)) for k, v in wanted.items()}
        if draw(st.booleans()):
            limits["cpu"] = "1"
        c["resources"] = {"limits": limits}
        if draw(st.booleans()):
            c["resources"]["requests"] = dict(limits)
    if draw(rarely(4 if wild else 12)):
        c.update(copy.deepcopy(draw(st.sampled_from(TRIGGERS))))
    elif draw(rarely(8)):
        c.update(copy.deepcopy(draw(st.sampled_from(HARMLESS))))
    if kind == "sidecar":
        c["restartPolicy"] = "Always"
    return c


MODES = ("class", "class", "raw", "raw", "cpu", "intruder", "intruder", "wild")


@st.composite
def pod_spec(draw, facts: PolicyFacts, cluster: tuple[Node, ...], restart: str | None, mode: str) -> dict[str, Any]:
    """``mode``: ``class`` (the GPUs come from the intent; extra containers mostly without devices),
    ``raw`` (one container asks for devices), ``cpu`` (no devices), ``intruder`` (no devices, a
    container with a trigger of device access, often ``nodeName``: the CPU-only pod after other
    tenants' cards), ``wild`` (anything)."""
    offered = sorted({r for p in facts.pools for r in p.allocatable} | set(RESOURCES))
    wild = mode == "wild"
    spec = draw(placement(facts, cluster, wild=wild))
    n = draw(st.integers(1, 3))
    spec["containers"] = [draw(container(f"c{i}", offered, wild=wild)) for i in range(n)]
    inits = draw(st.lists(st.sampled_from(["init", "sidecar"]), max_size=2))
    if inits:
        spec["initContainers"] = [draw(container(f"i{i}", offered, kind, wild=wild)) for i, kind in enumerate(inits)]
    if draw(rarely(6)):
        spec["ephemeralContainers"] = [draw(container("debug", offered, "ephemeral", wild=wild))]
    everyone = spec["containers"] + spec.get("initContainers", [])
    if mode in ("cpu", "intruder") or (mode == "class" and not draw(rarely(3))):
        for c in everyone:
            c.pop("resources", None)
    elif mode == "raw":
        holder = draw(st.sampled_from(everyone))
        for c in everyone:
            if c is not holder:
                c.pop("resources", None)
        if "resources" not in holder:
            holder["resources"] = {"limits": {draw(st.sampled_from(offered)): str(draw(st.integers(1, 8)))}}
    if mode == "intruder":
        draw(st.sampled_from(everyone)).update(copy.deepcopy(draw(st.sampled_from(TRIGGERS))))
        if not draw(rarely(3)):
            spec["nodeName"] = draw(st.sampled_from([n.name for n in cluster] + ["elsewhere"]))
    if any("volumeMounts" in c for c in everyone):
        spec["volumes"] = [{"name": "host-dev", "hostPath": {"path": draw(st.sampled_from(["/dev", "/dev/nvidia0"]))}}]
    if restart is not None:
        spec["restartPolicy"] = restart
    return spec


@st.composite
def intent_metadata(draw, facts: PolicyFacts, containers: list[str], mode: str) -> dict[str, Any]:
    p = facts.prefix
    meta: dict[str, Any] = {}
    labels: dict[str, str] = {"app": "x"}
    if mode == "class":
        labels[f"{p}/workload"] = draw(st.sampled_from(sorted(facts.classes)))
    elif mode == "wild" and draw(st.booleans()):
        labels[f"{p}/workload"] = draw(st.sampled_from([*sorted(facts.classes), "none", "nope"]))
    elif draw(rarely(6)):
        labels[f"{p}/workload"] = "none"
    meta["labels"] = labels
    pools = [pool.name for pool in facts.pools]
    choices = {
        "gpus": ["1", "2", "4", "8"],
        "gpu-memory": ["4Gi", "10Gi", "20Gi", "40Gi", "4096Mi"],
        "isolation": ["mig", "shared", "exclusive"],
        "pool": pools,
        "container": containers,
        "gpu-model": ["A100-40GB", "H100-80GB", "A10"],
    }
    if mode == "wild":
        for key, bad in (
            ("gpus", ["0", "²", "16"]),
            ("gpu-memory", ["bad"]),
            ("isolation", ["x"]),
            ("pool", ["nope"]),
            ("container", ["nope"]),
            ("gpu-model", ["nope"]),
        ):
            choices[key] = choices[key] + bad
    annotations = {}
    if mode in ("class", "wild"):
        for key in draw(st.lists(st.sampled_from(sorted(choices)), unique=True, max_size=2)):
            annotations[f"{p}/{key}"] = draw(st.sampled_from(choices[key]))
    if annotations:
        meta["annotations"] = annotations
    return meta


KINDS = ("Pod", "Pod", "Pod", "Job", "Deployment", "StatefulSet", "DaemonSet", "PyTorchJob", "VolcanoJob")


@st.composite
def workload(draw, facts: PolicyFacts, cluster: tuple[Node, ...]) -> dict[str, Any]:
    kind = draw(st.sampled_from(KINDS))
    mode = draw(st.sampled_from(MODES))
    restart = {"Pod": None, "Deployment": None, "StatefulSet": None, "DaemonSet": None}.get(kind, "OnFailure")
    spec = draw(pod_spec(facts, cluster, restart, mode))
    names = [c["name"] for c in spec["containers"] + spec.get("initContainers", [])]
    meta = draw(intent_metadata(facts, names, mode))
    template = {"metadata": meta, "spec": spec}
    if kind == "Pod":
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", **meta}, "spec": spec}
        if draw(rarely(4 if mode == "wild" else 6)):  # anyone may write an owner reference
            pod["metadata"]["ownerReferences"] = [
                {
                    "apiVersion": "apps/v1",
                    "kind": draw(st.sampled_from(["DaemonSet", "ReplicaSet"])),
                    "name": "fake",
                    "uid": "0d5e7d4e-0000-4000-8000-00000000dead",
                    "controller": True,
                }
            ]
        return pod
    own: dict[str, Any] = {"name": "w"}
    if kind in ("Job", "PyTorchJob", "VolcanoJob") and draw(st.integers(0, 3)) == 0:
        own.update(copy.deepcopy(meta))  # intent on the workload's own metadata, the fallback
        template["metadata"] = {"labels": {"app": "x"}}
    replicas = draw(st.integers(1, 3))
    selector = {"matchLabels": {"app": "x"}}
    if kind == "Job":
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": own,
            "spec": {"parallelism": replicas, "template": template},
        }
    if kind == "Deployment":
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": own,
            "spec": {"replicas": replicas, "selector": selector, "template": template},
        }
    if kind == "StatefulSet":
        return {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": own,
            "spec": {"replicas": replicas, "serviceName": "w", "selector": selector, "template": template},
        }
    if kind == "DaemonSet":
        return {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": own,
            "spec": {"selector": selector, "template": template},
        }
    if kind == "PyTorchJob":
        return {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": own,
            "spec": {
                "pytorchReplicaSpecs": {
                    "Master": {"replicas": 1, "template": template},
                    "Worker": {"replicas": replicas, "template": copy.deepcopy(template)},
                }
            },
        }
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": own,
        "spec": {
            "minAvailable": replicas,
            "schedulerName": "volcano",
            "tasks": [{"name": "worker", "replicas": replicas, "template": template}],
        },
    }


@st.composite
def scenarios(draw, facts: PolicyFacts) -> Scenario:
    cluster = draw(nodes(facts))
    name = draw(st.sampled_from(["team-a", "team-b"]))
    labels = draw(namespace_labels(facts, name))
    obj = draw(workload(facts, cluster))
    obj["metadata"]["namespace"] = name
    view = draw(st.sampled_from(["none", "all", "some"]))
    known = None
    if view == "all":
        known = tuple(n.name for n in cluster)
    elif view == "some":  # at least one node per pool is known, some join later
        known = tuple(n.name for n in cluster if n.pool is None or draw(st.booleans()))
        for pool in {n.pool for n in cluster if n.pool is not None}:
            first = next(n.name for n in cluster if n.pool == pool)
            if first not in known:
                known = (*known, first)
    relabel: dict[str, str | None] = {}
    if draw(rarely(3)):
        relabel[f"{facts.prefix}/workload"] = draw(st.sampled_from([None, "none", *sorted(facts.classes)]))
    return Scenario(cluster, name, labels, obj, known, draw(tolerations(facts)), relabel)

"""A cluster as a policy describes it: Nodes generated from the policy's pools, read from its YAML.

Independent of the engine: the YAML is read here (never through ``webhook.policy``'s compiled pools or
their derived taints and offers), with our own tables of what each device plugin advertises, from
the vendors' documentation:

- NVIDIA k8s-device-plugin: ``nvidia.com/gpu`` (whole cards, and the MIG ``single`` strategy);
  ``mixed`` strategy: ``nvidia.com/mig-<profile>`` per profile, ``+`` spelled ``.`` (v0.20.0);
  time-slicing: ``nvidia.com/gpu`` times replicas, or ``nvidia.com/gpu.shared`` with ``renameByDefault``.
  MIG profiles per card from NVIDIA's MIG user guide ("Supported MIG profiles").
- Alibaba ACK cGPU: ``aliyun.com/gpu-mem`` (GiB), ``aliyun.com/gpu-count``; HAMi: ``nvidia.com/gpu``
  (vGPUs), ``nvidia.com/gpumem`` (MiB), ``nvidia.com/gpucores``; Volcano vGPU: ``volcano.sh/vgpu-number``,
  ``volcano.sh/vgpu-memory`` (MiB), ``volcano.sh/vgpu-cores``; Tencent qGPU:
  ``tke.cloud.tencent.com/qgpu-memory`` (GiB), ``tke.cloud.tencent.com/qgpu-core``.
- A pool served through DRA (``dra.deviceClasses``) advertises no device-plugin resource for the
  isolations its DRA classes serve.

A pool's nodes carry the labels of its ``nodeSelector`` plus others the policy does not fix (a
hostname, a zone, a numeric rank), and the taints its ``taints:`` list, or else the taints its own
tolerations were written to tolerate: a toleration with a key stands for a taint with that key, its
value (``Equal``) or any value (``Exists``), its effect or any effect. CPU-only nodes carry no taints and
no devices.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

from tests.oracle.scheduler import EFFECTS, Node

# card memory (GiB) and MIG profiles (name, instances per card), NVIDIA MIG user guide
CARDS: dict[str, tuple[int, tuple[tuple[str, int], ...]]] = {
    "A30": (24, (("1g.6gb", 4), ("1g.6gb+me", 1), ("2g.12gb", 2), ("2g.12gb+me", 1), ("4g.24gb", 1))),
    "A100-40GB": (
        40,
        (
            ("1g.5gb", 7),
            ("1g.5gb+me", 1),
            ("1g.10gb", 4),
            ("2g.10gb", 3),
            ("3g.20gb", 2),
            ("4g.20gb", 1),
            ("7g.40gb", 1),
        ),
    ),
    "A100-80GB": (
        80,
        (
            ("1g.10gb", 7),
            ("1g.10gb+me", 1),
            ("1g.20gb", 4),
            ("2g.20gb", 3),
            ("3g.40gb", 2),
            ("4g.40gb", 1),
            ("7g.80gb", 1),
        ),
    ),
    "H100-80GB": (
        80,
        (
            ("1g.10gb", 7),
            ("1g.10gb+me", 1),
            ("1g.20gb", 4),
            ("2g.20gb", 3),
            ("3g.40gb", 2),
            ("4g.40gb", 1),
            ("7g.80gb", 1),
        ),
    ),
    "A10": (24, ()),
    "T4": (16, ()),
    "L4": (24, ()),
    "L40S": (48, ()),
}
# settings.gpuResourcePrefixes as docs/policy.md documents its default
DEFAULT_GPU_PREFIXES = (
    "nvidia.com/gpu",
    "nvidia.com/mig-",
    "aliyun.com/gpu",
    "volcano.sh/vgpu-",
    "volcano.sh/gpu-",
    "tke.cloud.tencent.com/qgpu",
)
TIME_SLICING_REPLICAS = 4
HAMI_SPLIT = 10
RDMA_DEVICES = 100
TAINT_VALUES = ("", "present", "true", "5")  # what an Exists toleration may stand for


def mig_resource(profile: str) -> str:
    return "nvidia.com/mig-" + profile.replace("+", ".")


@dataclass(frozen=True)
class PoolFacts:
    name: str
    selector: Mapping[str, str]
    taints: tuple[Mapping[str, Any], ...]  # value/effect None: any (drawn per node)
    allocatable: Mapping[str, int]
    sliced: bool  # its cards are shared or MIG-partitioned
    gpus_per_node: int


@dataclass(frozen=True)
class PolicyFacts:
    """What the property needs from a policy, read from its YAML."""

    doc: Mapping[str, Any]
    pools: tuple[PoolFacts, ...]
    classes: Mapping[str, Mapping[str, Any]]
    entitlements: tuple[Mapping[str, Any], ...]
    prefix: str
    privileged_all_pools: bool
    gpu_prefixes: tuple[str, ...]  # the resources the platform counts as GPUs (prefix match)

    def entitlement(self, labels: Mapping[str, str]) -> Mapping[str, Any] | None:
        """The first entitlement whose namespace selector matches (policy order)."""
        for ent in self.entitlements:
            if selector_matches(ent.get("selector") or {}, labels):
                return ent
        return None

    def entitled_pools(self, labels: Mapping[str, str], class_name: str | None) -> set[str]:
        """Pools of ``class_name`` (or of every class the namespace has) that the namespace may use."""
        ent = self.entitlement(labels)
        if ent is None:
            return set()
        classes = ent.get("classes") or []
        wanted = [class_name] if class_name is not None else classes
        out: set[str] = set()
        for name in wanted:
            if name not in classes or name not in self.classes:
                continue
            for pool in self.classes[name].get("pools") or []:
                if ent.get("pools") is None or pool in ent["pools"]:
                    out.add(pool)
        return out


def selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """metav1.LabelSelector: matchLabels AND matchExpressions (an empty selector matches everything)."""
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], e.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _allocatable(pool: Mapping[str, Any], cards: Mapping[str, tuple[int, tuple]]) -> dict[str, int]:
    gpus = int(pool["gpusPerNode"])
    model = pool["gpuModel"]
    if model not in cards:
        raise KeyError(f"the oracle has no card table for {model!r}: add it to tests/oracle/cluster.py CARDS")
    memory, profiles = cards[model]
    isolation = pool.get("isolation") or ["exclusive"]
    dra = set(((pool.get("dra") or {}).get("deviceClasses") or {}).keys())
    out: dict[str, int] = {}
    if "exclusive" in isolation and "exclusive" not in dra:
        out["nvidia.com/gpu"] = gpus
    mig = pool.get("mig")
    if "mig" in isolation and "mig" not in dra and mig is not None:
        if (mig.get("strategy") or "mixed") == "single":
            out["nvidia.com/gpu"] = gpus * max([n for _, n in profiles] or [1])
        else:
            wanted = mig.get("profiles")
            for name, per_card in profiles:
                if wanted is None or name in wanted:
                    out[mig_resource(name)] = per_card * gpus
    sharing = pool.get("sharing")
    if "shared" in isolation and "shared" not in dra and sharing is not None:
        provider = sharing["provider"]
        if provider == "aliyun-cgpu":
            out.update({"aliyun.com/gpu-mem": memory * gpus, "aliyun.com/gpu-count": gpus})
        elif provider == "hami":
            out.update(
                {
                    "nvidia.com/gpu": gpus * HAMI_SPLIT,
                    "nvidia.com/gpumem": memory * 1024 * gpus,
                    "nvidia.com/gpucores": 100 * gpus,
                }
            )
        elif provider == "volcano-vgpu":
            out.update(
                {
                    "volcano.sh/vgpu-number": gpus * HAMI_SPLIT,
                    "volcano.sh/vgpu-memory": memory * 1024 * gpus,
                    "volcano.sh/vgpu-cores": 100 * gpus,
                }
            )
        elif provider == "tencent-qgpu":
            out.update(
                {"tke.cloud.tencent.com/qgpu-memory": memory * gpus, "tke.cloud.tencent.com/qgpu-core": 100 * gpus}
            )
        elif provider == "time-slicing":
            name = "nvidia.com/gpu.shared" if sharing.get("renamed") else "nvidia.com/gpu"
            out[name] = gpus * TIME_SLICING_REPLICAS
        else:
            raise KeyError(f"the oracle does not know sharing provider {provider!r}")
    rdma = (pool.get("rdma") or {}).get("resource")
    if rdma:
        out[rdma["name"]] = RDMA_DEVICES
    for name in pool.get("offers") or []:
        out[name] = gpus
    return out


def _taints(pool: Mapping[str, Any]) -> tuple[dict[str, Any], ...]:
    if pool.get("taints") is not None:
        return tuple({"key": t["key"], "value": t.get("value") or "", "effect": t["effect"]} for t in pool["taints"])
    out = []
    for t in pool.get("tolerations") or []:
        if not t.get("key"):
            continue  # a blanket toleration in the pool says nothing about its taints
        op = t.get("operator") or "Equal"
        out.append(
            {"key": t["key"], "value": (t.get("value") or "") if op == "Equal" else None, "effect": t.get("effect")}
        )
    return tuple(out)


def read_policy(source: Path | Mapping[str, Any]) -> PolicyFacts:
    """A policy file (or its parsed document) as the oracle reads it."""
    doc = yaml.safe_load(source.read_text()) if isinstance(source, Path) else source
    spec = doc["spec"]
    cards = dict(CARDS)
    for name, model in (spec.get("gpuModels") or {}).items():
        memory = int(re.match(r"\d+", str(model["memory"])).group())  # type: ignore[union-attr]
        cards[name] = (memory, tuple((p[0], p[1]) for p in model.get("mig") or ()))
    pools = tuple(
        PoolFacts(
            name=name,
            selector=dict(pool.get("nodeSelector") or {}),
            taints=_taints(pool),
            allocatable=_allocatable(pool, cards),
            sliced=bool({"mig", "shared"} & set(pool.get("isolation") or ["exclusive"])),
            gpus_per_node=int(pool["gpusPerNode"]),
        )
        for name, pool in (spec.get("pools") or {}).items()
    )
    settings = spec.get("settings") or {}
    return PolicyFacts(
        doc=doc,
        pools=pools,
        classes=spec.get("classes") or {},
        entitlements=tuple(spec.get("namespaces") or ()),
        prefix=settings.get("prefix") or "gpu-admission.io",
        privileged_all_pools=settings.get("privilegedGPUPools") == "all",
        gpu_prefixes=tuple(settings.get("gpuResourcePrefixes") or DEFAULT_GPU_PREFIXES),
    )


# --- node generation ---------------------------------------------------------------------------------

NAME_CHARS = "abcdefgh0123456789-"
names = st.text(NAME_CHARS, min_size=1, max_size=8).map(lambda s: "n" + s.strip("-") + "x")
EXTRA_LABELS = {
    "topology.kubernetes.io/zone": ("zone-a", "zone-b"),
    "network.topology.nvidia.com/leaf": ("leaf-1", "leaf-2"),
    "example.com/rank": ("1", "5", "12"),
    "team": ("a", "b"),
}


def selector_keys(facts: PolicyFacts) -> set[str]:
    return {k for p in facts.pools for k in p.selector}


@st.composite
def nodes(draw, facts: PolicyFacts) -> tuple[Node, ...]:
    """1-2 nodes per pool and 1-2 CPU-only nodes, with random names, hostnames and extra labels."""
    fixed = selector_keys(facts)
    extra_keys = [k for k in EXTRA_LABELS if k not in fixed]
    out: list[Node] = []
    used: set[str] = set()

    def one(pool: PoolFacts | None) -> Node:
        name = draw(names.filter(lambda n: n not in used))
        used.add(name)
        labels: dict[str, str] = {}
        for key in draw(st.lists(st.sampled_from(extra_keys), unique=True, max_size=len(extra_keys))):
            labels[key] = draw(st.sampled_from(EXTRA_LABELS[key]))
        hostname = name if draw(st.integers(0, 4)) else name + "-host"
        labels["kubernetes.io/hostname"] = hostname
        taints: list[dict[str, str]] = []
        if pool is not None:
            labels.update(pool.selector)
            for t in pool.taints:
                taints.append(
                    {
                        "key": t["key"],
                        "value": t["value"] if t["value"] is not None else draw(st.sampled_from(TAINT_VALUES)),
                        "effect": t["effect"] or draw(st.sampled_from(EFFECTS)),
                    }
                )
        if draw(st.integers(0, 4)) == 0:
            taints.append({"key": "example.com/soft", "value": "", "effect": "PreferNoSchedule"})
        return Node(
            name=name,
            labels=labels,
            taints=tuple(taints),
            allocatable=dict(pool.allocatable) if pool is not None else {},
            pool=pool.name if pool is not None else None,
        )

    for pool in facts.pools:
        for _ in range(draw(st.integers(1, 2))):
            out.append(one(pool))
    for _ in range(draw(st.integers(1, 2))):
        out.append(one(None))
    return tuple(out)

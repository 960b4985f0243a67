"""Topology: pack the gang's pods, finest level first.

One preferred podAffinity term per level from ``node`` up to the requested level (weights 100, 50,
25, 12), or a required term at the requested level with ``:required``. A level whose topologyKey the
user already uses is left to the user. With Kueue the TAS annotation is added; with Volcano Jobs the
Job's ``networkTopology`` (tier = the level's rank among the pool's non-node levels).
"""

from __future__ import annotations

from webhook.engine.model.context import Context, TemplateState
from webhook.engine.model.gang import KUEUE_PREFERRED, KUEUE_REQUIRED, KUEUE_TAS
from webhook.engine.model.intent import Topology
from webhook.engine.patch import PatchBuilder
from webhook.policy.compiled import Policy
from webhook.policy.model import TOPOLOGY_ORDER, GangBackend, TopologyLevel

PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def _used_keys(patch: PatchBuilder, affinity_path: tuple) -> set[str]:
    used: set[str] = set()
    for term in patch.get((*affinity_path, PREFERRED)) or []:
        if isinstance(term, dict) and isinstance(term.get("podAffinityTerm"), dict):
            used.add(term["podAffinityTerm"].get("topologyKey"))
    for term in patch.get((*affinity_path, REQUIRED)) or []:
        if isinstance(term, dict):
            used.add(term.get("topologyKey"))
    return used


def _plan(
    policy: Policy, class_default: str, asked: Topology | None, labels: dict[TopologyLevel, str]
) -> tuple[TopologyLevel, bool, tuple[TopologyLevel, ...]] | None:
    """(level, required, the levels from node up to it that the pool labels), or None for "none";
    a function of the class, the intent and the pool, so remembered per policy."""
    return policy.recall(
        ("topology", class_default, asked, tuple(labels.items())), lambda: _levels(class_default, asked, labels)
    )


def _levels(
    class_default: str, asked: Topology | None, labels: dict[TopologyLevel, str]
) -> tuple[TopologyLevel, bool, tuple[TopologyLevel, ...]] | None:
    if asked is not None:
        level, required = asked.level, asked.required
    elif class_default == "none":
        return None
    else:
        name, _, mode = class_default.partition(":")
        level, required = next(t for t in TOPOLOGY_ORDER if t.value == name), mode == "required"
    levels = tuple(lvl for lvl in TOPOLOGY_ORDER[: TOPOLOGY_ORDER.index(level) + 1] if lvl in labels)
    return level, required, levels


def _kind_keys(ctx: Context, node_label: str, required: bool, patch: PatchBuilder) -> None:
    """The kind's own packing annotations (LeaderWorkerSet, JobSet exclusive-topology): the node label of
    the coarsest level, which its controller turns into affinity for each group or child Job."""
    for path, required_only in ctx.workload.topology:
        if (required or not required_only) and patch.set(path, node_label):  # type: ignore[arg-type]
            ctx.explain(f"topology: {path[-1]} {node_label}")


def apply(ctx: Context, state: TemplateState, patch: PatchBuilder) -> None:
    res, intent, gang = state.resolution, state.intent, ctx.gang
    if res is None or intent is None or gang is None:
        return
    if intent.topology_none:
        return
    plan = _plan(ctx.policy, res.cls.topology, intent.topology, res.pool.spec.topology)
    if plan is None:
        return
    level, required, levels = plan
    explain = ctx.trace is not None  # the explanation's strings are built only when asked for
    if gang.size > 1 and levels and ctx.workload.topology:
        _kind_keys(ctx, res.pool.spec.topology[levels[-1]], required, patch)
    if gang.size <= 1 or gang.selector is None:
        if explain:
            ctx.explain(f"topology {level.value}: single pod or unnamed gang, nothing to pack")
        return
    labels = res.pool.spec.topology
    if level not in labels and explain:
        ctx.explain(f"topology {level.value}: pool {res.pool.name} maps no node label to it; using {list(levels)}")
    if not levels:
        return
    tpl = state.tpl
    if ctx.workload.spec.gang.write_selector and gang.selector:
        for key, value in gang.selector.items():
            patch.set((*tpl.meta_path, "labels", key), value)
    affinity = (*tpl.spec_path, "affinity", "podAffinity")
    used = _used_keys(patch, affinity)
    selector = {"matchLabels": dict(gang.selector)}
    added: list[str] = []
    preferred: list[dict] = []
    required_terms: list[dict] = []
    for rank, lvl in enumerate(levels):
        key = labels[lvl]
        if key in used:
            if explain:
                ctx.explain(f"topology {lvl.value}: user already has a podAffinity term on {key}")
            continue
        term = {"labelSelector": selector, "topologyKey": key}
        if required and lvl is levels[-1]:
            required_terms.append(term)
            if explain:
                added.append(f"required {key}")
        else:
            preferred.append({"weight": max(1, 100 >> rank), "podAffinityTerm": term})
            if explain:
                added.append(f"{key} ({max(1, 100 >> rank)})")
    patch.extend((*affinity, PREFERRED), preferred)
    patch.extend((*affinity, REQUIRED), required_terms)
    coarsest = labels[levels[-1]]
    if gang.backend is GangBackend.KUEUE:
        annotations = patch.get((*tpl.meta_path, "annotations")) or {}
        if not any(k in annotations for k in KUEUE_TAS):
            key = KUEUE_REQUIRED if required else KUEUE_PREFERRED
            patch.set((*tpl.meta_path, "annotations", key), coarsest)
            if explain:
                added.append(f"kueue {key.rsplit('/', 1)[1]} {coarsest}")
    network = ctx.workload.network_topology
    if gang.backend is GangBackend.VOLCANO and network is not None and levels[-1] is not TOPOLOGY_ORDER[0]:
        tiers = [lvl for lvl in TOPOLOGY_ORDER[1:] if lvl in labels]
        tier = tiers.index(levels[-1]) + 1
        if patch.get(network) is None:
            mode = "hard" if required else "soft"
            patch.set(network, {"mode": mode, "highestTierAllowed": tier})
            if explain:
                added.append(f"volcano networkTopology {mode} tier {tier}")
    if added:
        ctx.explain(f"topology {level.value}: podAffinity {'; '.join(added)}")

"""SPEC §3 row 'topology': pack the gang's pods, finest level first.

One preferred podAffinity term per level from ``node`` up to the requested level (weights 100, 50,
25, 12), or a required term at the requested level with ``:required``. A level whose topologyKey the
user already uses is left to the user. With Kueue the TAS annotation is added; with Volcano Jobs the
Job's ``networkTopology`` (tier = the level's rank among the pool's non-node levels).
"""

from __future__ import annotations

from webhook.engine.context import Context, TemplateState
from webhook.engine.patch import PatchBuilder
from webhook.engine.workload import Kind
from webhook.policy.model import TOPOLOGY_ORDER, GangBackend

PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
KUEUE_PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
KUEUE_REQUIRED = "kueue.x-k8s.io/podset-required-topology"
KUEUE_TAS = (KUEUE_PREFERRED, KUEUE_REQUIRED, "kueue.x-k8s.io/podset-unconstrained-topology")


def _used_keys(patch: PatchBuilder, affinity_path: tuple) -> set[str]:
    used: set[str] = set()
    for term in patch.get((*affinity_path, PREFERRED)) or []:
        if isinstance(term, dict) and isinstance(term.get("podAffinityTerm"), dict):
            used.add(term["podAffinityTerm"].get("topologyKey"))
    for term in patch.get((*affinity_path, REQUIRED)) or []:
        if isinstance(term, dict):
            used.add(term.get("topologyKey"))
    return used


def apply(ctx: Context, state: TemplateState, patch: PatchBuilder) -> None:
    res, intent, gang = state.resolution, state.intent, ctx.gang
    if res is None or intent is None or gang is None:
        return
    if intent.topology_none:
        return
    if intent.topology is not None:
        level, required = intent.topology.level, intent.topology.required
    else:
        spec = res.cls.topology
        if spec == "none":
            return
        name, _, mode = spec.partition(":")
        level, required = next(t for t in TOPOLOGY_ORDER if t.value == name), mode == "required"
    if gang.size <= 1 or gang.selector is None:
        ctx.explain(f"topology {level.value}: single pod or unnamed gang, nothing to pack")
        return
    labels = res.pool.spec.topology
    levels = [lvl for lvl in TOPOLOGY_ORDER[: TOPOLOGY_ORDER.index(level) + 1] if lvl in labels]
    if level not in labels:
        ctx.explain(f"topology {level.value}: pool {res.pool.name} maps no node label to it; using {levels}")
    if not levels:
        return
    tpl = state.tpl
    if ctx.kind is Kind.POD and gang.selector:
        for key, value in gang.selector.items():
            patch.set((*tpl.meta_path, "labels", key), value)
    affinity = (*tpl.spec_path, "affinity", "podAffinity")
    used = _used_keys(patch, affinity)
    selector = {"matchLabels": dict(gang.selector)}
    added: list[str] = []
    for rank, lvl in enumerate(levels):
        key = labels[lvl]
        if key in used:
            ctx.explain(f"topology {lvl.value}: user already has a podAffinity term on {key}")
            continue
        term = {"labelSelector": selector, "topologyKey": key}
        if required and lvl is levels[-1]:
            patch.append((*affinity, REQUIRED), term)
            added.append(f"required {key}")
        else:
            patch.append((*affinity, PREFERRED), {"weight": max(1, 100 >> rank), "podAffinityTerm": term})
            added.append(f"{key} ({max(1, 100 >> rank)})")
    coarsest = labels[levels[-1]]
    if gang.backend is GangBackend.KUEUE:
        annotations = patch.get((*tpl.meta_path, "annotations")) or {}
        if not any(k in annotations for k in KUEUE_TAS):
            key = KUEUE_REQUIRED if required else KUEUE_PREFERRED
            patch.set((*tpl.meta_path, "annotations", key), coarsest)
            added.append(f"kueue {key.rsplit('/', 1)[1]} {coarsest}")
    if (
        gang.backend is GangBackend.VOLCANO
        and ctx.kind is Kind.VOLCANO_JOB
        and levels[-1] is not TOPOLOGY_ORDER[0]
    ):
        tiers = [lvl for lvl in TOPOLOGY_ORDER[1:] if lvl in labels]
        tier = tiers.index(levels[-1]) + 1
        if patch.get(("spec", "networkTopology")) is None:
            mode = "hard" if required else "soft"
            patch.set(("spec", "networkTopology"), {"mode": mode, "highestTierAllowed": tier})
            added.append(f"volcano networkTopology {mode} tier {tier}")
    if added:
        ctx.explain(f"topology {level.value}: podAffinity {'; '.join(added)}")

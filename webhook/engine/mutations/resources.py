"""Exclusive, MIG and shared GPUs: put the backend's resource names on the GPU container.

GPU keys go to ``limits``; where ``requests`` already holds a key it gets the same value, so the
apiserver's "requests must equal limits" rule for extended resources holds. GPU keys the user wrote
that the chosen backend does not use are removed from both maps (the intent replaces them).
"""

from __future__ import annotations

from webhook.engine.model.context import Context, TemplateState
from webhook.engine.model.devices import RDMA, family
from webhook.engine.patch import PatchBuilder
from webhook.quantity import QuantityError, parse_quantity


def _same(a: object, b: str) -> bool:
    if a == b:  # the usual case, and always on /validate, where our own value comes back
        return True
    try:
        return parse_quantity(a) == parse_quantity(b)
    except QuantityError:
        return False


def apply(ctx: Context, state: TemplateState, patch: PatchBuilder) -> None:
    res = state.resolution
    if res is None or not res.resources:
        return
    target = state.target()
    if target is None:
        return
    base = (*state.tpl.spec_path, target[0], target[1], "resources")
    policy = ctx.policy
    # Read the maps as they stand before this step; writes below only touch keys already read.
    resources = patch.get(base)
    resources = resources if isinstance(resources, dict) else {}
    for section in ("limits", "requests"):
        current = resources.get(section)
        if not isinstance(current, dict):
            continue
        for key in list(current):
            if key in res.resources:
                continue
            fam = family(key, gpu_prefixes=policy.gpu_prefixes, rdma=policy.rdma_resources)
            if fam is not None and fam != RDMA:
                patch.remove((*base, section, key))
    if ctx.trace is not None:
        name = patch.get((*state.tpl.spec_path, target[0], target[1], "name"))
        ctx.explain(
            f"resources: {', '.join(f'{k}: {v}' for k, v in res.resources.items())} on {target[0]} {name!r}"
        )
    limits = resources.get("limits")
    limits = limits if isinstance(limits, dict) else {}
    requests = resources.get("requests")
    for key, value in res.resources.items():
        current = limits.get(key)
        if current is None or not _same(current, value):
            patch.set((*base, "limits", key), value, overwrite=True)
        if isinstance(requests, dict) and key in requests and not _same(requests[key], value):
            patch.set((*base, "requests", key), value, overwrite=True)
    for key, value in res.pod_labels.items():  # a stack that reads the pod's labels (ACK multi-card sharing)
        path = (*state.tpl.meta_path, "labels", key)
        if patch.get(path) != value:
            patch.set(path, value, overwrite=True)

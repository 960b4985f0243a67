"""SPEC §3 rows 'exclusive', 'mig', 'shared': put the backend's resource names on the GPU container.

GPU keys go to ``limits``; where ``requests`` already holds a key it gets the same value, so the
apiserver's "requests must equal limits" rule for extended resources holds. GPU keys the user wrote
that the chosen backend does not use are removed from both maps (the intent replaces them).
"""

from __future__ import annotations

from webhook.engine.context import Context, TemplateState
from webhook.engine.patch import PatchBuilder
from webhook.engine.resources import RDMA, family
from webhook.quantity import QuantityError, parse_quantity


def _same(a: object, b: str) -> bool:
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
    for section in ("limits", "requests"):
        current = patch.get((*base, section))
        if not isinstance(current, dict):
            continue
        for key in list(current):
            fam = family(key, gpu_prefixes=policy.gpu_prefixes, rdma=policy.rdma_resources)
            if fam is not None and fam != RDMA and key not in res.resources:
                patch.remove((*base, section, key))
    if ctx.trace is not None:
        name = patch.get((*state.tpl.spec_path, target[0], target[1], "name"))
        ctx.explain(
            f"resources: {', '.join(f'{k}: {v}' for k, v in res.resources.items())} on {target[0]} {name!r}"
        )
    for key, value in res.resources.items():
        path = (*base, "limits", key)
        current = patch.get(path)
        if current is None or not _same(current, value):
            patch.set(path, value, overwrite=True)
        requests = patch.get((*base, "requests"))
        if isinstance(requests, dict) and key in requests and not _same(requests[key], value):
            patch.set((*base, "requests", key), value, overwrite=True)

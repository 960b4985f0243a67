"""DRA pools: intent on a DRA pool becomes a claim on the platform's template.

The pod gets ``spec.resourceClaims: [{name, resourceClaimTemplateName}]`` and its GPU container
``resources.claims: [{name}]``; the GPU extended resources the claim replaces are removed from that
container's limits and requests. Nothing is created: the template is the platform's, applied with
``policy render`` output (admission stays ``sideEffects: None`` and dry-run safe). A claim of the
same name the user already wrote is kept when it names our template (idempotence) and otherwise
reported, never overwritten: ``spec.resourceClaims`` is immutable once the pod exists, and the user's
claim may be a device they meant to have.
"""

from __future__ import annotations

from typing import Any

from webhook.engine.model.context import Context, Finding, TemplateState
from webhook.engine.model.devices import RDMA, family
from webhook.engine.patch import PatchBuilder


def _conflict(ctx: Context, state: TemplateState) -> tuple[int, dict[str, Any]] | None:
    """The user's own ``spec.resourceClaims`` entry with our claim's name and another source, if any."""
    res = state.resolution
    assert res is not None and res.claim is not None
    for index, entry in enumerate(state.tpl.spec.get("resourceClaims") or ()):
        if isinstance(entry, dict) and entry.get("name") == res.claim_name:
            if entry.get("resourceClaimTemplateName") == res.claim.name and not entry.get("resourceClaimName"):
                return None
            return index, entry
    return None


def check(ctx: Context, state: TemplateState) -> None:
    """The finding the step would report, for an object judged as received."""
    if state.resolution is not None and state.resolution.claim is not None:
        _report(ctx, state)


def _report(ctx: Context, state: TemplateState) -> bool:
    found = _conflict(ctx, state)
    if found is None:
        return False
    index, _ = found
    res = state.resolution
    assert res is not None and res.claim is not None
    ctx.findings.append(
        Finding(
            "intent-invalid",
            state.tpl.dotted("spec", "resourceClaims", index),
            f"rename this resource claim: the webhook adds claim {res.claim_name!r} on template "
            f"{res.claim.name} for the {state.class_name} GPU, and this one has that name",
            state.class_name,
        )
    )
    return True


def apply(ctx: Context, state: TemplateState, patch: PatchBuilder) -> None:
    res = state.resolution
    if res is None or res.claim is None:
        return
    target = state.target()
    if target is None or _report(ctx, state):
        return
    spec = state.tpl.spec_path
    base = (*spec, target[0], target[1], "resources")
    policy = ctx.policy
    resources = patch.get(base)
    resources = resources if isinstance(resources, dict) else {}
    for section in ("limits", "requests"):
        current = resources.get(section)
        if not isinstance(current, dict):
            continue
        for key in list(current):
            fam = family(key, gpu_prefixes=policy.gpu_prefixes, rdma=policy.rdma_resources)
            if fam is not None and fam != RDMA:
                patch.remove((*base, section, key))
    claims = patch.get((*spec, "resourceClaims"))
    if not any(isinstance(c, dict) and c.get("name") == res.claim_name for c in claims or ()):
        patch.extend((*spec, "resourceClaims"), [{"name": res.claim_name, "resourceClaimTemplateName": res.claim.name}])
    used = resources.get("claims")
    if not any(isinstance(c, dict) and c.get("name") == res.claim_name and not c.get("request") for c in used or ()):
        patch.extend((*base, "claims"), [{"name": res.claim_name}])
    if ctx.trace is not None:
        ctx.explain(
            f"dra: claim {res.claim_name} -> ResourceClaimTemplate {res.claim.name} ({res.claim.device_class}) "
            f"on {target[0]} {target[1]}"
        )

"""Rules fed by intent parsing and pool resolution: the user asked for something the policy cannot give."""

from __future__ import annotations

from collections.abc import Iterable

from webhook.engine.model.context import Context, Finding
from webhook.engine.model.decision import Action
from webhook.engine.rules.registry import resolution_findings, rule


@rule(
    "intent-invalid",
    Action.DENY,
    "unknown class / isolation / model / pool, malformed quantity or integer; a container intent naming no "
    "regular container (an init, sidecar or ephemeral one)",
    needs=("findings",),
)
def intent_invalid(ctx: Context) -> Iterable[Finding]:
    return resolution_findings(ctx, "intent-invalid")


@rule(
    "intent-unknown-key",
    Action.WARN,
    "a label or annotation under the intent prefix that is not an intent key (a typo such as gpu-mem), or an "
    "intent key on the wrong side (workload as an annotation): ignored by the webhook, so named with the key meant",
    needs=("findings",),
)
def intent_unknown_key(ctx: Context) -> Iterable[Finding]:
    return resolution_findings(ctx, "intent-unknown-key")


@rule(
    "class-not-allowed",
    Action.DENY,
    "namespace not entitled to the class or pool, or unknown to the server (not cached, not found by a GET)",
    needs=("findings",),
)
def class_not_allowed(ctx: Context) -> Iterable[Finding]:
    return resolution_findings(ctx, "class-not-allowed")


@rule("rdma-unavailable", Action.DENY, "RDMA asked for on a pool without RDMA", needs=("findings",))
def rdma_unavailable(ctx: Context) -> Iterable[Finding]:
    return resolution_findings(ctx, "rdma-unavailable")

"""Rules fed by intent parsing and pool resolution: the user asked for something the policy cannot give."""

from __future__ import annotations

from collections.abc import Iterable

from webhook.engine.model.context import Context, Finding
from webhook.engine.rules.registry import resolution_findings, rule


@rule(
    "intent-invalid",
    needs=("findings",),
)
def intent_invalid(ctx: Context) -> Iterable[Finding]:
    return resolution_findings(ctx, "intent-invalid")


@rule(
    "intent-unknown-key",
    needs=("findings",),
)
def intent_unknown_key(ctx: Context) -> Iterable[Finding]:
    return resolution_findings(ctx, "intent-unknown-key")


@rule(
    "class-not-allowed",
    needs=("findings",),
)
def class_not_allowed(ctx: Context) -> Iterable[Finding]:
    return resolution_findings(ctx, "class-not-allowed")


@rule("rdma-unavailable", needs=("findings",))
def rdma_unavailable(ctx: Context) -> Iterable[Finding]:
    return resolution_findings(ctx, "rdma-unavailable")

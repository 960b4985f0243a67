"""All validation rules, registered on import. ``RULES`` maps rule id -> Rule (the rule catalogue in docs/policy.md)."""

from webhook.engine.rules import (  # noqa: F401
    capacity,
    claim_marker,
    claims,
    compute_domain,
    device_taints,
    gang,
    hygiene,
    intent,
    placement,
    resources,
    scheduling,
    schema,
    workload_valid,
)
from webhook.engine.rules.registry import RULES, Rule, effective_action, rule, violation

__all__ = ["RULES", "Rule", "effective_action", "rule", "violation"]

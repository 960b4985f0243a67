"""All validation rules, registered on import. ``RULES`` maps rule id -> Rule (SPEC §4 table)."""

from webhook.engine.rules import (  # noqa: F401
    claims,
    gang,
    hygiene,
    intent,
    placement,
    resources,
    schema,
    workload_valid,
)
from webhook.engine.rules.registry import RULES, Rule, effective_action, rule

__all__ = ["RULES", "Rule", "effective_action", "rule"]

"""All validation rules, registered on import. ``RULES`` maps rule id -> Rule (SPEC §4 table)."""

from webhook.engine.rules import claims, gang, hygiene, intent, placement, resources, schema  # noqa: F401
from webhook.engine.rules.registry import RULES, Rule, effective_action, rule

__all__ = ["RULES", "Rule", "effective_action", "rule"]

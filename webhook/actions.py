"""Rule actions, shared by the policy model (which sets them) and the engine (which applies them)."""

from enum import StrEnum


class Action(StrEnum):
    """What a violated rule does."""

    DENY = "deny"  # the request is rejected (403) with every violation listed
    WARN = "warn"  # admitted; kubectl shows an admission warning
    AUDIT = "audit"  # admitted; audit annotation, log line and metric only
    OFF = "off"  # the rule does not run for this scope

"""Rule actions, shared by the policy model (which sets them) and the engine (which applies them)."""

from enum import StrEnum


class Action(StrEnum):
    """What a violated rule does."""

    DENY = "deny"  # the request is rejected (403) with every violation listed
    WARN = "warn"  # admitted; kubectl shows an admission warning
    AUDIT = "audit"  # admitted; audit annotation, log line and metric only
    OFF = "off"  # the rule does not run for this scope


ENGINE_ERROR = "engine-error"
"""The verdict for an object the engine could not judge: denied at ``/validate``, never off. No
check finds it (the admission server gives it when the engine raises; ``check`` reports an error), so
it is not in the engine's rule registry, and the policy loader refuses ``rules.engine-error``."""

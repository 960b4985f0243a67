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


class Enforcement(StrEnum):
    """The policy-wide enforcement mode (``settings.enforcement``): what a finding whose rule says ``deny``
    does. Rules keep their own actions; the mode caps ``deny`` at ``warn`` or ``audit`` so that a platform
    team can observe what would be denied before anything is, without editing a rule."""

    ENFORCE = "enforce"  # deny is deny: the product's behaviour
    WARN = "warn"  # every deny becomes an admission warning that says it would be denied
    AUDIT = "audit"  # every deny becomes an audit record (annotation, log, metric); nothing shown to the user


def enforced(action: Action, mode: Enforcement) -> Action:
    """The action a finding takes under ``mode``: only ``deny`` changes, to the mode's own action."""
    if action is not Action.DENY or mode is Enforcement.ENFORCE:
        return action
    return Action.WARN if mode is Enforcement.WARN else Action.AUDIT

"""Policy model, loader and compiled form."""

from webhook.policy.compiled import Policy
from webhook.policy.loader import PolicyError, PolicyIssue, load_policy, load_policy_texts

__all__ = ["Policy", "PolicyError", "PolicyIssue", "load_policy", "load_policy_texts"]

"""Policy model, loader and compiled form.

The names below are loaded on first use, so that importing one leaf of the package (the
sharing-stack table, which the CLI reads first to report a bad table as an error) does not build
the whole policy model."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from webhook.policy.compiled import Policy
    from webhook.policy.loader import PolicyError, PolicyIssue, load_policy, load_policy_texts

__all__ = ["Policy", "PolicyError", "PolicyIssue", "load_policy", "load_policy_texts"]

_WHERE = {
    "Policy": "webhook.policy.compiled",
    "PolicyError": "webhook.policy.loader",
    "PolicyIssue": "webhook.policy.loader",
    "load_policy": "webhook.policy.loader",
    "load_policy_texts": "webhook.policy.loader",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'webhook.policy' has no attribute {name!r}")
    value = getattr(import_module(_WHERE[name]), name)
    globals()[name] = value
    return value

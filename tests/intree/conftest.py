"""Policies the in-tree tests run on: the shipped one, the test policies, and variants with per-namespace
and per-class actions (so that Warn and Audit bindings exist)."""

from __future__ import annotations

import functools

import yaml

from tests.conftest import POLICIES, ROOT
from webhook.policy import load_policy, load_policy_texts
from webhook.policy.compiled import Policy
from webhook.render.core import RenderOptions
from webhook.render.intree import render as render_in_tree

POLICY_DIRS = {
    "default": POLICIES,
    "providers": ROOT / "tests" / "engine" / "policies",
    "dra-example": ROOT / "examples" / "dra-policy",
    "gangs": ROOT / "tests" / "intree" / "policies",  # one gang-required class per backend (gang-required)
}

# rule actions that differ per namespace and class, exemptions, and raw requests left unpinned
VARIANT = {
    "rawRequests": "deny",
    "rules": {
        "node-name-set": {
            "namespaces": [{"selector": {"matchLabels": {"gpu-admission.io/tier": "serving"}}, "action": "warn"}]
        },
        "privileged-gpu": {"classes": {"dev": "audit"}},
        "class-not-allowed": {"exempt": [{"matchLabels": {"gpu-admission.io/tier": "sandbox"}}]},
        "placement-missing": {"classes": {"batch": "warn"}},
        "gpu-memory-exceeded": {"classes": {"dev": "warn"}},
    },
}


@functools.cache
def policy_named(name: str) -> Policy:
    if name != "variant":
        return load_policy(POLICY_DIRS[name])
    doc = yaml.safe_load((POLICIES / "default.yaml").read_text())
    doc["spec"]["settings"]["rawRequests"] = VARIANT["rawRequests"]
    doc["spec"].setdefault("rules", {}).update(VARIANT["rules"])
    return load_policy_texts([("variant.yaml", yaml.safe_dump(doc))])


@functools.cache
def in_tree(name: str, kube_version: tuple[int, int] = (1, 30)) -> tuple:
    return tuple(render_in_tree(policy_named(name), RenderOptions(kube_version=kube_version)))


NAMES = ("default", "providers", "dra-example", "variant", "gangs")

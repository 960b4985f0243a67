"""Documents that sit beside manifests but are not objects a cluster admits, each named with what to do instead.

A repository (or this one's ``examples/``) holds AdmissionReviews, PolicyTest suites, the policy itself, CI
configuration and namespace-label files next to its workloads. ``check DIR`` must not call them unknown
workload kinds ("declare it in workloadKinds" is wrong advice for an AdmissionReview) nor invalid objects
(exit 2 for a GitHub Actions file): it skips them and says which tool reads them. Anything else without
``apiVersion``/``kind`` stays invalid, since a manifest that lost its kind is a real mistake.
"""

from __future__ import annotations

import re
from typing import Any

# (API group, kind) -> why it is not judged and what reads it
TOOL_DOCUMENTS: dict[tuple[str, str], str] = {
    ("admission.k8s.io", "AdmissionReview"): "an AdmissionReview is what the apiserver sends the webhook, not a "
    "manifest; send it to /mutate or /validate, or check the object it carries: "
    "`jq .request.object FILE | gpu-admission check -`",
    ("gpu-admission.io", "PolicyTest"): "a PolicyTest suite, not a manifest; run it with `gpu-admission policy test "
    "FILE`",
    ("gpu-admission.io", "GPUPolicy"): "the admission policy itself, not a workload; lint it with `gpu-admission "
    "policy lint DIR`",
}

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def tool_document(obj: dict[str, Any]) -> str | None:
    """Why an object with apiVersion and kind is a tool's document (None: a cluster object)."""
    api_version = str(obj.get("apiVersion") or "")
    group = api_version.rpartition("/")[0]
    return TOOL_DOCUMENTS.get((group, str(obj.get("kind") or "")))


def _github_workflow(doc: dict[Any, Any]) -> bool:
    # YAML 1.1 reads the bare key `on` as True
    return "jobs" in doc and ("on" in doc or True in doc)


def _gitlab_ci(doc: dict[Any, Any]) -> bool:
    return "stages" in doc or any(isinstance(v, dict) and "script" in v for v in doc.values())


def _namespace_labels(doc: dict[Any, Any]) -> bool:
    """``{namespace: {label: value}}``: the file ``--namespace-labels`` reads."""
    return bool(doc) and all(
        isinstance(name, str) and _DNS_LABEL.match(name) and isinstance(labels, dict)
        and all(isinstance(k, str) and isinstance(v, str | int | float | bool) for k, v in labels.items())
        for name, labels in doc.items()
    )


def not_a_manifest(doc: Any) -> str | None:
    """Why a mapping without apiVersion/kind is a known non-manifest file (None: an invalid object)."""
    if not isinstance(doc, dict) or doc.get("apiVersion") or doc.get("kind"):
        return None
    if _github_workflow(doc):
        return "a GitHub Actions workflow, not a manifest"
    if _gitlab_ci(doc):
        return "GitLab CI configuration, not a manifest"
    if _namespace_labels(doc):
        return "a namespace-labels map, not a manifest; pass it with `--namespace-labels FILE`"
    return None

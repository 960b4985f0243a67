"""The Volcano Job (batch.volcano.sh/v1alpha1) fields this product knows, written from Volcano's API.

Used to report unknown fields with a "did you mean" hint *before* kubectl fails on them (strict field
validation) or the apiserver silently prunes them (the seed chapter's ``minMember`` is a PodGroup
field, not a Job field). Pod templates are left to the Kubernetes schema. A test checks this table
against the real CRD, so a Volcano release that adds a field shows up as a failing test, not as a
false alarm in users' CI.
"""

from __future__ import annotations

from typing import Any

_NETWORK_TOPOLOGY = {"mode": None, "highestTierAllowed": None, "highestTierName": None}
_POLICY = {"action": None, "event": None, "events": None, "exitCode": None, "timeout": None}

# field -> sub-description (dict), list-of-description ([dict]), or None (opaque / leaf)
VOLCANO_JOB: dict[str, Any] = {
    "apiVersion": None,
    "kind": None,
    "metadata": None,
    "status": None,
    "spec": {
        "schedulerName": None,
        "minAvailable": None,
        "minSuccess": None,
        "volumes": [{"mountPath": None, "volumeClaimName": None, "volumeClaim": None}],
        "tasks": [
            {
                "name": None,
                "replicas": None,
                "minAvailable": None,
                "template": None,
                "policies": [_POLICY],
                "topologyPolicy": None,
                "maxRetry": None,
                "dependsOn": {"name": None, "iteration": None},
                "partitionPolicy": {
                    "totalPartitions": None,
                    "partitionSize": None,
                    "minPartitions": None,
                    "networkTopology": _NETWORK_TOPOLOGY,
                },
            }
        ],
        "policies": [_POLICY],
        "plugins": None,
        "runningEstimate": None,
        "queue": None,
        "maxRetry": None,
        "ttlSecondsAfterFinished": None,
        "priorityClassName": None,
        "networkTopology": _NETWORK_TOPOLOGY,
    },
}

# Fields users bring from neighbouring APIs, with where the meaning lives in a Volcano Job.
KNOWN_MIXUPS = {
    "minMember": "minAvailable",  # PodGroup spec.minMember == Job spec.minAvailable
    "minTaskMember": "tasks[].minAvailable",
    "parallelism": "tasks[].replicas",
    "replicas": "tasks[].replicas",
    "queueName": "queue",
}


def unknown_fields(
    obj: Any, description: Any = VOLCANO_JOB, path: tuple = ()
) -> list[tuple[tuple, str, list[str]]]:
    """(path, unknown key, known keys at that level) for every key the description does not know."""
    out: list[tuple[tuple, str, list[str]]] = []
    if isinstance(description, list):
        if isinstance(obj, list):
            for i, item in enumerate(obj):
                out.extend(unknown_fields(item, description[0], (*path, i)))
        return out
    if not isinstance(description, dict) or not isinstance(obj, dict):
        return out
    for key, value in obj.items():
        if key not in description:
            out.append(((*path, key), str(key), list(description)))
        elif description[key] is not None:
            out.extend(unknown_fields(value, description[key], (*path, key)))
    return out

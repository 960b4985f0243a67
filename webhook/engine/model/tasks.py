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


# --- How Volcano reads a Job's tasks (its mutating webhook's defaults, its controller's order) -------


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def tasks_of(obj: Any, path: tuple[str | int, ...]) -> list[dict[str, Any]]:
    """The kind's task list (``tasks`` in the kind table: a Volcano Job's ``spec.tasks``) as a list of maps
    (anything else reads as no task: the shape gate reports it)."""
    node = obj
    for part in path:
        node = node.get(part) if isinstance(node, dict) and isinstance(part, str) else None
    return [t if isinstance(t, dict) else {} for t in node] if isinstance(node, list) else []


def task_name(task: dict[str, Any], index: int) -> str:
    """The name Volcano gives the task: its own, or ``default<index>`` (the mutating webhook's default
    for an empty name), so that messages name the task the user will see in pod names."""
    name = task.get("name")
    return name if isinstance(name, str) and name else f"default{index}"


def task_replicas(task: dict[str, Any]) -> int:
    """Pods the task creates: ``replicas`` (absent: 0); a negative count creates none."""
    return max(0, _int(task.get("replicas")) or 0)


def task_min_available(task: dict[str, Any]) -> int:
    """The task's gang as Volcano defaults it: ``minAvailable``, else ``minPartitions * partitionSize``
    when ``minPartitions`` > 0, else ``replicas``."""
    own = _int(task.get("minAvailable"))
    if own is not None:
        return own
    partition = task.get("partitionPolicy")
    if isinstance(partition, dict):
        min_partitions, size = _int(partition.get("minPartitions")), _int(partition.get("partitionSize"))
        if min_partitions and min_partitions > 0 and size:
            return min_partitions * size
    return task_replicas(task)


def depends_on(task: dict[str, Any]) -> list[str]:
    """Names in ``dependsOn.name``: Volcano creates this task's pods only after those tasks run."""
    deps = task.get("dependsOn")
    names = deps.get("name") if isinstance(deps, dict) else None
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []


def first_wave(tasks: list[dict[str, Any]]) -> int | None:
    """Pods Volcano creates at the start when some task has ``dependsOn`` (the tasks without one),
    or None when no task waits for another (every pod is created at once)."""
    if not any(depends_on(t) for t in tasks):
        return None
    return sum(task_replicas(t) for t in tasks if not depends_on(t))


def default_min_available(tasks: list[dict[str, Any]]) -> int:
    """The job ``minAvailable`` Volcano's mutating webhook writes when it is absent or 0."""
    return sum(task_min_available(t) for t in tasks)

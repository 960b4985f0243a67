"""Where the pod templates live in each kind the product understands.

The engine never special-cases kinds beyond this table: a Pod is "a template at the root", a Job is
"one template at spec.template", a Volcano Job is "one template per task".
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from typing import Any


class Kind(StrEnum):
    POD = "Pod"
    JOB = "Job"
    VOLCANO_JOB = "VolcanoJob"
    CRONJOB = "CronJob"
    DEPLOYMENT = "Deployment"
    STATEFULSET = "StatefulSet"
    REPLICASET = "ReplicaSet"
    DAEMONSET = "DaemonSet"


MUTABLE_KINDS = frozenset({Kind.POD, Kind.JOB, Kind.VOLCANO_JOB})
"""Kinds that get a patch. Controllers are validated as their pods would be after mutation (SPEC §4)."""

KINDS_BY_TYPE: dict[tuple[str, str], Kind] = {  # (apiVersion, kind) -> Kind
    ("v1", "Pod"): Kind.POD,
    ("batch/v1", "Job"): Kind.JOB,
    ("batch.volcano.sh/v1alpha1", "Job"): Kind.VOLCANO_JOB,
    ("batch/v1", "CronJob"): Kind.CRONJOB,
    ("apps/v1", "Deployment"): Kind.DEPLOYMENT,
    ("apps/v1", "StatefulSet"): Kind.STATEFULSET,
    ("apps/v1", "ReplicaSet"): Kind.REPLICASET,
    ("apps/v1", "DaemonSet"): Kind.DAEMONSET,
}


@dataclass(slots=True)
class Template:
    """One pod template inside an object: JSON paths to its metadata and spec, and its replica count.

    Read-only by convention; not frozen, since one or more are built per review (see ``Decision``)."""

    path: tuple[str | int, ...]  # path of the template itself (() for a Pod)
    metadata: dict[str, Any]
    spec: dict[str, Any]
    replicas: int
    task: str | None = None  # Volcano task name

    @property
    def meta_path(self) -> tuple[str | int, ...]:
        return (*self.path, "metadata")

    @property
    def spec_path(self) -> tuple[str | int, ...]:
        return (*self.path, "spec")

    def dotted(self, *rest: str | int) -> str:
        return dotted((*self.path, *rest))


def classify(obj: Any) -> Kind | None:
    if not isinstance(obj, dict):
        return None
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return None
    return KINDS_BY_TYPE.get((api_version, kind))


def _map(value: Any) -> dict[str, Any]:
    return value if type(value) is dict or isinstance(value, dict) else {}


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def templates(obj: dict[str, Any], kind: Kind) -> list[Template]:
    spec = _map(obj.get("spec"))
    if kind is Kind.POD:
        return [Template((), _map(obj.get("metadata")), spec, 1)]
    if kind is Kind.VOLCANO_JOB:
        out = []
        tasks = spec.get("tasks")
        for i, task in enumerate(tasks if isinstance(tasks, list) else []):
            task = _map(task)
            tpl = _map(task.get("template"))
            out.append(
                Template(
                    ("spec", "tasks", i, "template"),
                    _map(tpl.get("metadata")),
                    _map(tpl.get("spec")),
                    _int(task.get("replicas"), 0),
                    task=task.get("name") if isinstance(task.get("name"), str) else None,
                )
            )
        return out
    if kind is Kind.CRONJOB:
        job_spec = _map(_map(spec.get("jobTemplate")).get("spec"))
        tpl = _map(job_spec.get("template"))
        return [
            Template(
                ("spec", "jobTemplate", "spec", "template"),
                _map(tpl.get("metadata")),
                _map(tpl.get("spec")),
                _int(job_spec.get("parallelism"), 1),
            )
        ]
    tpl = _map(spec.get("template"))
    replicas = {
        Kind.JOB: _int(spec.get("parallelism"), 1),
        Kind.DAEMONSET: 1,
    }.get(kind, _int(spec.get("replicas"), 1))
    return [Template(("spec", "template"), _map(tpl.get("metadata")), _map(tpl.get("spec")), replicas)]


def dotted(path: tuple[str | int, ...] | list[str | int]) -> str:
    """Kubernetes field-path style: ``spec.containers[0].resources.limits[nvidia.com/gpu]``.

    Cached (bounded) like ``patch.pointer``: intent keys, findings and the resolve memo name the same
    few dozen paths on every review."""
    return _dotted(tuple(path))


@lru_cache(maxsize=4096)
def _dotted(path: tuple[str | int, ...]) -> str:
    out: list[str] = []
    for part in path:
        if isinstance(part, int) or "." in part or "/" in part:
            out.append(f"[{part}]")
        else:
            out.append(("." if out else "") + part)
    return "".join(out)

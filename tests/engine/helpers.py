"""Builders for the objects engine tests feed in, and the checks every mutated object must pass."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from typing import Any

import jsonpatch
import jsonschema
import yaml

from tests.conftest import CRDS, TRAINING_NS, need_shared
from webhook.engine import Decision, Request, report

PREFIX = "gpu-admission.io"


def container(name: str = "main", limits: dict | None = None, requests: dict | None = None, **extra: Any) -> dict:
    c: dict[str, Any] = {"name": name, "image": "registry.example/app:1"}
    if limits is not None or requests is not None:
        c["resources"] = {}
        if limits is not None:
            c["resources"]["limits"] = limits
        if requests is not None:
            c["resources"]["requests"] = requests
    c.update(extra)
    return c


def intent(workload: str | None = None, **annotations: Any) -> dict:
    """Pod/template metadata with the intent contract: ``gpu_memory="4Gi"`` -> ``gpu-admission.io/gpu-memory``."""
    meta: dict[str, Any] = {}
    if workload is not None:
        meta["labels"] = {f"{PREFIX}/workload": workload}
    if annotations:
        meta["annotations"] = {f"{PREFIX}/{k.replace('_', '-')}": str(v) for k, v in annotations.items()}
    return meta


def pod(meta: dict | None = None, containers: list | None = None, name: str = "p", **spec: Any) -> dict:
    metadata = {"name": name, **copy.deepcopy(meta or {})}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"containers": containers or [container()], **spec},
    }


def job(
    meta: dict | None = None,
    containers: list | None = None,
    parallelism: int | None = 2,
    name: str = "train",
    job_meta: dict | None = None,
    **spec: Any,
) -> dict:
    obj: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, **copy.deepcopy(job_meta or {})},
        "spec": {
            "template": {
                "metadata": copy.deepcopy(meta or {}),
                "spec": {"restartPolicy": "Never", "containers": containers or [container()], **spec},
            }
        },
    }
    if parallelism is not None:
        obj["spec"]["parallelism"] = parallelism
    return obj


def vcjob(
    meta: dict | None = None,
    replicas: int = 8,
    name: str = "train-qwen",
    min_available: int | None = 8,
    containers: list | None = None,
    job_meta: dict | None = None,
    tasks: list | None = None,
) -> dict:
    obj: dict[str, Any] = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, **copy.deepcopy(job_meta or {})},
        "spec": {
            "tasks": tasks
            or [
                {
                    "name": "worker",
                    "replicas": replicas,
                    "template": {
                        "metadata": copy.deepcopy(meta or {}),
                        "spec": {"restartPolicy": "OnFailure", "containers": containers or [container()]},
                    },
                }
            ]
        },
    }
    if min_available is not None:
        obj["spec"]["minAvailable"] = min_available
    return obj


def run(
    policy: Any,
    obj: dict,
    *,
    training: bool = False,
    labels: dict | None = None,
    entry: Callable[[Any, Request], Decision] = report,
    **kwargs: Any,
) -> Decision:
    """Decide through ``entry`` (``report``; ``explain`` for the trace), then hold the invariants every
    admission must keep (patch applies, idempotent)."""
    ns_labels = dict(TRAINING_NS) if training else labels
    kwargs.setdefault("namespace", "team-a")
    snapshot = copy.deepcopy(obj)
    decision = entry(policy, Request(obj, namespace_labels=ns_labels, **kwargs))
    assert obj == snapshot, "the engine modified its input"
    if decision.patch:
        applied = jsonpatch.apply_patch(obj, list(decision.patch))
        assert applied == decision.mutated, "the patch and the engine's mutated object disagree"
        again = entry(policy, Request(applied, namespace_labels=ns_labels, **kwargs))
        assert again.patch == (), f"not idempotent: second pass patched {again.patch}"
    return decision


def mutated(decision: Decision) -> dict:
    assert decision.mutated is not None
    return decision.mutated


def rules(decision: Decision) -> list[str]:
    return [v.rule for v in decision.violations]


def violation(decision: Decision, rule: str):
    found = [v for v in decision.violations if v.rule == rule]
    assert found, f"expected [{rule}], got {[v.render() for v in decision.violations]}"
    return found[0]


def template_spec(obj: dict) -> dict:
    if obj["kind"] == "Pod":
        return obj["spec"]
    if obj["apiVersion"].startswith("batch.volcano.sh"):
        return obj["spec"]["tasks"][0]["template"]["spec"]
    return obj["spec"]["template"]["spec"]


def template_meta(obj: dict) -> dict:
    if obj["kind"] == "Pod":
        return obj["metadata"]
    if obj["apiVersion"].startswith("batch.volcano.sh"):
        return obj["spec"]["tasks"][0]["template"].get("metadata", {})
    return obj["spec"]["template"].get("metadata", {})


def limits(obj: dict, index: int = 0) -> dict:
    return template_spec(obj)["containers"][index]["resources"]["limits"]


K8S_VERSIONS = ("1.30.0", "1.37.0")


def k8s_errors(obj: dict) -> list[str]:
    """Strict OpenAPI validation of a built-in object for the oldest and newest supported release."""
    import kubernetes_validate

    errors = []
    for version in K8S_VERSIONS:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            errors.append(f"{version}: {str(exc).splitlines()[0]} at {list(getattr(exc, 'path', []))}")
    return errors


@functools.cache
def volcano_job_schema() -> dict:
    crd = yaml.safe_load(need_shared(CRDS / "batch.volcano.sh_jobs.yaml").read_text())
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def volcano_errors(obj: dict) -> list[str]:
    """Validate against the Volcano Job CRD schema, with unknown fields forbidden (structural pruning)."""
    schema = _closed(copy.deepcopy(volcano_job_schema()))
    validator = jsonschema.Draft7Validator(schema)
    return [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(obj)]


def _closed(schema: Any) -> Any:
    if isinstance(schema, dict):
        if (
            schema.get("type") == "object"
            and "properties" in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema.setdefault("additionalProperties", False)
        for value in schema.values():
            _closed(value)
    elif isinstance(schema, list):
        for item in schema:
            _closed(item)
    return schema


def assert_valid(obj: dict) -> None:
    if obj.get("apiVersion", "").startswith("batch.volcano.sh"):
        errors = volcano_errors(obj)
        for task in obj["spec"].get("tasks", []):
            errors += k8s_errors(
                {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "t"}, "spec": task["template"]["spec"]}
            )
    elif obj.get("apiVersion") in ("v1", "batch/v1", "apps/v1"):
        errors = k8s_errors(obj)
    else:
        errors = pod_template_errors(obj)
    assert not errors, errors


def pod_template_errors(obj: dict) -> list[str]:
    """Strict OpenAPI validation of every pod template of a workload CRD the repository has no schema
    for (Kubeflow, JobSet, LWS, Ray): each template must be a valid ``PodTemplateSpec``, which is what
    those CRDs embed and what their controllers copy into pods."""
    from webhook.engine.model.workload import classify, templates

    kind = classify(obj)
    assert kind is not None
    errors = []
    for tpl in templates(obj, kind):
        if tpl.virtual:  # TrainJob: the pod template its runtime will run, and the patches' own shape
            errors += runtime_patch_errors(obj, tpl)
            wrapper = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}}
            wrapper["template"] = {"metadata": tpl.metadata, "spec": tpl.spec}
            errors += [f"{tpl.dotted()} (as projected): {e}" for e in k8s_errors(wrapper)]
            continue
        node: Any = obj
        for part in tpl.path:
            node = node[part]
        wrapper = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": node}
        errors += [f"{tpl.dotted()}: {e}" for e in k8s_errors(wrapper)]
    return errors


RUNTIME_PATCH_POD_SPEC = frozenset(
    {"serviceAccountName", "volumes", "initContainers", "containers", "imagePullSecrets", "securityContext",
     "nodeSelector", "affinity", "tolerations", "schedulingGates"}
)  # Kubeflow Trainer v2.3 trainjob_types.go PodSpecPatch; ContainerPatch: name, env, volumeMounts, securityContext


def runtime_patch_errors(obj: dict, tpl: Any) -> list[str]:
    """The fields a TrainJob's ``spec.runtimePatches`` may hold (Trainer's RuntimePatch types, read in
    kubeflow/trainer ``pkg/apis/trainer/v1alpha1/trainjob_types.go``; no CRD is stored here): entries
    keyed by a unique ``manager`` of at most 253 characters, at most 16 of them, replicated jobs keyed
    by ``name``, pod metadata only labels/annotations, pod spec only the PodSpecPatch fields."""
    errors: list[str] = []
    patches = obj.get("spec", {}).get("runtimePatches")
    if patches is None:
        return errors
    managers = [p.get("manager") for p in patches]
    if len(set(managers)) != len(managers) or len(patches) > 16:
        errors.append(f"runtimePatches: managers must be unique, at most 16: {managers}")
    for i, entry in enumerate(patches):
        if set(entry) - {"manager", "time", "trainingRuntimeSpec"} or not 1 <= len(entry.get("manager", "")) <= 253:
            errors.append(f"runtimePatches[{i}]: {sorted(entry)}")
        template = entry.get("trainingRuntimeSpec", {}).get("template", {})
        for job in template.get("spec", {}).get("replicatedJobs", []):
            pod = job.get("template", {}).get("spec", {}).get("template", {})
            if set(pod.get("metadata", {})) - {"labels", "annotations"}:
                errors.append(f"runtimePatches[{i}] {job.get('name')}: pod metadata {sorted(pod['metadata'])}")
            extra = set(pod.get("spec", {})) - RUNTIME_PATCH_POD_SPEC
            if extra:
                errors.append(f"runtimePatches[{i}] {job.get('name')}: pod spec fields {sorted(extra)} not patchable")
            for group in ("containers", "initContainers"):
                for c in pod.get("spec", {}).get(group, []):
                    if set(c) - {"name", "env", "volumeMounts", "securityContext"}:
                        errors.append(f"runtimePatches[{i}] {group} {c.get('name')}: {sorted(c)}")
    return errors


def schema_errors(obj: dict) -> list[str]:
    """Schema errors of any object the engine mutates: built-in kinds against the Kubernetes OpenAPI,
    a Volcano Job against its CRD, other CRDs through their pod templates."""
    if obj.get("apiVersion") == "batch.volcano.sh/v1alpha1":
        return volcano_errors(obj)
    if obj.get("apiVersion") in ("v1", "batch/v1", "apps/v1"):
        return k8s_errors(obj)
    return pod_template_errors(obj)

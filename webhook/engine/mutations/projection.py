"""Templates a kind keeps elsewhere (Kubeflow Trainer's TrainJob): mutate the pod template its
controller will build, then write each change where that controller reads it.

A TrainJob has no pod template of its own. Its runtime (a JobSet template the platform owns) is
stamped out with the TrainJob's ``spec.trainer`` (``resourcesPerNode``, ``env``) and with every
entry of ``spec.runtimePatches``, each owned by one ``manager`` and limited to labels, annotations
and a few pod-spec fields (nodeSelector, affinity, tolerations, volumes, schedulingGates, security
contexts, container env/volumeMounts/securityContext). ``webhook.engine.model.workload.projected`` reads
that template; this step runs the ordinary template steps on a scratch copy of it and writes:

- the container's resources into ``spec.trainer.resourcesPerNode`` key by key, and env entries it
  lacks into ``spec.trainer.env`` (a runtime patch may not set the trainer container's env);
- labels, annotations and the patchable pod-spec fields into the webhook's own runtime patch
  (``manager: <prefix>/webhook``, the replicated job ``node``), holding the merged value so that
  the result does not depend on how the controller orders the managers' patches;
- what no TrainJob field can carry is either left to the runtime (``schedulerName``,
  ``priorityClassName``: Trainer's ``podGroupPolicy`` and the runtime template set them; said in the
  explanation) or, when the pool cannot be reached without it (DRA ``resourceClaims``, anything
  else), an ``intent-invalid`` finding that says so.
"""

from __future__ import annotations

import copy
from typing import Any

from webhook.engine.model.context import Context, Finding, TemplateState
from webhook.engine.model.workload import PATCH_CONTAINER_FIELDS, PATCH_SPEC_FIELDS, Template
from webhook.engine.patch import PatchBuilder

LEFT_TO_RUNTIME = frozenset({"schedulerName", "priorityClassName", "priority", "preemptionPolicy"})
"""Pod-spec fields a TrainJob cannot set; its runtime's template and podGroupPolicy do."""


def _scratch(ctx: Context, state: TemplateState) -> tuple[Template, PatchBuilder] | None:
    from webhook.engine.mutations import TEMPLATE_STEPS, TOPOLOGY_STEP  # (the package imports this module)

    tpl = state.tpl
    if tpl.rule is None or state.resolution is None:
        return None
    scratch_tpl = Template((), tpl.metadata, tpl.spec, tpl.replicas, tpl.task, tpl.gang)
    scratch_state = copy.copy(state)
    scratch_state.tpl = scratch_tpl
    scratch = PatchBuilder({"metadata": tpl.metadata, "spec": tpl.spec})
    for _, step in TEMPLATE_STEPS:
        step(ctx, scratch_state, scratch)
    TOPOLOGY_STEP(ctx, scratch_state, scratch)
    return scratch_tpl, scratch


def _changed(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    return [k for k in (*before, *(k for k in after if k not in before)) if before.get(k) != after.get(k)]


def _by_name(items: Any) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in items or () if isinstance(c, dict) and isinstance(c.get("name"), str)}


def check(ctx: Context, state: TemplateState) -> None:
    """The findings ``apply`` would report, without writing (an object judged as received)."""
    apply(ctx, state, None)


def apply(ctx: Context, state: TemplateState, patch: PatchBuilder | None) -> None:
    built = _scratch(ctx, state)
    if built is None or not built[1].ops:
        return
    tpl, rule = state.tpl, state.tpl.rule
    assert rule is not None and rule.resources is not None
    after = built[1].doc
    after_meta = after.get("metadata") if isinstance(after.get("metadata"), dict) else {}
    after_spec = after.get("spec") if isinstance(after.get("spec"), dict) else {}
    pod_meta: dict[str, dict[str, Any]] = {}
    pod_spec: dict[str, Any] = {}
    containers: dict[tuple[str, str], dict[str, Any]] = {}  # (group, name) -> fields for the patch
    left: list[str] = []
    lost: list[str] = []
    for section in ("labels", "annotations"):
        now = after_meta.get(section) if isinstance(after_meta.get(section), dict) else {}
        was = tpl.metadata.get(section) if isinstance(tpl.metadata.get(section), dict) else {}
        added = {k: v for k, v in now.items() if was.get(k) != v}
        if added:
            pod_meta[section] = added
    for field in _changed(tpl.spec, after_spec):
        if field in ("containers", "initContainers"):
            was, now = _by_name(tpl.spec.get(field)), _by_name(after_spec.get(field))
            for name, c in now.items():
                old = was.get(name, {})
                for key in _changed(old, c):
                    main = field == "containers" and name == rule.container
                    if main and key in ("resources", "env"):
                        continue  # written to the object's own fields below
                    if key in PATCH_CONTAINER_FIELDS and not (main and key == "env"):
                        containers.setdefault((field, name), {"name": name})[key] = c[key]
                    else:
                        lost.append(f"{field}[{name}].{key}")
        elif field in PATCH_SPEC_FIELDS:
            pod_spec[field] = after_spec.get(field)
        elif field in LEFT_TO_RUNTIME:
            left.append(field)
        else:
            lost.append(field)
    if left:
        ctx.explain(
            f"{rule.container}: {', '.join(left)} left to the runtime (a {ctx.workload.name} cannot set "
            "them; its runtime template and podGroupPolicy do)"
        )
    if lost:
        ctx.findings.append(
            Finding(
                "intent-invalid",
                tpl.dotted("metadata", "labels", ctx.policy.keys.workload)
                if state.intent is not None and state.intent.adopted_from is None
                else tpl.dotted("spec"),
                f"pool {state.resolution.pool.name} needs {', '.join(sorted(set(lost)))} on the pods, which a "  # type: ignore[union-attr]
                f"{ctx.workload.name} cannot set (its runtimePatches allow labels, annotations, nodeSelector, "
                "affinity, tolerations, volumes and container env/volumeMounts/securityContext); put it in "
                "the runtime's template, or use a class whose pool needs none of it",
                state.class_name,
            )
        )
    if patch is None:
        return
    main_after = _by_name(after_spec.get("containers")).get(rule.container, {})
    _write_resources(patch, rule.resources, tpl.spec, main_after)
    if rule.env is not None:
        have = {e.get("name") for e in patch.get(rule.env) or () if isinstance(e, dict)}
        new = [e for e in main_after.get("env") or () if isinstance(e, dict) and e.get("name") not in have]
        patch.extend(rule.env, new)
    if pod_meta or pod_spec or containers:
        _write_patch(ctx, patch, state, pod_meta, pod_spec, containers)


def _write_resources(patch: PatchBuilder, at: tuple, spec: dict[str, Any], after: dict[str, Any]) -> None:
    before_c = _by_name(spec.get("containers")).get(after.get("name"), {})
    was = before_c.get("resources") if isinstance(before_c.get("resources"), dict) else {}
    now = after.get("resources") if isinstance(after.get("resources"), dict) else {}
    for section in ("limits", "requests"):
        old = was.get(section) if isinstance(was.get(section), dict) else {}
        new = now.get(section) if isinstance(now.get(section), dict) else {}
        for key in old:
            if key not in new:
                patch.remove((*at, section, key))
        for key, value in new.items():
            if old.get(key) != value:
                patch.set((*at, section, key), value, overwrite=True)


def _write_patch(
    ctx: Context,
    patch: PatchBuilder,
    state: TemplateState,
    meta: dict[str, dict[str, Any]],
    spec: dict[str, Any],
    containers: dict[tuple[str, str], dict[str, Any]],
) -> None:
    """Into the webhook's own runtime patch of the job: created whole when absent, else field by field."""
    rule = state.tpl.rule
    assert rule is not None and rule.patches is not None
    manager = rule.patch_manager.replace("{prefix}", ctx.policy.settings.prefix)
    pod: dict[str, Any] = {}
    if meta:
        pod["metadata"] = meta
    pod_spec = dict(spec)
    for (group, _), fields in containers.items():
        pod_spec.setdefault(group, []).append(fields)
    if pod_spec:
        pod["spec"] = pod_spec
    entries = patch.get(rule.patches)
    index = next((i for i, e in enumerate(entries or ()) if isinstance(e, dict) and e.get("manager") == manager), None)
    job = {"name": rule.patch_job, "template": {"spec": {"template": pod}}}
    if index is None:
        patch.append(
            rule.patches, {"manager": manager, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [job]}}}}
        )
        ctx.explain(
            f"{ctx.workload.name}: placement written to runtimePatches (manager {manager}, job {rule.patch_job})"
        )
        return
    jobs_path = (*rule.patches, index, "trainingRuntimeSpec", "template", "spec", "replicatedJobs")
    jobs = patch.get(jobs_path)
    at = next((j for j, e in enumerate(jobs or ()) if isinstance(e, dict) and e.get("name") == rule.patch_job), None)
    if at is None:
        patch.append(jobs_path, job)
        return
    base = (*jobs_path, at, "template", "spec", "template")
    for section, values in meta.items():
        for key, value in values.items():
            patch.set((*base, "metadata", section, key), value, overwrite=True)
    for field, value in spec.items():
        patch.set((*base, "spec", field), value, overwrite=True)
    for (group, name), fields in containers.items():
        items = patch.get((*base, "spec", group))
        found = next((k for k, c in enumerate(items or ()) if isinstance(c, dict) and c.get("name") == name), None)
        if found is None:
            patch.append((*base, "spec", group), fields)
        else:
            for key, value in fields.items():
                patch.set((*base, "spec", group, found, key), value, overwrite=True)

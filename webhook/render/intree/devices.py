"""``privileged-gpu`` for pods holding device-plugin GPUs and ``gpu-count-exceeded`` in-tree.

``privileged-gpu``: a container of any kind (init, sidecar, ephemeral) in a template that declares a
class or holds a GPU resource, with a way past its device grant the engine also sees: privileged,
``SYS_ADMIN``/``ALL`` added (any case, optional ``CAP_``; RE2's ``\\s`` is narrower than Python's
strip, so the CEL test matches less), a mounted hostPath at ``/``, ``/dev`` or under it (paths with
``..`` are left to the webhook, which normalises them), or the last ``NVIDIA_VISIBLE_DEVICES`` /
``NVIDIA_DRIVER_CAPABILITIES`` entry set to a literal other than ``none``/``void``. Pods that only
*reach* a pool of sliced cards, DRA ``adminAccess`` and ``envFrom`` are the webhook's.

``gpu-count-exceeded``: whole GPUs and MIG devices written as plain integers in limits, counted as
Kubernetes accounts them (Σ regular + Σ native sidecars, against each ordinary init container alone;
a lower bound, since the sidecars declared before an init container would add to it), above the
class's ``maxGPUs``. Judged on the kinds stored as written (a controller's
template is judged by the engine after its mutation rewrote the resources).
"""

from __future__ import annotations

from webhook.engine.model.device_reach import HARMLESS, TOOLKIT_ENV
from webhook.policy.compiled import Policy
from webhook.render.intree.cel import ALL_CONTAINERS, cel_list, class_of, containers, key_is, resolution_denies
from webhook.render.intree.checks import check
from webhook.render.webhooks import cel_string

_CAPABILITY = r"size(a) <= 64 && a.matches('(?i)^\\s*(cap_)?(sys_admin|all)\\s*$')"
"""A capability longer than 64 characters (padding around SYS_ADMIN) is left to the webhook: matches() on an
unbounded string costs more than the apiserver's per-expression budget allows."""
_DEV = "(p == '/' || p == '/dev' || (p.startsWith('/dev/') && !p.contains('..')))"


def _dev_volumes(t: str) -> str:
    """Names of ``t``'s hostPath volumes that reach /dev, read once per template (usually none)."""
    return (
        f"(has({t}.spec.volumes) ? {t}.spec.volumes.filter(v, has(v.name) && has(v.hostPath) &&\n"
        f"  has(v.hostPath.path) && [v.hostPath.path].exists(p, {_DEV})).map(v, v.name) : [])"
    )


_MOUNTS = (
    "(size(d) > 0 && ((has(c.volumeMounts) ? c.volumeMounts : []) +\n"
    "  (has(c.volumeDevices) ? c.volumeDevices : [])).exists(m, has(m.name) && m.name in d))"
)


def _env(name: str) -> str:
    last = "l[size(l) - 1]"
    return (
        f"[c.env.filter(e, has(e.name) && e.name == {cel_string(name)})].exists(l, size(l) > 0 &&\n"
        f"    has({last}.value) && !({last}.value in {cel_list(sorted(HARMLESS))}))"
    )


def _any_container(t: str, test: str) -> str:
    return f"(has({t}.spec) && ({containers(t, *ALL_CONTAINERS)}).exists(c,\n  {test}))"


@check(
    "privileged-gpu",
    "privileged-container",
    "a container of a GPU pod is privileged or adds SYS_ADMIN/ALL: it would see every GPU of the node; drop it "
    "(add only the capabilities it needs)",
    exact=True,
)
def privileged(policy: Policy, t: str) -> str:
    return _any_container(
        t,
        "has(c.securityContext) && (\n"
        "  (has(c.securityContext.privileged) && c.securityContext.privileged == true) ||\n"
        "  (has(c.securityContext.capabilities) && has(c.securityContext.capabilities.add) &&\n"
        f"    c.securityContext.capabilities.add.exists(a, {_CAPABILITY})))",
    )


@check(
    "privileged-gpu",
    "toolkit-env",
    "a container of a GPU pod sets NVIDIA_VISIBLE_DEVICES or NVIDIA_DRIVER_CAPABILITIES: the NVIDIA toolkit would "
    "give it GPUs beyond its grant; set it to none or remove it",
    exact=True,
)
def toolkit_env(policy: Policy, t: str) -> str:
    envs = " ||\n  ".join(_env(n) for n in TOOLKIT_ENV)
    return _any_container(t, f"has(c.env) && (\n  {envs})")


@check(
    "privileged-gpu",
    "dev-host-path",
    "a container of a GPU pod mounts a hostPath volume at or under /dev: it would see every GPU of the node; "
    "remove the volume (ask for devices through resources)",
    exact=True,
)
def dev_host_path(policy: Policy, t: str) -> str:
    return (
        f"(has({t}.spec) && [{_dev_volumes(t)}].exists(d, size(d) > 0 &&\n"
        f"  ({containers(t, *ALL_CONTAINERS)}).exists(c, {_MOUNTS})))"
    )


_WHOLE_OR_MIG = key_is("k == 'nvidia.com/gpu' || k.startsWith('nvidia.com/mig-')", long=False)


def _gpus(c: str) -> str:
    """Whole GPUs and MIG devices in the limits of container ``c``, plain integers only."""
    return (
        f"(has({c}.resources) && has({c}.resources.limits) ?\n"
        f"    {c}.resources.limits.filter(k, {_WHOLE_OR_MIG} &&\n"
        f"      string({c}.resources.limits[k]).matches('^[0-9]{{1,6}}$'))\n"
        f"      .map(k, int({c}.resources.limits[k])).sum() :\n"
        "    0)"
    )


def _exceeds(t: str, maximum: str) -> str:
    """Kubernetes' accounting past ``maximum``, a lower bound of it: the regular containers and the native
    sidecars (init containers with ``restartPolicy: Always``, which keep running) together, or any one
    ordinary init container (which runs alone; the sidecars declared before it can only add)."""
    sidecar = "has(c.restartPolicy) && c.restartPolicy == 'Always'"
    inits = f"(has({t}.spec.initContainers) ? {t}.spec.initContainers : [])"
    return (
        f"(((has({t}.spec.containers) ? {t}.spec.containers : []) + {inits}.filter(c, {sidecar})).map(c,\n"
        f"  {_gpus('c')}).sum() > {maximum} ||\n"
        f"  {inits}.exists(c, !({sidecar}) && {_gpus('c')} > {maximum}))"
    )


@check(
    "gpu-count-exceeded",
    "class-max-gpus",
    "the pod asks for more GPUs than its class's maxGPUs allows; ask for fewer or use another class",
    over="classed",
    scope="stored",
)
def class_max(policy: Policy, t: str) -> str | None:
    limits = {name: cls.max_gpus for name, cls in policy.classes.items() if cls.max_gpus is not None}
    if not limits:
        return None
    table = "{" + ", ".join(f"{cel_string(n)}: {m}" for n, m in sorted(limits.items())) + "}"
    cls = class_of(policy, t)
    return (
        f"(has({t}.spec) && {cls} in {table} &&\n"
        f"  ({resolution_denies(policy, cls)}) &&\n  {_exceeds(t, f'{table}[{cls}]')})"
    )

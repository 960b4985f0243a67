"""Ways a container reaches GPU devices beyond what its device plugin or claim gave it (``privileged-gpu``).

The kubelet and the NVIDIA container toolkit hand a container the device nodes of its grant. Each
*trigger* below gets past that, and on a node whose cards are sliced (MIG, HAMi, cGPU, time-slicing)
the devices past the grant are other tenants' slices:

- ``securityContext.privileged: true``: the runtime gives the container every device node of the host;
- ``capabilities.add`` with ``SYS_ADMIN`` or ``ALL``: enough to mount or reconfigure devices. Container
  runtimes accept ``CAP_SYS_ADMIN`` and any case, so the comparison drops a ``CAP_`` prefix and case;
- a ``hostPath`` volume at or under ``/dev``, or an ancestor of it (``/``), or one that reaches the
  host's devices another way (``/proc``: ``/proc/1/root`` is the host's root; ``/sys``: a GPU's PCI
  ``resource`` files), that the container mounts (``volumeMounts``) or uses as a block device
  (``volumeDevices``). The path is normalised first (``//dev``, ``/dev/``, ``/dev/../dev/nvidia0``,
  ``/proc/self/root/``, a relative path read from ``/``);
- ``NVIDIA_VISIBLE_DEVICES`` / ``NVIDIA_DRIVER_CAPABILITIES`` with a value other than ``none``/``void``:
  the toolkit honours them in unprivileged containers by default. The value the container gets is the
  kubelet's: the last ``env`` entry of that name, else whatever an ``envFrom`` source supplies. A
  ``valueFrom`` cannot be seen at admission and counts; an ``envFrom`` ConfigMap/Secret counts unless
  its non-empty ``prefix`` cannot begin either name (``prefix: APP_`` cannot spell ``NVIDIA_...``).

- a DRA claim request with ``adminAccess: true`` (in ``exactly`` or a ``firstAvailable`` subrequest) on
  a GPU class, or one the webhook cannot tell: the driver gives the container devices already
  allocated to other pods. The apiserver allows it only in namespaces labelled
  ``resource.kubernetes.io/admin-access: "true"``, a label the namespace's owner sets; it is judged per
  container that gets the request (``resources.claims``), or for the pod when no container names the
  claim (it is still allocated and prepared on the pod's node). See :func:`admin_access`.

Every container counts: regular, init, native sidecar (an init container with ``restartPolicy:
Always``) and ephemeral (``kubectl debug``, through ``pods/ephemeralcontainers``).

Which pods the rule judges is decided elsewhere (``rules/hygiene.py``): a pod with no trigger never
needs the reachability computation, so :func:`has_trigger` is the cheap gate in front of it.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from webhook.engine.model.pool_stack import cards_sliced
from webhook.policy.compiled import Policy

if TYPE_CHECKING:
    from webhook.engine.model.claims import ClaimRequest, PodClaim
    from webhook.engine.model.devices import PodResources

TOOLKIT_ENV = ("NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES")
HARMLESS = frozenset({"none", "void"})
CAPABILITIES = frozenset({"SYS_ADMIN", "ALL"})


@dataclass(frozen=True, slots=True)
class Trigger:
    """One way past the device grant, in one container."""

    group: str  # "containers" | "initContainers" | "ephemeralContainers"
    index: int
    name: str  # the container's name
    role: str  # "container" | "init container" | "sidecar container" | "ephemeral container"
    path: tuple[str | int, ...]  # field path inside the container
    what: str  # "is privileged", "adds capability CAP_SYS_ADMIN", ...
    fix: str


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


DEVICE_ROOTS = ("/dev", "/proc", "/sys")
"""Host directories that reach device nodes: ``/dev`` itself; ``/proc``, whose ``<pid>/root`` (``1``,
``self``: the kubelet resolves the path on the host) is the host's root and so its ``/dev``; ``/sys``,
whose PCI ``resource`` files map a GPU's memory without any device node."""


def reaches_dev(path: Any) -> bool:
    """A host path at or under ``/dev``, ``/proc`` or ``/sys``, or an ancestor of them (``/``), once
    normalised (``//proc/1/root/``, ``/./sys``, ``/var/../proc``)."""
    if not isinstance(path, str):
        return False
    norm = posixpath.normpath("/" + path.lstrip("/"))  # "//dev" is "/dev"; relative is read from "/"
    return norm == "/" or any(norm == root or norm.startswith(root + "/") for root in DEVICE_ROOTS)


def dev_volumes(spec: Mapping[str, Any]) -> dict[str, tuple[int, str]]:
    """The pod's hostPath volumes that reach ``/dev``: name -> (index in ``spec.volumes``, host path)."""
    out: dict[str, tuple[int, str]] = {}
    for i, v in enumerate(_list(spec.get("volumes"))):
        if isinstance(v, dict):
            host = v.get("hostPath")
            if isinstance(host, dict) and reaches_dev(host.get("path")) and isinstance(v.get("name"), str):
                out[v["name"]] = (i, host["path"])
    return out


Found = Iterator[tuple[tuple[str | int, ...], str, str]]  # (path inside the container, what, fix)


def _role(group: str, container: Mapping[str, Any]) -> str:
    if group == "containers":
        return "container"
    if group == "ephemeralContainers":
        return "ephemeral container"
    return "sidecar container" if container.get("restartPolicy") == "Always" else "init container"


def _security(c: Mapping[str, Any]) -> Found:
    sc = c.get("securityContext")
    if not isinstance(sc, dict):
        return
    if sc.get("privileged") is True:
        yield ("securityContext", "privileged"), "is privileged", "drop privileged (add only the capabilities it needs)"
    caps = sc.get("capabilities")
    for i, cap in enumerate(_list(caps.get("add")) if isinstance(caps, dict) else ()):
        if isinstance(cap, str) and cap.strip().upper().removeprefix("CAP_") in CAPABILITIES:
            yield (
                ("securityContext", "capabilities", "add", i),
                f"adds capability {cap}",
                f"remove {cap} from capabilities.add (add only the narrow capabilities it needs)",
            )


def _mounts(c: Mapping[str, Any], volumes: dict[str, tuple[int, str]]) -> Found:
    for field in ("volumeMounts", "volumeDevices"):
        for i, m in enumerate(_list(c.get(field))):
            if isinstance(m, dict) and m.get("name") in volumes:
                index, host = volumes[m["name"]]
                yield (
                    (field, i),
                    f"uses hostPath volume {m['name']!r} (spec.volumes[{index}], host {host!r}, "
                    "which reaches the host's devices)",
                    "remove the hostPath volume (ask for devices through resources or a resource claim)",
                )


def _env(c: Mapping[str, Any]) -> Found:
    last: dict[str, tuple[int, dict[str, Any]]] = {}
    for i, e in enumerate(_list(c.get("env"))):
        if isinstance(e, dict) and e.get("name") in TOOLKIT_ENV:
            last[e["name"]] = (i, e)  # the kubelet keeps the last definition of a name
    fix = "set it to none or remove it (the device plugin sets what the container was given)"
    for name in TOOLKIT_ENV:
        if name in last:
            i, e = last[name]
            if e.get("valueFrom") is not None:
                yield ("env", i), f"sets {name} from valueFrom (a value admission cannot see)", fix
            elif e.get("value") not in HARMLESS:
                yield ("env", i), f"sets {name}={e.get('value')!s}", fix
            continue
        for i, source in enumerate(_list(c.get("envFrom"))):  # env wins over envFrom: only unset names
            if not isinstance(source, dict):
                continue
            prefix = source.get("prefix")
            prefix = prefix if isinstance(prefix, str) else ""
            if name.startswith(prefix):  # "" is a prefix of everything
                ref = source.get("configMapRef") or source.get("secretRef")
                what = "ConfigMap" if source.get("configMapRef") else "Secret"
                ref_name = ref.get("name") if isinstance(ref, dict) else None
                yield (
                    ("envFrom", i),
                    f"imports {what} {ref_name!r}"
                    + (f" with prefix {prefix!r}" if prefix else " unprefixed")
                    + f", which may set {name}",
                    f"give envFrom a prefix that cannot begin {name}, or set {name}=none in env",
                )
                break


def container_triggers(
    group: str, index: int, c: Mapping[str, Any], volumes: dict[str, tuple[int, str]]
) -> Iterator[Trigger]:
    name = c.get("name") if isinstance(c.get("name"), str) else ""
    role = _role(group, c)
    for source in (_security(c), _mounts(c, volumes) if volumes else (), _env(c)):
        for path, what, fix in source:
            yield Trigger(group, index, name, role, path, what, fix)


def triggers(spec: Mapping[str, Any]) -> Iterator[Trigger]:
    """Every trigger in every container of a pod spec, containers before init before ephemeral.

    Each container passes the cheap screen (``_may_trigger``) first: ``privileged-gpu`` asks this of
    every GPU pod, and nearly every container has no trigger."""
    volumes = dev_volumes(spec) if spec.get("volumes") else {}
    for group in ("containers", "initContainers", "ephemeralContainers"):
        for index, c in enumerate(_list(spec.get(group))):
            if isinstance(c, dict) and _may_trigger(c, volumes):
                yield from container_triggers(group, index, c, volumes)


_TOOLKIT_NAMES = frozenset(TOOLKIT_ENV)


def _may_trigger(c: dict[str, Any], volumes: dict[str, tuple[int, str]] | None) -> bool:
    """A cheap screen: False only when the container certainly has no trigger."""
    sc = c.get("securityContext")
    if sc and isinstance(sc, dict):
        caps = sc.get("capabilities")
        if sc.get("privileged") is True or (caps and isinstance(caps, dict) and caps.get("add")):
            return True
    if c.get("envFrom"):
        return True
    env = c.get("env")
    if env and isinstance(env, list):
        names = _TOOLKIT_NAMES
        for e in env:
            if type(e) is dict and e.get("name") in names:
                return True
    return bool(volumes) and bool(c.get("volumeMounts") or c.get("volumeDevices"))


def has_trigger(spec: Mapping[str, Any]) -> bool:
    """Any container of ``spec`` has a trigger: the gate before any reachability computation, on the
    path of every pod without GPUs, so it screens each container cheaply before reading it in full."""
    volumes: dict[str, tuple[int, str]] | None = dev_volumes(spec) if spec.get("volumes") else None
    for group in ("containers", "initContainers", "ephemeralContainers"):
        items = spec.get(group)
        if not items or not isinstance(items, list):
            continue
        for index, c in enumerate(items):
            if (
                isinstance(c, dict)
                and _may_trigger(c, volumes)
                and next(container_triggers(group, index, c, volumes or {}), None) is not None
            ):
                return True
    return False


# --- the image's own NVIDIA_VISIBLE_DEVICES -------------------------------------------------------------

VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
VOID = "void"
"""What a container without a GPU grant gets in a pod that can reach a GPU pool (HAMi does the same):
CUDA images set ``NVIDIA_VISIBLE_DEVICES=all`` themselves, and with the NVIDIA container toolkit's
stock settings (``accept-nvidia-visible-devices-envvar-when-unprivileged = true``, the device
plugin's ``envvar`` list strategy) the toolkit honours it in an unprivileged container: every GPU of
the node, visible in no field of the pod. ``void`` makes the toolkit leave the container alone (as
runc would); a pod-spec ``env`` entry wins over the image's ``ENV``. Containers the device plugin
gives GPUs are left alone: its ``Allocate`` answer sets the variable to their devices."""


def container_granted(policy: Policy, container: Mapping[str, Any]) -> bool:
    """The container is given devices by name: a GPU-family extended resource (or one a DeviceClass
    serves) in its limits or requests, or a DRA claim (``resources.claims``)."""
    res = container.get("resources")
    if not isinstance(res, dict):
        return False
    if res.get("claims"):
        return True
    for section in ("limits", "requests"):
        values = res.get(section)
        for key in values if isinstance(values, dict) else ():
            if isinstance(key, str) and (
                policy.is_gpu_resource(key)
                or key.startswith("deviceclass.resource.kubernetes.io/")
                or key in policy.dra.extended
            ):
                return True
    return False


def sets_visible_devices(container: Mapping[str, Any]) -> bool:
    """An ``env`` entry names ``NVIDIA_VISIBLE_DEVICES`` (the user's value is kept, and judged)."""
    return any(isinstance(e, dict) and e.get("name") == VISIBLE_DEVICES for e in _list(container.get("env")))


def without_visible_devices(
    policy: Policy, spec: Mapping[str, Any], fraction: bool = False
) -> Iterator[tuple[str, int, Mapping[str, Any]]]:
    """(group, index, container) of every container and init container (native sidecars included)
    with no GPU grant and no ``NVIDIA_VISIBLE_DEVICES`` in its ``env``: the image's value would reach
    the node's GPUs. In a pod with a GPU-fraction annotation (KAI) the scheduler's binder, not a
    resource, gives a regular container its share, so only init containers are listed there."""
    for group in ("containers", "initContainers"):
        if fraction and group == "containers":
            continue
        for index, c in enumerate(_list(spec.get(group))):
            if isinstance(c, dict) and not sets_visible_devices(c) and not container_granted(policy, c):
                yield group, index, c


def may_reach_a_pool(policy: Policy, spec: Mapping[str, Any]) -> bool:
    """A cheap screen before the reachability model: False only when the pod certainly reaches no GPU
    pool (every pool has a filtering taint, and the pod tolerates nothing and names no node)."""
    if spec.get("tolerations") or spec.get("nodeName"):
        return True

    def compute() -> bool:
        from webhook.engine.model.reach import FILTERING

        return any(not [t for t in p.taints if t[2] is None or t[2] in FILTERING] for p in policy.pools.values())

    return policy.recall(("device-env", "untainted-pool"), compute)


def visible_devices_trigger(spec: Mapping[str, Any], t: Trigger) -> bool:
    """The trigger is an ``env`` entry that writes ``NVIDIA_VISIBLE_DEVICES`` (a value other than
    none/void, or a ``valueFrom``): judged wherever the pod can reach a GPU pool, not only a sliced one,
    since the webhook sets ``void`` there itself and a written value takes it back."""
    if t.path[:1] != ("env",) or len(t.path) != 2 or not isinstance(t.path[1], int):
        return False
    containers = _list(spec.get(t.group))
    c = containers[t.index] if t.index < len(containers) else None
    env = _list(c.get("env")) if isinstance(c, dict) else []
    entry = env[t.path[1]] if t.path[1] < len(env) else None
    return isinstance(entry, dict) and entry.get("name") == VISIBLE_DEVICES


def exposed_pools(policy: Policy) -> frozenset[str]:
    """Pools a CPU-only pod with a trigger must not be able to reach: those whose cards are shared or
    sliced, or every GPU pool with ``settings.privilegedGPUPools: all``."""

    def compute() -> frozenset[str]:
        if policy.settings.privileged_gpu_pools == "all":
            return frozenset(policy.pools)
        return frozenset(n for n, p in policy.pools.items() if cards_sliced(p))

    return policy.recall(("privileged-gpu", "exposed-pools"), compute)


@dataclass(frozen=True, slots=True)
class AdminAccess:
    """A claim request with ``adminAccess``, and who gets it: reported at the pod's ``spec.resourceClaims``
    entry (the template or claim it names is another object)."""

    claim_index: int
    what: str  # "container 'agent' gets request 'gpu' of claim 'gpu' (ResourceClaimTemplate t) with adminAccess"


ADMIN_FIX = (
    "drop adminAccess from the request, or run monitoring agents in a namespace exempt from privileged-gpu "
    "(rules: {privileged-gpu: {exempt: [...]}})"
)


def _admin_names(r: ClaimRequest, ref: str | None) -> list[str]:
    """The admin-access request names a ``resources.claims`` entry (``request``: None for the whole claim,
    ``<request>`` or ``<request>/<subrequest>``) gets from request ``r``."""
    if not r.admin:
        return []
    subs = [f"{r.name}/{s}" for s in r.admin_subrequests] or [r.name]
    if ref is None or ref == r.name:
        return subs
    return [s for s in subs if s == ref]


def _source(claim: PodClaim) -> str:
    return f"ResourceClaimTemplate {claim.template}" if claim.template else f"ResourceClaim {claim.claim}"


def admin_access(res: PodResources) -> Iterator[AdminAccess]:
    """Every container that gets an admin-access request of a GPU claim, then every such claim no
    container names (the pod's). Only requests whose adminAccess alternative is a GPU, or a class the
    webhook cannot tell, are recorded as admin (``ClaimRequest.admin``)."""
    admin = [c for c in res.claims if any(r.admin for r in c.requests)]
    if not admin:
        return
    by_name = {c.name: c for c in admin}
    named: set[str] = set()
    for c in res.containers:
        for claim_name, ref in c.claim_refs:
            named.add(claim_name)
            claim = by_name.get(claim_name)
            if claim is None:
                continue
            names = [n for r in claim.requests for n in _admin_names(r, ref)]
            if names:
                yield AdminAccess(
                    claim.index,
                    f"{_role(c.group, c.container)} {c.name!r} gets request {' or '.join(map(repr, names))} "
                    f"of claim {claim.name!r} ({_source(claim)}) with adminAccess",
                )
    for claim in admin:
        if claim.name not in named:
            names = [n for r in claim.requests for n in _admin_names(r, None)]
            yield AdminAccess(
                claim.index,
                f"the pod's claim {claim.name!r} ({_source(claim)}) has request {' or '.join(map(repr, names))} "
                "with adminAccess, which no container names,",
            )

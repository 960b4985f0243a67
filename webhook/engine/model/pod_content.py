"""What a pod runs, two ways: what a pod UPDATE may not change under a grant, and what a grant is bound to.

:func:`content_digest` is the whole of it (images, commands, environment, devices, privileged bits,
volumes), compared between a pod and its own older self: a pod UPDATE that changes it (a new
``spec.containers[*].image``, an ephemeral container from ``kubectl debug``) is judged as if the pod
carried no grant. Both sides are the same stored pod, so nothing anyone else added makes them differ.

:func:`grant_content` is what a grant carries, issued on a pod template at the controller object's
``/mutate``, and :func:`runs_granted` checks it on what a controller created from that template, as the
apiserver stores it. Between the two, others add to a pod on their own: the apiserver (defaults, the
service-account token volume, DefaultTolerationSeconds' tolerations), an operator (PyTorchJob's
``RANK``/``MASTER_ADDR`` env, Volcano's hosts volume, KubeRay's ``ray start`` command and its
``wait-gcs-ready`` init container), a sidecar injector (a container of its own). So the grant binds, for
each container the template names, what gives it devices: its image, securityContext, the resources that
are not ``cpu``/``memory`` (an in-place resize changes those), volumeDevices, envFrom and the container
toolkit's variables (a value other than ``void``/``none``); and the pod's host paths, host namespaces,
resource claims and runtime class. Command and args too where the template's controller copies it as it
is (kube-controller-manager's: Deployments, StatefulSets, DaemonSets, ReplicaSets, Jobs, CronJobs), not
where an operator rewrites them. Other variables and other volumes are bound only against the pod's own
UPDATE (above). Placement (tolerations, nodeSelector, affinity) is judged by the rules on
every UPDATE that changes it, whoever sends it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import orjson

from webhook.engine.model.device_reach import HARMLESS, TOOLKIT_ENV
from webhook.quantity import QuantityError, parse_quantity

CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")
CONTAINER_FIELDS = (
    "name", "image", "command", "args", "env", "envFrom", "resources", "securityContext", "volumeMounts",
    "volumeDevices", "restartPolicy",
)  # fmt: skip
POD_FIELDS = ("volumes", "hostNetwork", "hostPID", "hostIPC", "shareProcessNamespace", "resourceClaims",
              "runtimeClassName")  # fmt: skip
RESIZABLE = frozenset({"cpu", "memory"})
"""Resources an in-place resize (``pods/resize``, a vertical autoscaler) changes on a running pod."""
TOKEN_VOLUME_PREFIX = "kube-api-access-"
TOKEN_MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
_DEFAULT_MODE = 420  # 0644: what the apiserver writes where a secret, configMap, projection says none


def content_digest(node: Mapping[str, Any]) -> str:
    """The digest of what a pod (or a pod template, ``{metadata, spec}``) runs; "" when it has no spec."""
    spec = node.get("spec")
    if not isinstance(spec, dict):
        return ""
    body: dict[str, Any] = {}
    for key in CONTAINER_LISTS:
        containers = spec.get(key)
        if isinstance(containers, list) and containers:
            body[key] = [_container(c) if isinstance(c, dict) else c for c in containers]
    for key in POD_FIELDS:
        value = spec.get(key)
        if key == "volumes" and isinstance(value, list):
            value = [_volume(v) for v in value if not _token_volume(v)]
        if value not in (None, False, "", [], {}):
            body[key] = value
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()[:32]


def grant_content(node: Mapping[str, Any], *, verbatim: bool = False) -> str:
    """``<container names>:<digest>``: what a grant issued for this template binds (see the module). With
    ``verbatim`` (the template's controller copies it as it is: kube-controller-manager's), each container's
    command and args too, marked by a leading ``=``."""
    spec = node.get("spec")
    if not isinstance(spec, dict):
        return ""
    names = sorted(_named(spec))
    return f"{'=' if verbatim else ''}{','.join(names)}:{_essential(spec, names, verbatim)}"


def runs_granted(node: Mapping[str, Any], content: str) -> bool:
    """Whether a pod (or a template) runs what a grant's ``content`` was issued for: each container the
    template named is there, with the same essentials, and so are the pod's host paths and namespaces."""
    spec = node.get("spec")
    verbatim = content.startswith("=")
    names_text, sep, digest = content.removeprefix("=").rpartition(":")
    if not isinstance(spec, dict) or not sep:
        return False
    names = names_text.split(",") if names_text else []
    return _essential(spec, names, verbatim) == digest


def _named(spec: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for key in ("initContainers", "containers"):
        containers = spec.get(key)
        for c in containers if isinstance(containers, list) else ():
            if isinstance(c, dict) and isinstance(c.get("name"), str):
                out.setdefault(c["name"], c)
    return out


def _essential(spec: Mapping[str, Any], names: list[str], verbatim: bool) -> str | None:
    named = _named(spec)
    if any(n not in named for n in names):
        return None
    body: dict[str, Any] = {"containers": {n: _devices(named[n], verbatim) for n in names}}
    volumes = spec.get("volumes")
    body["hostPaths"] = sorted(
        str(v["hostPath"].get("path"))
        for v in (volumes if isinstance(volumes, list) else ())
        if isinstance(v, dict) and isinstance(v.get("hostPath"), dict)
    )
    for key in ("hostNetwork", "hostPID", "hostIPC", "resourceClaims", "runtimeClassName"):
        if spec.get(key) not in (None, False, "", []):
            body[key] = spec[key]
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()[:32]


def _devices(container: dict[str, Any], verbatim: bool) -> dict[str, Any]:
    """What gives one container devices: image, privileged bits, device resources, the toolkit's variables
    (and, ``verbatim``, what it runs: command and args)."""
    full = _container(container)
    kept = ("image", "securityContext", "volumeDevices", "envFrom", "restartPolicy")
    kept += ("command", "args") if verbatim else ()
    out = {k: full[k] for k in kept if k in full}
    device = _resources(container["resources"]) if isinstance(container.get("resources"), dict) else {}
    if device:
        out["resources"] = device
    env = container.get("env")
    toolkit = [e for e in (env if isinstance(env, list) else ()) if _toolkit(e)]
    if toolkit:
        out["env"] = _defaulted(toolkit)
    return out


def _toolkit(entry: Any) -> bool:
    """A container toolkit variable that may open devices (``NVIDIA_VISIBLE_DEVICES=void`` does not: our
    mutation writes it into the pods of a Deployment, not its template)."""
    if not isinstance(entry, dict) or entry.get("name") not in TOOLKIT_ENV:
        return False
    harmless = str(entry.get("value", "")).lower() in HARMLESS and "valueFrom" not in entry
    return not (entry.get("name") == TOOLKIT_ENV[0] and harmless)


def _container(container: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in CONTAINER_FIELDS:
        value = container.get(key)
        if key == "resources" and isinstance(value, dict):
            value = _resources(value)
        elif key == "volumeMounts" and isinstance(value, list):
            value = [m for m in value if not _token_mount(m)]
        elif key == "env" and isinstance(value, list):
            value = [_defaulted(e) for e in value]
        elif key == "securityContext" and isinstance(value, dict) and value.get("procMount") == "Default":
            value = {k: v for k, v in value.items() if k != "procMount"}
        if value not in (None, "", [], {}):
            out[key] = value
    return out


def _resources(resources: dict[str, Any]) -> dict[str, Any]:
    """Limits and requests of every resource but cpu and memory, requests defaulted from limits as the
    apiserver does on pods, quantities by value (``1000m`` and ``1`` are the same GPU)."""
    limits = _quantities(resources.get("limits"))
    requests = {**limits, **_quantities(resources.get("requests"))}
    out: dict[str, Any] = {}
    if limits:
        out["limits"] = limits
    if requests:
        out["requests"] = requests
    claims = resources.get("claims")
    if claims:
        out["claims"] = claims
    return out


def _quantities(values: object) -> dict[str, str]:
    if not isinstance(values, dict):
        return {}
    out: dict[str, str] = {}
    for name, value in values.items():
        if name in RESIZABLE:
            continue
        try:
            out[str(name)] = str(parse_quantity(value))
        except (QuantityError, ValueError, TypeError):
            out[str(name)] = repr(value)  # not a quantity: compared as written (the rules report it)
    return out


def _defaulted(value: Any) -> Any:
    """``value`` without the defaults the apiserver writes into env sources and volumes."""
    if isinstance(value, list):
        return [_defaulted(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for key, item in value.items():
        if key == "fieldRef" and isinstance(item, dict) and item.get("apiVersion") == "v1":
            item = {k: v for k, v in item.items() if k != "apiVersion"}
        elif key == "resourceFieldRef" and isinstance(item, dict) and str(item.get("divisor")) in ("0", "1"):
            item = {k: v for k, v in item.items() if k != "divisor"}
        elif (key == "defaultMode" and item == _DEFAULT_MODE) or (key == "type" and item == "" and "path" in value):
            continue  # hostPath.type: "" is the default too
        out[key] = _defaulted(item)
    return out


def _volume(volume: Any) -> Any:
    return _defaulted(volume)


def _token_volume(volume: Any) -> bool:
    """The projected service-account token volume the ServiceAccount admission plugin adds."""
    if not isinstance(volume, dict):
        return False
    name, projected = volume.get("name"), volume.get("projected")
    if not (isinstance(name, str) and name.startswith(TOKEN_VOLUME_PREFIX) and isinstance(projected, dict)):
        return False
    sources = projected.get("sources")
    return isinstance(sources, list) and any(isinstance(s, dict) and "serviceAccountToken" in s for s in sources)


def _token_mount(mount: Any) -> bool:
    return (
        isinstance(mount, dict)
        and isinstance(mount.get("name"), str)
        and mount["name"].startswith(TOKEN_VOLUME_PREFIX)
        and mount.get("mountPath") == TOKEN_MOUNT_PATH
    )

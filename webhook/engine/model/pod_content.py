"""What a pod runs, as one digest: the content a grant is bound to (images, commands, environment,
devices, privileged bits, volumes), the same whether it is read on a pod template at the controller
object's ``/mutate`` or on a pod the controller created from it, as the apiserver stores it.

Why these fields: they are what the rules an exception may cover read of a container (device reach,
GPU counts, the image's own environment) and what a live pod may change (``spec.containers[*].image``
by UPDATE, ephemeral containers by ``kubectl debug``). Why not the others: what the apiserver and the
kubelet add or change on their own would make a controller's pod differ from its template for no one's
choice — defaulted fields (``imagePullPolicy``, ``terminationMessagePath``, a volume's
``defaultMode: 420``, a ``fieldRef``'s ``apiVersion: v1``, requests defaulted from limits on pods),
the service-account token volume and its mounts, the scheduler's ``nodeName``, status, tolerations
(DefaultTolerationSeconds adds two) and the ``cpu``/``memory`` an in-place resize may change.
Placement (tolerations, nodeSelector, affinity) is left to the rules themselves: a pod UPDATE that
changes what it can reach is judged on its own, by whoever sends it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import orjson

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

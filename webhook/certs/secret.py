"""Keep the generated certificates in Secrets, so that a Job can run ``certs generate`` again and again.

Why: the self-signed overlay runs ``certs generate`` in a Job (and a CronJob for renewal) whose
filesystem is an emptyDir. Without persistence every run would mint a new CA and force a caBundle
swap. So ``generate`` first *seeds* the missing local files from the Secrets, lets the idempotent
``generate()`` decide (keep / renew leaf / new CA), and writes back only what changed.

Two Secrets, on purpose: the serving pair (``kubernetes.io/tls``: ``tls.crt``, ``tls.key``, ``ca.crt``)
is mounted by the webhook pods; the CA key (``ca.crt``, ``ca.key``) is read only by the cert Job, so a
compromised webhook pod cannot mint certificates.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from webhook.certs.generate import CA_CERT, CA_KEY, TLS_CERT, TLS_KEY

REQUEST_TIMEOUT = 15.0
LABELS = {"app.kubernetes.io/name": "gpu-admission", "app.kubernetes.io/managed-by": "gpu-admission-certs"}


class SecretError(RuntimeError):
    """The Secret could not be read or written; the message carries the API status."""


@dataclass(frozen=True, slots=True)
class SecretSpec:
    """A Secret and the files it holds (key in the Secret = file name in the certificate directory)."""

    name: str
    type: str
    files: tuple[str, ...]


def serving_secret(name: str) -> SecretSpec:
    return SecretSpec(name, "kubernetes.io/tls", (TLS_CERT, TLS_KEY, CA_CERT))


def ca_secret(name: str) -> SecretSpec:
    return SecretSpec(name, "Opaque", (CA_CERT, CA_KEY))


_PRIVATE = {TLS_KEY, CA_KEY}


def seed(api_client: Any, namespace: str, spec: SecretSpec, out_dir: Path) -> list[str]:
    """Restore files that are missing in ``out_dir`` from the Secret; existing local files win."""
    current = _read(api_client, namespace, spec.name)
    if current is None:
        return []
    data = current.get("data") or {}
    restored: list[str] = []
    out_dir.mkdir(parents=True, exist_ok=True)
    for fname in spec.files:
        path = out_dir / fname
        if path.exists() or fname not in data:
            continue
        path.touch(mode=0o600 if fname in _PRIVATE else 0o644)
        path.write_bytes(base64.b64decode(data[fname]))
        restored.append(fname)
    return restored


def store(api_client: Any, namespace: str, spec: SecretSpec, out_dir: Path) -> str:
    """Create or update the Secret from the local files; returns "created", "updated" or "unchanged"."""
    from kubernetes import client

    data = {f: base64.b64encode((out_dir / f).read_bytes()).decode() for f in spec.files}
    current = _read(api_client, namespace, spec.name)
    api = client.CoreV1Api(api_client)
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": spec.name, "namespace": namespace, "labels": dict(LABELS)},
        "type": spec.type,
        "data": data,
    }
    if current is None:
        _call(lambda: api.create_namespaced_secret(namespace, client.V1Secret.from_dict(body), **_opts()), spec)
        return "created"
    if (current.get("data") or {}) == data:
        return "unchanged"
    if current.get("type", spec.type) != spec.type:
        raise SecretError(f"secret {namespace}/{spec.name} has type {current.get('type')}, expected {spec.type}")
    meta = current.get("metadata") or {}
    body["metadata"]["labels"] = {**(meta.get("labels") or {}), **LABELS}
    body["metadata"]["resourceVersion"] = meta.get("resourceVersion")  # optimistic lock: two Jobs never interleave
    secret = client.V1Secret.from_dict(body)
    _call(lambda: api.replace_namespaced_secret(spec.name, namespace, secret, **_opts()), spec)
    return "updated"


def _opts() -> dict[str, Any]:
    return {"_preload_content": False, "_request_timeout": REQUEST_TIMEOUT}


def _read(api_client: Any, namespace: str, name: str) -> dict[str, Any] | None:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    api = client.CoreV1Api(api_client)
    try:
        response = api.read_namespaced_secret(name, namespace, **_opts())
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise SecretError(f"get secret {namespace}/{name}: HTTP {exc.status}: {_message(exc.body)}") from exc
    return json.loads(response.data)


def _call(fn: Any, spec: SecretSpec) -> None:
    from kubernetes.client.exceptions import ApiException

    try:
        fn()
    except ApiException as exc:
        hint = " (another run updated it; run again)" if exc.status == 409 else ""
        raise SecretError(f"write secret {spec.name}: HTTP {exc.status}: {_message(exc.body)}{hint}") from exc


def _message(body: Any) -> str:
    try:
        return str(json.loads(body).get("message", ""))
    except (TypeError, ValueError, AttributeError):
        return str(body or "")[:200]

"""A read-only Kubernetes API stand-in for Helm's ``lookup`` (stdlib http.server, loopback, plain HTTP).

``helm template --dry-run=server`` runs the chart's ``lookup`` calls against a cluster: discovery
(``/version``, ``/api``, ``/apis``), then GETs of single Secrets and ConfigMaps, and a list of the
release's storage Secrets. This serves exactly that from a dict of objects, 404 for everything else, so
the chart's upgrade behaviour (certificates kept, re-issued near expiry, an existing policy ConfigMap
compared) is tested with the real Helm and no cluster.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

RESOURCES = {"secrets": "Secret", "configmaps": "ConfigMap"}
CLUSTER_SCOPED = {
    "Namespace", "ClusterRole", "ClusterRoleBinding", "PriorityClass", "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
    "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding",
}  # fmt: skip


def plural(kind: str) -> str:
    lower = kind.lower()
    if lower.endswith("y"):
        return lower[:-1] + "ies"
    return lower + ("es" if lower.endswith("s") else "s")


def _discovery(kinds: set[tuple[str, str]]) -> dict[str, Any]:
    """Discovery documents for ``kinds`` ((apiVersion, kind)) and the core Secrets and ConfigMaps."""
    by_version: dict[str, list[dict[str, Any]]] = {}
    for api_version, kind in sorted(kinds | {("v1", "Secret"), ("v1", "ConfigMap"), ("v1", "Namespace")}):
        by_version.setdefault(api_version, []).append({
            "name": plural(kind), "singularName": kind.lower(), "namespaced": kind not in CLUSTER_SCOPED,
            "kind": kind, "verbs": ["get", "list", "create", "update", "patch", "delete"]})  # fmt: skip
    groups: dict[str, list[str]] = {}
    for api_version in by_version:
        if "/" in api_version:
            group, version = api_version.split("/")
            groups.setdefault(group, []).append(version)
    docs: dict[str, Any] = {
        "/version": {"major": "1", "minor": "36", "gitVersion": "v1.36.0", "platform": "linux/amd64"},
        "/api": {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []},
        "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
            {"name": g, "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in vs],
             "preferredVersion": {"groupVersion": f"{g}/{vs[0]}", "version": vs[0]}}
            for g, vs in groups.items()]},
    }  # fmt: skip
    for api_version, resources in by_version.items():
        path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        docs[path] = {"kind": "APIResourceList", "groupVersion": api_version, "resources": resources}
    return docs


class _Handler(BaseHTTPRequestHandler):
    objects: dict[str, dict[str, Any]]
    discovery: dict[str, Any]

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _send(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        path = urlsplit(self.path).path.rstrip("/")
        if path in self.discovery:
            return self._send(200, self.discovery[path])
        if path in self.objects:
            return self._send(200, self.objects[path])
        parts = path.split("/")  # /api/v1/namespaces/NS/secrets
        if len(parts) == 6 and parts[5] in RESOURCES:
            items = [o for p, o in self.objects.items() if p.startswith(path + "/")]
            return self._send(200, {"kind": RESOURCES[parts[5]] + "List", "apiVersion": "v1",
                                    "metadata": {"resourceVersion": "1"}, "items": items})  # fmt: skip
        return self._send(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
                                "code": 404, "message": f"{path} not found"})  # fmt: skip


def object_path(kind: str, namespace: str, name: str) -> str:
    plural = {v: k for k, v in RESOURCES.items()}[kind]
    return f"/api/v1/namespaces/{namespace}/{plural}/{name}"


@contextmanager
def serving(objects: list[dict[str, Any]], kinds: set[tuple[str, str]], directory: Path) -> Iterator[Path]:
    """Serve ``objects`` and discovery of ``kinds``; yields a kubeconfig pointing at them (stopped on exit)."""
    handler = type("Handler", (_Handler,), {"discovery": _discovery(kinds), "objects": {
        object_path(o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objects}})  # fmt: skip
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    kubeconfig = directory / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "stub",
        "clusters": [{"name": "stub", "cluster": {"server": f"http://127.0.0.1:{server.server_port}"}}],
        "users": [{"name": "stub", "user": {}}],
        "contexts": [{"name": "stub", "context": {"cluster": "stub", "user": "stub"}}],
    }))  # fmt: skip
    try:
        yield kubeconfig
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)

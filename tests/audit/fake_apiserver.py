"""A loopback HTTP stand-in for the Kubernetes API: discovery, chunked lists and server-side apply.

It answers the way the apiserver documents it ("API concepts" in
https://kubernetes.io/docs/reference/using-api/api-concepts/: "Retrieving large results sets in
chunks", "Server-side apply"; "Discovery API"), which is what the audit relies on:

* ``GET /api`` (APIVersions), ``GET /api/v1`` and ``GET /apis/GROUP/VERSION`` (APIResourceList with
  ``name``, ``kind``, ``namespaced``, ``verbs``), ``GET /apis`` (APIGroupList with
  ``preferredVersion``); a group/version it does not serve is ``404``.
* A list takes ``limit`` and ``continue``: a page of at most ``limit`` items, ``metadata.continue``
  (an opaque token) while more remain, with ``metadata.remainingItemCount``, and ``metadata.
  resourceVersion``. Built-in kinds' items carry no ``apiVersion``/``kind`` (as the typed lists the
  apiserver serves); custom resources' items do. ``labelSelector`` filters by equality.
* ``expire_continues()`` makes every continue token issued so far expired: the next request with one
  gets ``410`` with a ``Status`` of reason ``Expired`` (what the apiserver answers once etcd compacted
  the list's revision).
* Without ``Authorization: Bearer <token>`` (or with another token) every request is ``401``.
* ``PATCH`` of an OpenReports report with ``Content-Type: application/apply-patch+yaml`` is a
  server-side apply: ``fieldManager`` is required (``422`` otherwise, as for the real apply), a body
  that is not YAML/JSON is ``400``, an object another manager owns without ``force=true`` is ``409``.
  Any other patch type is ``415``.

Every request is recorded (method, path, query, content type, body).
"""

from __future__ import annotations

import base64
import json
import sys
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import orjson
import yaml

APPLY = "application/apply-patch+yaml"


def _dumps(doc: Any) -> bytes:
    """orjson: the apiserver is fast to serve a page, and the benchmarks time the audit. A document
    nested deeper than orjson writes (255 levels; the apiserver's own JSON goes to 10,000, as a custom
    resource's free-form field may) is written by Python's json, with room to recurse."""
    try:
        return orjson.dumps(doc)
    except orjson.JSONEncodeError:
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(limit, 25_000))
        try:
            return json.dumps(doc).encode()
        finally:
            sys.setrecursionlimit(limit)

# (group, version, plural, kind, namespaced)
CORE = [
    ("", "v1", "namespaces", "Namespace", False),
    ("", "v1", "nodes", "Node", False),
    ("", "v1", "pods", "Pod", True),
]
BUILTIN_GROUPS = [
    ("apps", "v1", "deployments", "Deployment", True),
    ("apps", "v1", "replicasets", "ReplicaSet", True),
    ("apps", "v1", "statefulsets", "StatefulSet", True),
    ("apps", "v1", "daemonsets", "DaemonSet", True),
    ("batch", "v1", "jobs", "Job", True),
    ("batch", "v1", "cronjobs", "CronJob", True),
    ("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", False),
    ("resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate", True),
    ("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", True),
]
OPENREPORTS = [
    ("openreports.io", "v1alpha1", "reports", "Report", True),
    ("openreports.io", "v1alpha1", "clusterreports", "ClusterReport", False),
]
BUILTIN_API_GROUPS = {"", "apps", "batch", "resource.k8s.io"}


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    content_type: str
    body: bytes
    authorized: bool


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


class FakeAPIServer:
    def __init__(self, *, token: str = "audit-token", served: list[tuple] | None = None) -> None:
        self.token = token
        self.served = list(served if served is not None else CORE + BUILTIN_GROUPS + OPENREPORTS)
        self.objects: dict[tuple[str, str, str], list[dict[str, Any]]] = {}  # (group, plural, "") -> items
        self.reports: dict[str, dict[str, Any]] = {}  # path -> applied object
        self.managers: dict[str, str] = {}  # path -> field manager that owns it
        self.requests: list[Request] = []
        self.rv = 1000
        self.epoch = 0  # bumped by expire_continues: older tokens are expired
        self._lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    # --- setup -----------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeAPIServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def kubeconfig(self, directory: Path, token: str | None = None) -> Path:
        path = directory / "kubeconfig"
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                    "users": [{"name": "auditor", "user": {"token": token if token is not None else self.token}}],
                    "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "auditor"}}],
                    "current-context": "fake",
                }
            )
        )
        return path

    def add(self, obj: dict[str, Any]) -> None:
        """Store an object under the resource its apiVersion/kind is served as."""
        group, _, _version = obj["apiVersion"].rpartition("/")
        for g, _v, plural, kind, _ns in self.served:
            if g == group and kind == obj["kind"]:
                self.rv += 1
                meta = obj.setdefault("metadata", {})
                meta.setdefault("uid", f"uid-{kind.lower()}-{meta.get('namespace', '')}-{meta['name']}")
                meta["resourceVersion"] = str(self.rv)
                self.objects.setdefault((g, plural), []).append(obj)
                return
        raise ValueError(f"{obj['apiVersion']} {obj['kind']} is not served by this fake")

    def expire_continues(self) -> None:
        with self._lock:
            self.epoch += 1

    def lists(self, plural: str) -> list[Request]:
        return [r for r in self.requests if r.method == "GET" and r.path.endswith("/" + plural)]

    def patches(self) -> list[Request]:
        return [r for r in self.requests if r.method == "PATCH"]

    # --- HTTP --------------------------------------------------------------------------------------

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, code: int, doc: dict[str, Any]) -> None:
                body = _dumps(doc)
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _record(self, method: str) -> tuple[Request, Any]:
                url = urlparse(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                auth = self.headers.get("Authorization") or ""
                request = Request(
                    method,
                    url.path,
                    {k: v[-1] for k, v in parse_qs(url.query).items()},
                    self.headers.get("Content-Type") or "",
                    body,
                    auth == f"Bearer {api.token}",
                )
                api.requests.append(request)
                return request, url

            def do_GET(self) -> None:
                request, _ = self._record("GET")
                if not request.authorized:
                    self._send(401, _status(401, "Unauthorized", "Unauthorized"))
                    return
                code, doc = api.get(request)
                self._send(code, doc)

            def do_PATCH(self) -> None:
                request, _ = self._record("PATCH")
                if not request.authorized:
                    self._send(401, _status(401, "Unauthorized", "Unauthorized"))
                    return
                code, doc = api.patch(request)
                self._send(code, doc)

        return Handler

    # --- the API ---------------------------------------------------------------------------------

    def _group_versions(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for g, v, *_ in self.served:
            if g and v not in out.setdefault(g, []):
                out[g].append(v)
        return out

    def get(self, request: Request) -> tuple[int, dict[str, Any]]:
        parts = [p for p in request.path.split("/") if p]
        if parts == ["api"]:
            return 200, {"kind": "APIVersions", "versions": ["v1"]}
        if parts == ["apis"]:
            groups = [
                {
                    "name": g,
                    "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in versions],
                    "preferredVersion": {"groupVersion": f"{g}/{versions[0]}", "version": versions[0]},
                }
                for g, versions in self._group_versions().items()
            ]
            return 200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
        if parts[:1] == ["api"] and len(parts) == 2:
            return self._resource_list("", parts[1])
        if parts[:1] == ["apis"] and len(parts) == 3:
            return self._resource_list(parts[1], parts[2])
        if parts[:1] == ["api"]:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[:1] == ["apis"] and len(parts) > 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return 404, _status(404, "NotFound", "the server could not find the requested resource")
        namespace = None
        if len(rest) == 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if len(rest) != 1:
            return 404, _status(404, "NotFound", "the server could not find the requested resource")
        served = next((s for s in self.served if s[0] == group and s[1] == version and s[2] == rest[0]), None)
        if served is None:
            return 404, _status(404, "NotFound", "the server could not find the requested resource")
        return self._list(served, namespace, request.query)

    def _resource_list(self, group: str, version: str) -> tuple[int, dict[str, Any]]:
        resources = [
            {
                "name": plural,
                "singularName": kind.lower(),
                "namespaced": namespaced,
                "kind": kind,
                "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
            }
            for g, v, plural, kind, namespaced in self.served
            if g == group and v == version
        ]
        if not resources:
            return 404, _status(404, "NotFound", "the server could not find the requested resource")
        resources.append({"name": f"{resources[0]['name']}/status", "namespaced": True, "kind": "x", "verbs": ["get"]})
        return 200, {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version,
            "resources": resources,
        }

    def _items(self, served: tuple, namespace: str | None, selector: str) -> list[dict[str, Any]]:
        group, _version, plural, _kind, _ = served
        if (group, plural) == ("openreports.io", "reports"):
            items = [o for o in self.reports.values() if o["kind"] == "Report"]
        else:
            items = self.objects.get((group, plural), [])
        if namespace:
            items = [o for o in items if o["metadata"].get("namespace") == namespace]
        for term in filter(None, selector.split(",")):
            key, _, value = term.partition("=")
            items = [o for o in items if (o["metadata"].get("labels") or {}).get(key) == value]
        return items

    @staticmethod
    def _served_as(obj: dict[str, Any], group: str, version: str) -> dict[str, Any]:
        """A copy of ``obj`` as a list item: typed lists' items carry no apiVersion/kind."""
        if group in BUILTIN_API_GROUPS:
            return {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
        return {**obj, "apiVersion": f"{group}/{version}"}

    def _list(self, served: tuple, namespace: str | None, query: dict[str, str]) -> tuple[int, dict[str, Any]]:
        items = self._items(served, namespace, query.get("labelSelector", ""))
        start = 0
        token = query.get("continue")
        if token:
            try:
                state = json.loads(base64.urlsafe_b64decode(token.encode()))
            except ValueError:
                return 400, _status(400, "BadRequest", "continue key is not valid")
            if state["epoch"] != self.epoch:
                doc = _status(
                    410,
                    "Expired",
                    "The provided continue parameter is too old to display a consistent list result. You can "
                    "start a new list without the continue parameter.",
                )
                return 410, doc
            start = state["start"]
        limit = int(query.get("limit") or 0) or len(items) or 1
        page = [self._served_as(o, served[0], served[1]) for o in items[start : start + limit]]
        meta: dict[str, Any] = {"resourceVersion": str(self.rv)}
        rest = len(items) - (start + len(page))
        if rest > 0:
            meta["continue"] = base64.urlsafe_b64encode(
                json.dumps({"start": start + len(page), "epoch": self.epoch}).encode()
            ).decode()
            meta["remainingItemCount"] = rest
        group, version, _, kind, _ = served
        return 200, {
            "kind": f"{kind}List",
            "apiVersion": f"{group}/{version}" if group else version,
            "metadata": meta,
            "items": page,
        }

    def patch(self, request: Request) -> tuple[int, dict[str, Any]]:
        if request.content_type != APPLY:
            return 415, _status(415, "UnsupportedMediaType", f"the body of the request was in an unknown format: "
                                f"accepted media types include: {APPLY}")
        manager = request.query.get("fieldManager")
        if not manager:
            return 422, _status(422, "Invalid", 'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: '
                                "is required for apply patch")
        parts = [p for p in request.path.split("/") if p]
        if parts[:3] != ["apis", "openreports.io", "v1alpha1"]:
            return 404, _status(404, "NotFound", "the server could not find the requested resource")
        try:
            body = yaml.safe_load(request.body)
        except yaml.YAMLError as exc:
            return 400, _status(400, "BadRequest", f"error decoding YAML: {exc}")
        if not isinstance(body, dict):
            return 400, _status(400, "BadRequest", "the body is not an object")
        owner = self.managers.get(request.path)
        if owner is not None and owner != manager and request.query.get("force") != "true":
            return 409, _status(409, "Conflict", f'Apply failed with 1 conflict: conflict with "{owner}"')
        self.rv += 1
        body.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
        self.reports[request.path] = body
        self.managers[request.path] = manager
        return 200, body

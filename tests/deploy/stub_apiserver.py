"""A tiny Kubernetes API stand-in (stdlib http.server, loopback only) for ``certs inject``/``generate``.

It serves exactly what the cert commands use, with the API server's semantics where they matter:
GET/PATCH of webhook configurations (PATCH must be a strategic merge; ``webhooks`` merge by ``name``;
an unknown webhook name is refused, as the real server's validation would) and GET/POST/PUT of
Secrets (POST conflicts when the Secret exists, PUT needs the current ``resourceVersion``).
Every request is recorded so tests can assert what went over the wire.
"""

from __future__ import annotations

import copy
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

ADMISSION = "/apis/admissionregistration.k8s.io/v1"
SMP = "application/strategic-merge-patch+json"


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    content_type: str
    body: Any


@dataclass
class StubAPIServer:
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)
    port: int = 0

    # --- seeding ------------------------------------------------------------------------------

    def add_webhook_config(self, kind: str, name: str, webhooks: list[str], ca_bundle: str | None = None) -> str:
        plural = f"{kind}webhookconfigurations"
        hooks = []
        for hook in webhooks:
            client: dict[str, Any] = {"service": {"name": "gpu-admission", "namespace": "gpu-admission", "path": "/x"}}
            if ca_bundle is not None:
                client["caBundle"] = ca_bundle
            hooks.append({"name": hook, "clientConfig": client, "failurePolicy": "Fail", "sideEffects": "None"})
        path = f"{ADMISSION}/{plural}/{name}"
        self.objects[path] = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration" if kind == "mutating" else "ValidatingWebhookConfiguration",
            "metadata": {"name": name, "resourceVersion": "1"},
            "webhooks": hooks,
        }
        return path

    def calls(self, method: str) -> list[Recorded]:
        return [r for r in self.requests if r.method == method]

    def kubeconfig(self, directory: Path) -> Path:
        path = directory / "kubeconfig"
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "stub", "cluster": {"server": f"http://127.0.0.1:{self.port}"}}],
                    "users": [{"name": "tester", "user": {"token": "not-a-secret"}}],
                    "contexts": [{"name": "stub", "context": {"cluster": "stub", "user": "tester"}}],
                    "current-context": "stub",
                }
            )
        )
        return path

    # --- request handling ---------------------------------------------------------------------

    def handle(self, method: str, url: str, content_type: str, raw: bytes) -> tuple[int, dict[str, Any]]:
        parts = urlsplit(url)
        path = parts.path
        body = json.loads(raw) if raw else None
        self.requests.append(Recorded(method, path, parse_qs(parts.query), content_type, body))
        if method == "GET":
            obj = self.objects.get(path)
            return (200, obj) if obj is not None else _status(404, "NotFound", f"{path} not found")
        if method == "PATCH":
            return self._patch(path, content_type, body)
        if method == "POST":
            name = body["metadata"]["name"]
            item = f"{path}/{name}"
            if item in self.objects:
                return _status(409, "AlreadyExists", f"{name} already exists")
            obj = copy.deepcopy(body)
            obj["metadata"]["resourceVersion"] = "1"
            self.objects[item] = obj
            return 201, obj
        if method == "PUT":
            current = self.objects.get(path)
            if current is None:
                return _status(404, "NotFound", f"{path} not found")
            if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                return _status(409, "Conflict", "the object has been modified")
            obj = copy.deepcopy(body)
            obj["metadata"]["resourceVersion"] = str(int(current["metadata"]["resourceVersion"]) + 1)
            self.objects[path] = obj
            return 200, obj
        return _status(405, "MethodNotAllowed", method)

    def _patch(self, path: str, content_type: str, body: Any) -> tuple[int, dict[str, Any]]:
        current = self.objects.get(path)
        if current is None:
            return _status(404, "NotFound", f"{path} not found")
        if content_type != SMP:
            return _status(415, "UnsupportedMediaType", f"stub accepts only {SMP}, got {content_type}")
        merged = copy.deepcopy(current)
        by_name = {w["name"]: w for w in merged["webhooks"]}
        for entry in body.get("webhooks", []):
            if entry.get("name") not in by_name:  # the real server: the new entry fails validation
                return _status(422, "Invalid", f"webhooks[name={entry.get('name')}]: required fields missing")
            _merge(by_name[entry["name"]], entry)
        merged["metadata"]["resourceVersion"] = str(int(merged["metadata"]["resourceVersion"]) + 1)
        self.objects[path] = merged
        return 200, merged


def _merge(dst: dict[str, Any], src: dict[str, Any]) -> None:
    for key, value in src.items():
        if isinstance(value, dict) and isinstance(dst.get(key), dict):
            _merge(dst[key], value)
        else:
            dst[key] = value


def _status(code: int, reason: str, message: str) -> tuple[int, dict[str, Any]]:
    return code, {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "reason": reason,
        "message": message,
        "code": code,
    }


def start(stub: StubAPIServer) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
            code, payload = stub.handle(self.command, self.path, ctype, raw)
            data = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_PATCH = do_POST = do_PUT = _serve

        def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    stub.port = server.server_address[1]
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server

"""A stand-in for another stack's mutating webhook, served over TLS on loopback for the real apiserver.

It answers AdmissionReviews with the JSON Patch from a pod to what a transform makes of it (e.g.
``tests/engine/stack_webhooks.hami_webhook``, written from HAMi's sources): so the apiserver runs our
webhook and theirs in its real order, with real reinvocation, and stores what both wrote.
"""

from __future__ import annotations

import base64
import json
import ssl
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jsonpatch

from tests.e2e.plane.controlplane import free_port


class StandIn:
    """``transform`` behind ``https://127.0.0.1:PORT/mutate``; every review it saw is kept in ``seen``."""

    def __init__(self, transform: Callable[[dict[str, Any]], dict[str, Any]], certs: Path) -> None:
        self.transform = transform
        self.seen: list[dict[str, Any]] = []
        self.port = free_port()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                request = review["request"]
                outer.seen.append(request)
                pod = request["object"]
                ops = jsonpatch.make_patch(pod, outer.transform(pod)).patch
                response: dict[str, Any] = {"uid": request["uid"], "allowed": True}
                if ops:
                    response["patchType"] = "JSONPatch"
                    response["patch"] = base64.b64encode(json.dumps(ops).encode()).decode()
                body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                   "response": response}).encode()  # fmt: skip
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(certs / "tls.crt", certs / "tls.key")
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> StandIn:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def configuration(self, name: str, webhook: str, ca_pem: bytes) -> dict[str, Any]:
        """A MutatingWebhookConfiguration for Pod CREATE, as the stack's chart installs it (IfNeeded, Fail)."""
        return {
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [{
                "name": webhook, "admissionReviewVersions": ["v1"], "sideEffects": "None",
                "failurePolicy": "Fail", "reinvocationPolicy": "IfNeeded", "timeoutSeconds": 5,
                "clientConfig": {"url": f"https://127.0.0.1:{self.port}/mutate",
                                 "caBundle": base64.b64encode(ca_pem).decode()},
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                           "resources": ["pods"], "scope": "Namespaced"}],
                "namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                                            "values": ["kube-system", "gpu-admission"]}]},
            }],
        }  # fmt: skip

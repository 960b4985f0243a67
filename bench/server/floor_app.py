"""The floor: the least an AdmissionReview webhook on this stack can do, served exactly like ours.

Flask + gunicorn with the *same* options as ``gpu-admission serve`` (``gunicorn_options``: gthread,
workers, threads, keep-alive, preload, worker tmp dir, logging config) and the *same* TLS context hook
(:class:`~webhook.server.tls.CertReloader`, TLS >= 1.2, cached context). Per request it does what any
webhook must: read the body, decode the JSON (orjson, as ours does), echo ``request.uid`` and answer
``allowed: true`` — on ``/mutate`` with a one-operation JSON Patch (base64), on ``/validate`` without
one (the contract forbids a patch there). No policy, no metrics, no decision log.

The throughput ratio ours/floor therefore isolates what gpu-admission adds on top of the stack it is
built on; everything the stack costs (TLS, HTTP parsing, WSGI, Flask routing) cancels out.

Run: ``python bench/server/floor_app.py --bind 127.0.0.1:9443 --tls-cert F --tls-key F --workers 2 --threads 8``
"""

from __future__ import annotations

import argparse
import base64
import sys
from pathlib import Path
from typing import Any

import orjson
from flask import Flask, Response, request
from gunicorn.app.base import BaseApplication

sys.path.append(str(Path(__file__).resolve().parents[2]))  # PYTHONPATH (run.py --code-root) wins
from webhook.server.gunicorn_app import gunicorn_options
from webhook.server.settings import ServeSettings
from webhook.server.tls import CertReloader

PATCH_OPS = [{"op": "add", "path": "/metadata/labels/gpu-admission.io~1floor", "value": "true"}]


def create_floor_app() -> Flask:
    app = Flask("floor")

    def answer(patch: bool) -> Response:
        doc = orjson.loads(request.get_data(cache=False))
        response: dict[str, Any] = {"uid": doc["request"]["uid"], "allowed": True}
        if patch:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(orjson.dumps(PATCH_OPS)).decode("ascii")
        body = {"apiVersion": doc["apiVersion"], "kind": "AdmissionReview", "response": response}
        return Response(orjson.dumps(body), mimetype="application/json")

    @app.post("/mutate")
    def mutate() -> Response:
        return answer(True)

    @app.post("/validate")
    def validate() -> Response:
        return answer(False)

    @app.get("/healthz")
    def healthz() -> Response:
        return Response(b'{"status":"ok"}', mimetype="application/json")

    return app


class FloorServer(BaseApplication):
    def __init__(self, settings: ServeSettings):
        self.settings = settings
        self.tls = CertReloader(settings.cert_interval)
        super().__init__(prog="floor")

    def load_config(self) -> None:
        for key, value in gunicorn_options(self.settings).items():
            self.cfg.set(key, value)
        self.cfg.set("proc_name", "gpu-admission-floor")
        self.cfg.set("ssl_context", self.tls)
        self.cfg.set("post_worker_init", self.post_worker_init)

    def post_worker_init(self, worker: Any) -> None:
        from gunicorn import sock

        sock.ssl_context(worker.cfg)  # as ours: load the context before the first connection

    def load(self) -> Any:
        return create_floor_app()


def main(argv: list[str] | None = None) -> None:
    d = ServeSettings()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bind", default=d.bind)
    p.add_argument("--tls-cert", required=True)
    p.add_argument("--tls-key", required=True)
    p.add_argument("--workers", type=int, default=d.workers)
    p.add_argument("--threads", type=int, default=d.threads)
    p.add_argument("--keepalive", type=int, default=d.keepalive)
    p.add_argument("--log-level", default=d.log_level)
    args = p.parse_args(argv)
    settings = ServeSettings(
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        bind=args.bind,
        workers=args.workers,
        threads=args.threads,
        keepalive=args.keepalive,
        metrics_bind=None,
        log_level=args.log_level,
    )
    FloorServer(settings).run()


if __name__ == "__main__":
    main()

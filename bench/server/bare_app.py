"""The bare floor: an AdmissionReview echo as plain WSGI, no framework, served exactly like ours.

The Flask floor (``floor_app.py``) cancels out what the stack costs, Flask included; this one measures
how much of that is Flask's: the same gunicorn options as ``gpu-admission serve`` (gthread, workers,
threads, keep-alive, preload, logging config) and the same TLS context hook (``FloorServer``), the
same orjson, and per request only what any webhook must do: read ``CONTENT_LENGTH`` bytes, decode,
echo ``request.uid`` with ``allowed: true`` (a one-operation JSON Patch on ``/mutate``, none on
``/validate``). Ratios against it say how close our edge is to the least Python can do here.

Run: ``python bench/server/bare_app.py --bind 127.0.0.1:9443 --tls-cert F --tls-key F --workers 2 --threads 8``
"""

from __future__ import annotations

import base64
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import orjson

sys.path.append(str(Path(__file__).resolve().parents[2]))  # PYTHONPATH (run.py --code-root) wins
from bench.server import floor_app

PATCH = base64.b64encode(orjson.dumps(floor_app.PATCH_OPS)).decode("ascii")
JSON = [("Content-Type", "application/json")]
HEALTHY = b'{"status":"ok"}'

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


def bare_app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
    path, method = environ.get("PATH_INFO", ""), environ.get("REQUEST_METHOD", "")
    if method == "GET" and path == "/healthz":
        start_response("200 OK", [*JSON, ("Content-Length", str(len(HEALTHY)))])
        return [HEALTHY]
    if method != "POST" or path not in ("/mutate", "/validate"):
        start_response("404 Not Found", [("Content-Length", "0")])
        return [b""]
    length = int(environ.get("CONTENT_LENGTH") or 0)
    doc = orjson.loads(environ["wsgi.input"].read(length))
    response: dict[str, Any] = {"uid": doc["request"]["uid"], "allowed": True}
    if path == "/mutate":
        response["patchType"] = "JSONPatch"
        response["patch"] = PATCH
    body = orjson.dumps({"apiVersion": doc["apiVersion"], "kind": "AdmissionReview", "response": response})
    start_response("200 OK", [*JSON, ("Content-Length", str(len(body)))])
    return [body]


class BareServer(floor_app.FloorServer):
    """``FloorServer`` (our gunicorn options and TLS hook) serving :func:`bare_app`."""

    def load_config(self) -> None:
        super().load_config()
        self.cfg.set("proc_name", "gpu-admission-bare")

    def load(self) -> Any:
        return bare_app


def main(argv: list[str] | None = None) -> None:
    """The Flask floor's options (spelled out here: ``run.py --code-root`` may import an older floor)."""
    import argparse

    from webhook.server.settings import ServeSettings

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
    BareServer(settings).run()


if __name__ == "__main__":
    main()

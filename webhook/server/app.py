"""The Flask app factory: routes, JSON error answers, health and readiness. A thin edge.

Every answer is JSON, including errors: a 4xx names what was wrong with the request (and never
echoes it), an unknown path is a JSON 404, and an unexpected exception is a logged JSON 500 rather
than gunicorn's HTML page. The admission views do three things: check the content type, hand the
raw bytes to :class:`~webhook.server.admission.Admitter`, serialise the result with orjson.
"""

from __future__ import annotations

from typing import Any

import orjson
from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException

from webhook.server import metrics
from webhook.server.logs import server_log
from webhook.server.review import MAX_BODY_BYTES, ReviewError, error_body
from webhook.server.runtime import Runtime

ENDPOINTS = frozenset({"mutate", "validate", "healthz", "readyz"})
DRAIN_LIMIT = 4 * MAX_BODY_BYTES
_REASONS = {400: "Bad Request", 413: "Payload Too Large", 415: "Unsupported Media Type"}


def _json(doc: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(doc), status=status, mimetype="application/json")


def create_app(runtime: Runtime) -> Flask:
    app = Flask("gpu_admission")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES  # 413 before a byte of an oversized body is parsed
    app.extensions["gpu_admission"] = runtime
    admitter = runtime.admitter

    def admit(endpoint: str) -> Response:
        # the apiserver sends exactly "application/json": compare the raw header before paying for
        # werkzeug's parameter parsing, which the other spellings (charset, case) still get
        if request.environ.get("CONTENT_TYPE") != "application/json" and request.mimetype != "application/json":
            got = (request.mimetype or "none")[:80]
            raise ReviewError(415, f"Content-Type must be application/json, got {got!r}")
        return _json(admitter.handle(endpoint, request.get_data(cache=False)))

    @app.post("/mutate")
    def mutate() -> Response:
        return admit("mutate")

    @app.post("/validate")
    def validate() -> Response:
        return admit("validate")

    @app.get("/healthz")
    def healthz() -> Response:
        """Liveness: the worker answers. Nothing else; a slow dependency must not get pods killed."""
        return _json({"status": "ok"})

    @app.get("/readyz")
    def readyz() -> Response:
        """Ready or not, and why; no policy, digest or failure mode (see Runtime.readiness)."""
        ready, answer = runtime.readiness()
        return _json(answer, 200 if ready else 503)

    @app.errorhandler(ReviewError)
    def bad_review(exc: ReviewError) -> Response:
        return _bad_request(exc.status, _REASONS.get(exc.status, "Bad Request"), exc.message)

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        status = exc.code or 500
        message = exc.description or exc.name
        if status == 413:
            message = f"request body larger than {MAX_BODY_BYTES} bytes (the apiserver's own limit)"
            _drain()
        return _bad_request(status, exc.name, message)

    @app.errorhandler(Exception)
    def unexpected(exc: Exception) -> Response:
        server_log.error(
            "unhandled error", exc_info=exc, extra={"fields": {"path": request.path, "error": type(exc).__name__}}
        )
        return _json(error_body(500, "Internal Server Error", f"internal error ({type(exc).__name__})"), 500)

    return app


def _drain() -> None:
    """Read and drop an oversized body (up to a bound) before answering 413.

    gunicorn drains at most 64 KiB of an unread body and then closes the connection; a client still
    sending gets a reset and may never read the 413 (the answer is lost in the reset). Reading the
    rest keeps the answer readable and the connection reusable; past the bound, closing is cheaper.
    """
    stream = request.environ.get("wsgi.input")
    if stream is None:
        return
    left = DRAIN_LIMIT
    try:
        while left > 0:
            chunk = stream.read(min(65536, left))
            if not chunk:
                return
            left -= len(chunk)
    except OSError:
        return


def _bad_request(status: int, reason: str, message: str) -> Response:
    endpoint = request.endpoint if request.endpoint in ENDPOINTS else "other"
    metrics.BAD_REQUESTS.labels(endpoint, str(status)).inc()
    if status != 404:
        server_log.warning(
            "rejected request",
            extra={"fields": {"path": request.path, "code": status, "error": message, "remote": request.remote_addr}},
        )
    return _json(error_body(status, reason, message), status)

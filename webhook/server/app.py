"""The WSGI app: admission routes, JSON error answers, health and readiness. A thin edge.

Every answer is JSON, including errors: a 4xx names what was wrong with the request (and never
echoes it), an unknown path is a JSON 404, and an unexpected exception is a logged JSON 500 rather
than gunicorn's HTML page. The admission views do three things: check the content type, hand the
raw bytes to :class:`~webhook.server.admission.Admitter`, serialise the result with orjson.

The apiserver's own calls (``POST /mutate`` and ``/validate``, ``Content-Type: application/json``, a
``Content-Length`` within the limit) are answered by :class:`AdmissionRoutes` in front of Flask: they
are nearly every request the server gets, and Flask's request context, routing and ``Response`` cost
about 60 µs per request, as much as the engine's judgment of a GPU pod (docs/performance.md). Every
other request, and every admission request that is not in that plain shape (another content type,
no or an oversized ``Content-Length``, another method), goes to Flask, which answers it exactly as
before; both paths share the error answers (:func:`reject`, :func:`unexpected_error`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import orjson
from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException
from werkzeug.http import HTTP_STATUS_CODES

from webhook.server import metrics
from webhook.server.logs import server_log
from webhook.server.review import MAX_BODY_BYTES, ReviewError, error_body
from webhook.server.runtime import Runtime

ENDPOINTS = frozenset({"mutate", "validate", "healthz", "readyz"})
DRAIN_LIMIT = 4 * MAX_BODY_BYTES
_REASONS = {400: "Bad Request", 413: "Payload Too Large", 415: "Unsupported Media Type"}


def _json(doc: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(doc), status=status, mimetype="application/json")


WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
_ROUTES = {"/mutate": "mutate", "/validate": "validate"}
_JSON = ("Content-Type", "application/json")


def _status_line(code: int) -> str:
    return f"{code} {HTTP_STATUS_CODES.get(code, 'Unknown').upper()}"  # werkzeug's spelling, as Flask answers


def _plain_length(value: Any) -> int | None:
    """``Content-Length`` when it is plain digits within the limit; None sends the request to Flask."""
    if type(value) is not str or not value.isdigit() or not value.isascii() or len(value) > 9:
        return None
    length = int(value)
    return length if length <= MAX_BODY_BYTES else None


class AdmissionRoutes:
    """WSGI middleware in front of Flask's ``wsgi_app``: answers the apiserver's admission calls directly
    (see the module docstring) and hands everything else to Flask unread."""

    __slots__ = ("admitter", "fallback")

    def __init__(self, admitter: Any, fallback: WSGIApp):
        self.admitter = admitter
        self.fallback = fallback

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") == "POST" and environ.get("CONTENT_TYPE") == "application/json":
            path = environ.get("PATH_INFO")
            endpoint = _ROUTES.get(path) if type(path) is str else None
            length = _plain_length(environ.get("CONTENT_LENGTH")) if endpoint is not None else None
            if endpoint is not None and length is not None:
                return self._admit(endpoint, length, environ, start_response)
        return self.fallback(environ, start_response)

    def _admit(
        self, endpoint: str, length: int, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        try:
            body = environ["wsgi.input"].read(length) if length else b""
            code, data = 200, orjson.dumps(self.admitter.handle(endpoint, body))
        except ReviewError as exc:
            code, doc = reject(endpoint, exc.status, exc.message, environ.get("PATH_INFO"), environ.get("REMOTE_ADDR"))
            data = orjson.dumps(doc)
        except Exception as exc:
            code, data = 500, orjson.dumps(unexpected_error(exc, environ.get("PATH_INFO")))
        start_response(_status_line(code), [_JSON, ("Content-Length", str(len(data)))])
        return [data]


def create_app(runtime: Runtime) -> Flask:
    """The Flask app, with :class:`AdmissionRoutes` as its ``wsgi_app`` (so its test client, and
    gunicorn, see both paths)."""
    app = Flask("gpu_admission")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES  # 413 before a byte of an oversized body is parsed
    app.extensions["gpu_admission"] = runtime
    admitter = runtime.admitter
    app.wsgi_app = AdmissionRoutes(admitter, app.wsgi_app)  # type: ignore[method-assign]

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
        return _json(unexpected_error(exc, request.path), 500)

    return app


def unexpected_error(exc: Exception, path: Any) -> dict[str, Any]:
    """Log an exception no handler expected; the JSON body of the 500 that answers it."""
    server_log.error("unhandled error", exc_info=exc, extra={"fields": {"path": path, "error": type(exc).__name__}})
    return error_body(500, "Internal Server Error", f"internal error ({type(exc).__name__})")


def reject(
    endpoint: str | None, status: int, message: str, path: Any, remote: Any, reason: str | None = None
) -> tuple[int, dict[str, Any]]:
    """Count and log a request answered with a 4xx; the status and JSON body of the answer."""
    metrics.BAD_REQUESTS.labels(endpoint if endpoint in ENDPOINTS else "other", str(status)).inc()
    if status != 404:
        server_log.warning(
            "rejected request",
            extra={"fields": {"path": path, "code": status, "error": message, "remote": remote}},
        )
    return status, error_body(status, reason or _REASONS.get(status, "Bad Request"), message)


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
    code, doc = reject(request.endpoint, status, message, request.path, request.remote_addr, reason)
    return _json(doc, code)

"""The AdmissionReview v1 wire contract: parse a request body, shape the response. Pure, no Flask.

Kept apart from the HTTP layer because the contract is exact and the apiserver is unforgiving: a
missing ``uid`` echo, a wrong ``apiVersion``/``kind``, a ``patch`` without ``patchType`` or a patch
from a validating webhook all turn into ``failurePolicy`` for the user (webhook-anchors §3). Every
rule here is one line so a reviewer can hold it against the contract.

Bad input raises :class:`ReviewError` with an HTTP status; the app turns it into a JSON 4xx. Only
well-formed reviews reach the engine.
"""

from __future__ import annotations

import base64
import reprlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from webhook.engine.model.requester import Requester

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
OPERATIONS = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})
MAX_BODY_BYTES = 3 * 1024 * 1024
"""The apiserver's own request limit (``MaxRequestBodyBytes``); nothing larger is a real review."""
MAX_STRUCTURES = 1 << 16
"""Most JSON objects and arrays one review may hold (counted as ``{`` and ``[`` bytes, strings
included, before parsing). Parsed, each costs 60-230 bytes of Python objects: a 3 MiB body of a
million empty ``{}`` grew a worker by ~600 MiB through the engine's copies, and by ~100 MiB for the
parse alone. A real Pod has hundreds; the 1 MiB Pod of the engine's tests about 6,000."""
MAX_ECHO = 80
"""Client values quoted back in error messages are cut to this length."""


class ReviewError(Exception):
    """A request that is not a usable AdmissionReview; ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(slots=True)
class Review:
    """The parts of ``request`` the server uses. ``obj`` is None only for DELETE/CONNECT."""

    uid: str
    api_version: str
    operation: str
    namespace: str | None
    obj: dict[str, Any] | None
    old_object: dict[str, Any] | None
    dry_run: bool
    requester: Requester | None = None  # request.userInfo: who asks (rules about who may write a marker)
    resource: tuple[str, str, str] | None = None  # request.resource: (group, version, resource)
    sub_resource: str = ""  # request.subResource ("scale", "ephemeralcontainers", "" for the object)
    name: str = ""  # request.name: the object's name (a Scale's parent)


_SHALLOW = reprlib.Repr()
_SHALLOW.maxlevel = 3


def _quote(value: Any) -> str:
    try:
        text = repr(value)
    except RecursionError:  # a value nested ~1000 deep (orjson accepts 1024 levels): say less
        text = _SHALLOW.repr(value)
    return text if len(text) <= MAX_ECHO else text[: MAX_ECHO - 1] + "…"


def parse_review(body: bytes) -> Review:
    """Decode and check one AdmissionReview body; raise :class:`ReviewError` (400) on anything odd."""
    if len(body) > MAX_STRUCTURES and body.count(b"{") + body.count(b"[") > MAX_STRUCTURES:  # ~1 ms, no objects
        raise ReviewError(
            400,
            f"the review holds more than {MAX_STRUCTURES} JSON objects and arrays; no real workload needs as many",
        )
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        if "depth" in str(exc) or "recursion" in str(exc).lower():
            raise ReviewError(400, "JSON is nested too deeply (limit: 1024 levels)") from None
        raise ReviewError(400, f"body is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ReviewError(400, "an AdmissionReview must be a JSON object")
    api_version, kind = doc.get("apiVersion"), doc.get("kind")
    if api_version != API_VERSION or kind != KIND:
        raise ReviewError(
            400,
            f"expected apiVersion {API_VERSION} and kind {KIND}, got {_quote(api_version)}/{_quote(kind)} "
            "(set admissionReviewVersions: [v1] in the webhook configuration)",
        )
    req = doc.get("request")
    if not isinstance(req, dict):
        raise ReviewError(400, "AdmissionReview.request is missing or not an object")
    uid = req.get("uid")
    if not isinstance(uid, str) or not uid:
        raise ReviewError(400, "request.uid is missing or not a non-empty string")
    operation = req.get("operation")
    if not isinstance(operation, str) or operation not in OPERATIONS:  # a list is unhashable: test type first
        raise ReviewError(
            400, f"request.operation must be one of {', '.join(sorted(OPERATIONS))}, got {_quote(operation)}"
        )
    namespace = req.get("namespace")
    if namespace is not None and not isinstance(namespace, str):
        raise ReviewError(400, "request.namespace must be a string")
    obj = req.get("object")
    old = req.get("oldObject")
    if operation in ("CREATE", "UPDATE"):
        if not isinstance(obj, dict):
            raise ReviewError(400, f"request.object is required for {operation} and must be an object")
        if old is not None and not isinstance(old, dict):
            raise ReviewError(400, "request.oldObject must be an object")
    else:
        obj = obj if isinstance(obj, dict) else None
        old = old if isinstance(old, dict) else None
    sub_resource = req.get("subResource") or ""
    if not isinstance(sub_resource, str):
        raise ReviewError(400, "request.subResource must be a string")
    name = req.get("name") or ""
    if not isinstance(name, str):
        raise ReviewError(400, "request.name must be a string")
    return Review(
        uid=uid,
        api_version=api_version,
        operation=operation,
        namespace=namespace or None,
        obj=obj,
        old_object=old,
        dry_run=req.get("dryRun") is True,
        requester=Requester.from_user_info(req.get("userInfo")),
        resource=_resource(req.get("resource")),
        sub_resource=sub_resource,
        name=name,
    )


def _resource(value: Any) -> tuple[str, str, str] | None:
    """``request.resource`` as (group, version, resource), or None when it is not that shape (only the
    subresource reviews that need it, a Scale's, depend on it and are denied without it)."""
    if not isinstance(value, dict):
        return None
    parts = (value.get("group", ""), value.get("version"), value.get("resource"))
    return parts if all(isinstance(p, str) for p in parts) and parts[1] and parts[2] else None  # type: ignore[return-value]


def encode_patch(ops: Sequence[Mapping[str, Any]]) -> str:
    """JSON Patch operations as the base64 string ``response.patch`` carries."""
    if type(ops) is not tuple and type(ops) is not list:  # orjson writes those two as arrays
        ops = list(ops)
    return base64.b64encode(orjson.dumps(ops)).decode("ascii")


def _envelope(review: Review, response: dict[str, Any]) -> dict[str, Any]:
    # the apiserver checks that apiVersion/kind match what it sent and that uid is echoed
    return {"apiVersion": review.api_version, "kind": KIND, "response": response}


def allow(
    review: Review,
    *,
    patch: Sequence[Mapping[str, Any]] = (),
    warnings: Iterable[str] = (),
    audit: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """``allowed: true``; ``patchType``+``patch`` only when there are operations (never an empty patch)."""
    response: dict[str, Any] = {"uid": review.uid, "allowed": True}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = encode_patch(patch)
    if warnings or audit:  # an empty tuple (the usual case) skips the copy
        _extras(response, warnings, audit)
    return _envelope(review, response)


def deny(
    review: Review,
    message: str,
    *,
    warnings: Iterable[str] = (),
    audit: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """``allowed: false`` with a 403 Forbidden status, so ``kubectl`` exits non-zero and
    ``errors.IsForbidden`` holds (gatekeeper#1693 learned that ``reason`` must be ``Forbidden``)."""
    response: dict[str, Any] = {
        "uid": review.uid,
        "allowed": False,
        "status": {"code": 403, "reason": "Forbidden", "message": message},
    }
    _extras(response, warnings, audit)
    return _envelope(review, response)


def _extras(response: dict[str, Any], warnings: Iterable[str], audit: Mapping[str, str] | None) -> None:
    warnings = list(warnings)
    if warnings:
        response["warnings"] = warnings
    if audit:
        response["auditAnnotations"] = dict(audit)


def error_body(status: int, reason: str, message: str) -> dict[str, Any]:
    """The JSON body of every non-200 answer: enough for a human with curl, nothing from the request."""
    return {"code": status, "error": reason, "message": message}

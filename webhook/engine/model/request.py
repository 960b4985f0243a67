"""What the engine is asked about: one object, the request it arrived in, and what the edges know.

A value, built by the edge (the admission server from an AdmissionReview, ``check`` from a manifest,
``audit`` from a stored object, ``policy test`` from a case) and read by the engine's entries; the
engine never changes it. Which question is asked of it (the patch, the verdict, the report) is the
entry the edge calls, not a field here.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date
from enum import StrEnum
from typing import Any, NamedTuple

from webhook.engine.model.cluster import EMPTY_CLUSTER, Cluster
from webhook.engine.model.grants import GrantKeys
from webhook.engine.model.requester import Requester


class Stage(StrEnum):
    """Where the object is on its way into the cluster: a fact of the request, not a mode.

    ``manifest``: not yet admitted (``check``, ``policy test``, ``/mutate``): a CREATE of a kind the
    webhook mutates is judged as it will be after our mutation.
    ``stored``: what the apiserver is about to store, after every mutating webhook ran (``/validate``):
    judged as it is. Re-applying our mutation there would be a no-op when our webhook ran, and would
    judge an object that will never exist when it did not (its failurePolicy is Ignore) or when a later
    webhook changed what we set. An UPDATE of a mutated kind is judged as stored at either stage
    (nothing re-mutates it); controllers are judged as their pods will be after mutation at both."""

    MANIFEST = "manifest"
    STORED = "stored"


class Request(NamedTuple):
    """One object to decide (immutable: a named tuple, built for every review at the cost of a tuple).

    ``namespace`` defaults to the object's own, then ``default``. ``namespace_labels`` are the
    namespace's labels; when unknown (offline) the apiserver's automatic ``kubernetes.io/metadata.name``
    label is assumed so name-based selectors still work. ``old_object`` (UPDATE): the object before the
    update; what was already true of it is not the update's doing. ``cluster``: what the edges know of
    other objects (claim templates, device classes, nodes, unknown namespaces). ``deadline`` (a
    ``time.monotonic()`` value): past it the engine raises ``DeadlineExceeded`` between steps.
    ``requester`` (the review's userInfo, ``check --as``), ``today`` (the UTC date) and ``grant_keys``
    (the webhook's HMAC keys) decide which policy exceptions hold: without a date none applies, without
    keys no grant is written or honoured."""

    obj: dict[str, Any]
    operation: str = "CREATE"
    namespace: str | None = None
    namespace_labels: Mapping[str, str] | None = None
    old_object: dict[str, Any] | None = None
    stage: Stage = Stage.MANIFEST
    cluster: Cluster = EMPTY_CLUSTER
    deadline: float | None = None
    requester: Requester | None = None
    today: date | None = None
    grant_keys: GrantKeys | None = None

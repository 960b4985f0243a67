"""Exception grants: the token the webhook writes on pod templates and verifies on what controllers create.

A grant is ``v2.<payload>.<signature>``: the payload (JSON, base64url) names the exception, the subject it
was issued to, the namespace, the granted object's API group, kind and name, a digest of the pod
template (:func:`template_digest`: binds the granted object's own template) and a digest of what its pods
run (:func:`webhook.engine.model.pod_content.grant_content`: binds the pods and the objects between);
``v1`` grants (before the content digest) still verify and carry no content digest. The signature is
HMAC-SHA256 under a key only the webhook holds (``GrantKeys``, passed in as data). Why and where they are
honoured: :mod:`webhook.engine.model.exceptions`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from webhook.policy.compiled import Policy

GRANT_VERSION = "v2"
LEGACY_VERSION = "v1"
"""Grants issued before they carried the pods' content digest: read, honoured where a controller creates
an object from the granted template (as before), never re-issued as they are."""
GRANT_NAME = "exception-grant"
"""The annotation (under ``settings.prefix``) that carries grants on pod templates and pods."""

CONTROLLER_LABELS = frozenset(
    {
        "pod-template-hash",  # the deployment controller adds it to a ReplicaSet's template
        "controller-uid",  # the Job strategy adds these at the Job's CREATE, after /mutate ran
        "batch.kubernetes.io/controller-uid",
        "job-name",
        "batch.kubernetes.io/job-name",
    }
)
"""Template labels the apiserver or a controller adds on the way: left out of the digest, which must be
the same at the object's ``/mutate``, its ``/validate`` and its child's ``/validate``."""

_CHILD_SUFFIX = re.compile(r"^[a-z0-9]+$")
MAX_TOKENS = 16
MAX_TOKEN_BYTES = 8192  # a v2 grant names the template's containers (up to 63 characters each)
"""Bounds on what one annotation may make the webhook verify: a tenant can write any value there, and each
token costs a base64 decode, a JSON parse and an HMAC."""



@dataclass(frozen=True, slots=True)
class GrantKeys:
    """HMAC keys: the first signs new grants, every one verifies (so a key can be rotated in)."""

    keys: tuple[bytes, ...]

    def __post_init__(self) -> None:
        if not self.keys or any(len(k) < 16 for k in self.keys):
            raise ValueError("grant keys must be at least 16 bytes each")

    def sign(self, payload: bytes) -> str:
        return _b64(hmac.new(self.keys[0], payload, hashlib.sha256).digest())

    def verify(self, payload: bytes, signature: str) -> bool:
        return any(hmac.compare_digest(self.sign_with(k, payload), signature) for k in self.keys)

    @staticmethod
    def sign_with(key: bytes, payload: bytes) -> str:
        return _b64(hmac.new(key, payload, hashlib.sha256).digest())


@dataclass(frozen=True, slots=True)
class Grant:
    """One verified grant token: exception ``exception`` issued to ``by`` for object ``kind``/``name``."""

    exception: str
    by: str
    namespace: str
    group: str  # the API group of the granted object's apiVersion ("" for the core group)
    kind: str
    name: str
    digest: str
    content: str = ""  # what the pods run (content_digest); "" for a v1 grant


CREATES: dict[tuple[str, str], frozenset[tuple[str, str]]] = {
    ("apps", "Deployment"): frozenset({("apps", "ReplicaSet")}),
    ("batch", "CronJob"): frozenset({("batch", "Job")}),
    ("batch.volcano.sh", "CronJob"): frozenset({("batch.volcano.sh", "Job")}),
    ("jobset.x-k8s.io", "JobSet"): frozenset({("batch", "Job")}),
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): frozenset({("apps", "StatefulSet")}),
    ("ray.io", "RayJob"): frozenset({("ray.io", "RayCluster"), ("batch", "Job")}),
    ("ray.io", "RayService"): frozenset({("ray.io", "RayCluster")}),
    ("kubeflow.org", "MPIJob"): frozenset({("", "Pod"), ("batch", "Job")}),  # workers, and the launcher's Job
    ("trainer.kubeflow.org", "TrainJob"): frozenset({("jobset.x-k8s.io", "JobSet")}),
}
"""What each controller creates from its pod templates, as (API group, kind); a kind not listed (a Job, a
StatefulSet, a DaemonSet, a ReplicaSet, the operator kinds of the kind table) creates its pods itself. A
grant travels only along these edges: a pod owned by a ConfigMap, or by the granted Deployment itself,
was not created the way the grant's object creates pods."""
POD = ("", "Pod")


COPIED_VERBATIM = frozenset(
    {("apps", "Deployment"), ("apps", "StatefulSet"), ("apps", "DaemonSet"), ("apps", "ReplicaSet"),
     ("batch", "Job"), ("batch", "CronJob")}
)  # fmt: skip
"""Kinds whose controllers (kube-controller-manager's) copy the pod template into what they create as it is:
their grants bind the containers' commands too (an operator's controller may rewrite those)."""


def creates(group: str, kind: str) -> frozenset[tuple[str, str]]:
    return CREATES.get((group, kind), frozenset({POD}))


def depth(group: str, kind: str) -> int:
    """How many controllers stand above an object of this kind at most (a CronJob 0, its Job 1, a pod 2 or
    more): whoever reads objects to check who owns them reads the owners first in this order."""
    if (group, kind) == POD:
        return 1 + max((depth(*parent) for parent in CREATES), default=0)
    parents = [parent for parent, made in CREATES.items() if (group, kind) in made]
    return 1 + max(depth(*parent) for parent in parents) if parents else 0


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def template_digest(template: Mapping[str, Any], annotation: str) -> str:
    """The template's content without the grant itself and the labels controllers add on the way."""
    metadata = template.get("metadata")
    meta = dict(metadata) if isinstance(metadata, dict) else {}
    meta.pop("creationTimestamp", None)
    for section, drop in (("annotations", {annotation}), ("labels", CONTROLLER_LABELS)):
        values = meta.get(section)
        if isinstance(values, dict):
            kept = {k: v for k, v in values.items() if k not in drop}
            if kept:
                meta[section] = kept
            else:
                meta.pop(section)
    body = {k: v for k, v in template.items() if k != "metadata"}
    if meta:
        body["metadata"] = meta
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()[:32]


def issue(keys: GrantKeys, grant: Grant) -> str:
    fields = [grant.exception, grant.by, grant.namespace, grant.group, grant.kind, grant.name, grant.digest]
    version = GRANT_VERSION if grant.content else LEGACY_VERSION  # a carried v1 grant is kept as it was
    payload = orjson.dumps([version, *fields, *([grant.content] if grant.content else [])])
    return f"{version}.{_b64(payload)}.{keys.sign(payload)}"


def read_grants(keys: GrantKeys, value: object) -> tuple[list[Grant], int]:
    """The grants of one annotation value whose signature verifies, and how many tokens did not."""
    if value is None:
        return [], 0
    if not isinstance(value, str):
        return [], 1
    good: list[Grant] = []
    bad = 0
    tokens = value.split(None, MAX_TOKENS)
    if len(tokens) > MAX_TOKENS:  # more than any policy issues at once: the rest is not even read
        bad += 1
        tokens = tokens[:MAX_TOKENS]
    for token in tokens:
        if len(token) > MAX_TOKEN_BYTES:
            bad += 1
            continue
        version, _, rest = token.partition(".")
        payload_text, _, signature = rest.partition(".")
        try:
            payload = _unb64(payload_text)
            fields = orjson.loads(payload)
        except (ValueError, orjson.JSONDecodeError):
            bad += 1
            continue
        size = {GRANT_VERSION: 9, LEGACY_VERSION: 8}.get(version)
        if (
            size is None
            or not keys.verify(payload, signature)
            or not isinstance(fields, list)
            or len(fields) != size
            or fields[0] != version
            or not all(isinstance(f, str) for f in fields)
        ):
            bad += 1
            continue
        good.append(Grant(*fields[1:]))
    return good, bad


def api_group(api_version: str) -> str:
    """``apps/v1`` -> ``apps``; ``v1`` -> ``""``."""
    return api_version.rpartition("/")[0]


def controlling_owner(meta: Mapping[str, Any]) -> tuple[str, str, str, str] | None:
    """(API group, kind, name, uid) of the one ``controller: true`` owner reference (None: none, or several)."""
    refs = meta.get("ownerReferences")
    if not isinstance(refs, list):
        return None
    owners = [r for r in refs if isinstance(r, dict) and r.get("controller") is True]
    if len(owners) != 1:
        return None
    kind, name, api, uid = (owners[0].get(k) for k in ("kind", "name", "apiVersion", "uid"))
    if not isinstance(name, str) or not isinstance(kind, str) or not isinstance(api, str):
        return None
    return api_group(api), kind, name, uid if isinstance(uid, str) else ""


def owner_matches(meta: Mapping[str, Any], grant: Grant, made: tuple[str, str]) -> bool:
    """The object (``made``: its API group and kind) was created the way the granted object's controller
    creates what it creates: :func:`owner_problem` finds nothing wrong."""
    return owner_problem(meta, grant, made) is None


def owner_problem(meta: Mapping[str, Any], grant: Grant, made: tuple[str, str]) -> str | None:
    """Why the object (``made``: its API group and kind) was not created the way the granted object's
    controller creates what it creates, or None: its controlling owner must be the granted object, of a kind
    that creates ``made`` (a Deployment's ReplicaSet, a Job's pods); or, for a pod, a child of a kind the
    granted kind creates, named ``<name>-<suffix>`` as controllers name them, whose kind creates pods (the
    pods of a Deployment's ReplicaSet, of a CronJob's Job). A Volcano Job is not a batch Job: the group
    counts."""
    owner = controlling_owner(meta)
    granted = f"{grant.kind}/{grant.name}"
    if owner is None:
        return "it has no controlling owner (or several)"
    group, kind, name, _ = owner
    children = creates(grant.group, grant.kind)
    if (group, kind) == (grant.group, grant.kind):
        if name != grant.name:
            return f"its owner {kind}/{name} is not {granted}"
        if made not in children:
            return f"{grant.kind} does not create {made[1]}s itself; its owner {kind}/{name} cannot have created it"
        return None
    prefix = grant.name + "-"
    if made != POD or (group, kind) not in children or POD not in creates(group, kind):
        return f"its owner {kind}/{name} is not of a kind {granted} creates"
    if not (name.startswith(prefix) and _CHILD_SUFFIX.match(name[len(prefix) :])):
        return f"its owner {kind}/{name} is not named as {granted}'s controller names what it creates"
    return None


def grant_annotation(policy: Policy) -> str:
    return f"{policy.settings.prefix}/{GRANT_NAME}"

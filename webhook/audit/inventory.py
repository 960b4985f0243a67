"""Where the audited objects come from: a live cluster or a snapshot, behind one small interface.

Both give the cluster's own context objects first (Namespaces for entitlement labels, Nodes,
DeviceClasses, claim templates and claims: what ``check --cluster-objects`` builds, the same
:class:`~webhook.check.context.ClusterObjects`), then every object to judge, one at a time. Pods
come last, so the controllers that own them (a ReplicaSet and its Deployment) have been seen.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import orjson
import yaml

from webhook.audit import snapshot
from webhook.audit.kube import Discovery, Kube, KubeError, Resource
from webhook.audit.owners import Key, Owned, facts
from webhook.check.context import CONTEXT_KINDS, ClusterObjects
from webhook.engine.model.grants import GRANT_NAME, depth
from webhook.policy.compiled import Policy

DRA_GROUP = "resource.k8s.io"
CONTEXT_RESOURCES: tuple[tuple[str, str], ...] = (
    ("", "Namespace"),
    ("", "Node"),
    (DRA_GROUP, "DeviceClass"),
    (DRA_GROUP, "ResourceClaimTemplate"),
    (DRA_GROUP, "ResourceClaim"),
    ("resource.nvidia.com", "ComputeDomain"),  # stands for the channel claim template its driver creates
)


_NAMESPACE = re.compile(r"""^  namespace:[ \t]*['"]?([^'"\s#]+)""", re.M)  # metadata.namespace of an item


class Inventory(Protocol):
    notes: list[str]

    def context(self, default_namespace: str) -> ClusterObjects: ...

    def objects(self, screen: Callable[[str], bool] | None = None) -> Iterator[dict[str, Any] | None]:
        """Objects to judge; ``None`` stands for one the screen left unparsed (not GPU-relevant)."""
        ...

    def units(self, screen: Callable[[str], bool] | None = None) -> Iterator[Any]:
        """:meth:`objects` for a process pool: an object, an unparsed snapshot item, or ``None``."""
        ...


def slim_node(node: dict[str, Any]) -> dict[str, Any]:
    """What the engine reads of a Node (labels, taints, allocatable): a Node with its image list and
    conditions is ~20 KB, and a large cluster's nodes are kept for the whole run."""
    meta = node.get("metadata") if isinstance(node.get("metadata"), dict) else {}
    spec = node.get("spec") if isinstance(node.get("spec"), dict) else {}
    status = node.get("status") if isinstance(node.get("status"), dict) else {}
    return {
        "apiVersion": node.get("apiVersion", "v1"),
        "kind": "Node",
        "metadata": {k: meta[k] for k in ("name", "labels") if k in meta},
        "spec": {k: spec[k] for k in ("taints", "unschedulable") if k in spec},
        "status": {k: status[k] for k in ("allocatable", "capacity") if k in status},
    }


def _add(found: ClusterObjects, obj: Any) -> str | None:
    if isinstance(obj, dict) and obj.get("kind") == "Node":
        obj = slim_node(obj)
    return found.add(obj)


class SnapshotInventory:
    """``--snapshot FILE|DIR…``: read twice, context objects first (a text test skips the rest)."""

    def __init__(self, paths: list[str], namespace: str | None) -> None:
        self.paths = paths
        self.namespace = namespace
        self.notes: list[str] = []
        self.listing = ""  # the file being read now, for the progress line
        self.grant_carriers: list[tuple[Key, Owned]] = []  # objects other than pods that carry a grant

    def context(self, default_namespace: str) -> ClusterObjects:
        """The context objects; and, read in the same pass, every object but a pod whose text names the grant
        annotation (a snapshot may list pods before their owners: the audit needs the owners first)."""
        found = ClusterObjects(default_namespace, complete=True)
        for item, obj in snapshot.objects(self.paths, keep=_context_or_grant, as_written=True):
            if GRANT_NAME in item.text and isinstance(obj, dict) and obj.get("kind") != "Pod":
                carrier = facts(obj)
                if carrier is not None and in_namespace(obj, self.namespace):
                    self.grant_carriers.append(carrier)
                if not snapshot.may_be_context(item.text):
                    continue
            problem = _add(found, obj)
            if problem:
                raise snapshot.SnapshotError(f"{item.file}:{item.line}: {problem}")
        return found

    def objects(self, screen: Callable[[str], bool] | None = None) -> Iterator[dict[str, Any] | None]:
        """Every object; ``None`` for an item ``screen`` says cannot be GPU-relevant (left unparsed)."""
        for item, obj in snapshot.objects(self.paths, keep=screen, placeholders=True, strip=True):
            self.listing = item.file
            if obj is None:
                if is_context_item(item.text):
                    continue  # read by the context pass; not a workload "without GPUs or intent"
                if not self.namespace or _NAMESPACE.search(item.text) is None or (
                    _NAMESPACE.search(item.text).group(1) == self.namespace  # type: ignore[union-attr]
                ):
                    yield None
                continue
            if in_namespace(obj, self.namespace):
                yield obj

    def units(self, screen: Callable[[str], bool] | None = None) -> Iterator[snapshot.Item | None]:
        """:meth:`objects` for a process pool: each item to judge *unparsed* (a worker parses it with
        :func:`parse_unit`, which also applies ``--namespace``), ``None`` as in :meth:`objects`."""
        for item, kept in snapshot.objects_unparsed(self.paths, screen):
            self.listing = item.file
            if not kept:
                if self.unjudged(item) is None:
                    yield None
                continue
            yield snapshot.Item(item.file, item.line, item.text)  # dedented once: only the text travels

    def unscreened(self) -> Iterator[snapshot.Item]:
        """Every item as split, not yet screened nor dedented: a pool worker screens it
        (:func:`screen_item`), so that this process, which every item passes through, only splits the
        file. The screen is most of the reading's cost (a stored pod's text searched for every marker
        and its tolerations read): done here it kept two workers waiting for this process."""
        for item, _ in snapshot.objects_unparsed(self.paths, None):
            self.listing = item.file
            yield item

    def unjudged(self, item: snapshot.Item) -> str | None:
        """For an item the screen left unparsed: None when it counts as an object "without GPUs or
        intent"; else why it does not count (a context object, or outside ``--namespace``)."""
        return unjudged(item, self.namespace)


SCREENED_OUT = "screened out"
"""What :func:`screen_item` returns for an item without GPUs or intent (counted, not judged)."""


def unjudged(item: snapshot.Item, namespace: str | None) -> str | None:
    """:meth:`SnapshotInventory.unjudged` (a module function, for a pool worker)."""
    if is_context_item(item.text):
        return "context"  # read by the context pass; not a workload "without GPUs or intent"
    found = _NAMESPACE.search(item.text) if namespace else None
    if found is None or found.group(1) == namespace:
        return None
    return "namespace"


def screen_item(
    item: snapshot.Item, screen: Callable[[str], bool], namespace: str | None
) -> snapshot.Item | str | None:
    """In a pool worker, what :meth:`SnapshotInventory.units` decides for one item of
    :meth:`~SnapshotInventory.unscreened`: the item, to parse and judge; :data:`SCREENED_OUT`, counted
    as without GPUs or intent; or None, not counted (a context object, or outside ``--namespace``)."""
    if snapshot.kept(item, screen):
        return item
    return SCREENED_OUT if unjudged(item, namespace) is None else None


def _context_or_grant(text: str) -> bool:
    return snapshot.may_be_context(text) or GRANT_NAME in text


def _json(obj: dict[str, Any]) -> bytes | None:
    """``obj`` as orjson writes it, or None where it cannot (deeper than its 255 levels, an integer
    past 64 bits)."""
    try:
        return orjson.dumps(obj)
    except orjson.JSONEncodeError:
        return None


# a snapshot item's own kind, at column 0 of the (dedented) item: kubectl writes block style
_CONTEXT_KIND = re.compile(
    r"^kind:[ \t]*[\"']?(?:Namespace|Node|DeviceClass|ResourceSlice|ComputeDomain|ResourceClaimTemplate|"
    r"ResourceClaim)[\"']?[ \t]*(?:#.*)?$",
    re.M,
)


_CONTEXT_WORD = re.compile(
    r"\bkind:[ \t]*[\"']?(?:Namespace|Node|DeviceClass|ResourceSlice|ComputeDomain|ResourceClaim)"
)


_KIND_WORDS = ("Namespace", "Node", "DeviceClass", "ResourceSlice", "ComputeDomain", "ResourceClaim")


def is_context_item(text: str) -> bool:
    """Whether an unparsed snapshot item is a cluster-context object (a Namespace, a Node, a DRA object):
    the context pass read it; the judging pass must neither judge nor count it as a workload."""
    if not any(word in text for word in _KIND_WORDS):  # what both patterns need: 5x faster than ^ in MULTILINE
        return False
    if _CONTEXT_KIND.search(text) is not None:
        return True
    if text.lstrip().startswith("{") and _CONTEXT_WORD.search(text):  # a flow-style item: parse it to be sure
        try:
            obj = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        except yaml.YAMLError:
            return False
        return isinstance(obj, dict) and obj.get("kind") in CONTEXT_KINDS
    return False


def in_namespace(obj: dict[str, Any], namespace: str | None) -> bool:
    """Whether ``--namespace`` keeps a parsed object (a cluster-scoped one is always kept)."""
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    return not namespace or meta.get("namespace") in (None, namespace)


def parse_unit(item: snapshot.Item | bytes, namespace: str | None) -> Iterator[dict[str, Any]]:
    """The objects of a unit of :meth:`SnapshotInventory.units` or :meth:`ClusterInventory.units`, as
    their ``objects`` would have yielded them (the judging pass's parse, then ``--namespace``; the API
    lists the namespace's objects only)."""
    if isinstance(item, bytes):
        yield orjson.loads(item)
        return
    for _, obj in snapshot.parse_item(item, item.file, strip=True):
        if in_namespace(obj, namespace):
            yield obj


class ClusterInventory:
    """A live cluster through the API: discovery first, then one paginated list per served kind."""

    def __init__(self, kube: Kube, policy: Policy, namespace: str | None) -> None:
        self.kube = kube
        self.discovery = Discovery(kube)
        self.policy = policy
        self.namespace = namespace
        self.notes: list[str] = []
        self.listing = ""  # the list being read now, for the progress line

    def context(self, default_namespace: str) -> ClusterObjects:
        found = ClusterObjects(default_namespace, complete=True)
        for group, kind in CONTEXT_RESOURCES:
            resource = self.discovery.find_any_version(group, kind)
            if resource is None:
                if group != "resource.nvidia.com":
                    self.notes.append(f"{group or 'core'} {kind}: not served by this cluster, not read")
                continue
            for obj in self._list(resource):
                _add(found, obj)
        return found

    def workload_resources(self) -> list[Resource]:
        """The kind table's kinds the cluster serves, owners before what they create (a CronJob before its
        Jobs, Pods last: the audit checks a carried grant's owner chain as it reads); each unserved one gets
        a note."""
        out: list[Resource] = []
        for api_version, kind in self.policy.kinds:
            resource = self.discovery.find(api_version, kind)
            if resource is None:
                self.notes.append(f"{api_version} {kind}: not served by this cluster, skipped")
                continue
            out.append(resource)
        out.sort(key=lambda r: (r.kind == "Pod" and r.group == "", depth(r.group, r.kind)))
        return out

    def objects(self, screen: Callable[[str], bool] | None = None) -> Iterator[dict[str, Any] | None]:
        """Every listed object; ``None`` for one ``screen`` says cannot be GPU-relevant, read in the
        JSON :meth:`units` sends (a few microseconds: judging a stored CPU-only pod costs more)."""
        for obj in self._listed():
            text = None if screen is None else _json(obj)
            yield obj if text is None or screen is None or screen(text.decode("utf-8")) else None

    def units(self, screen: Callable[[str], bool] | None = None) -> Iterator[bytes | dict[str, Any] | None]:
        """:meth:`objects` for a process pool: each object as its JSON (a worker loads it with
        :func:`parse_unit`), ``None`` for one the screen says cannot be GPU-relevant.

        Sending the decoded objects made two workers slower than one: pickling a stored pod there and
        back cost more than judging it, and four in five pods are judged only to say they hold no GPU.
        orjson writes an object in a few microseconds, the screen reads that text as it reads a
        snapshot's item (every marker is a plain word, spelled in JSON as in the object), and what a
        worker loads is the object itself: the pages were read with orjson, whose values it writes and
        reads back unchanged. An object orjson cannot write (nested over 255 levels, as a custom
        resource's free-form field allows, or an integer past 64 bits on a page too deep for orjson,
        which Python's json read) comes as itself, unscreened, and is judged in this process."""
        for obj in self._listed():
            text = _json(obj)
            if text is None:
                yield obj
            else:
                yield text if screen is None or screen(text.decode("utf-8")) else None

    def _listed(self) -> Iterator[dict[str, Any]]:
        for resource in self.workload_resources():
            yield from self._list(resource)

    def _list(self, resource: Resource) -> Iterator[dict[str, Any]]:
        name = f"{resource.plural}.{resource.group}" if resource.group else resource.plural
        self.listing = name
        namespace = self.namespace if resource.namespaced and resource.kind != "Namespace" else None
        read = 0
        for page in self.kube.pages(resource, namespace):
            read += len(page)
            left = self.kube.remaining
            self.listing = f"{name} ({read:,} read, ~{left:,} to go)" if left else name
            yield from page


__all__ = ["ClusterInventory", "Inventory", "KubeError", "SnapshotInventory", "slim_node"]

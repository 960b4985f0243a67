"""What the webhook would look up in the cluster, gathered from files for ``check``.

The server learns namespaces, nodes, claim templates and device classes from the apiserver; ``check``
has no cluster, so it reads the same objects from its inputs (a repository's ``namespace.yaml`` next to
its jobs) and from ``--context`` files (``kubectl get ns,nodes,resourceclaimtemplates,deviceclasses -A
-o yaml``), and hands the engine one :class:`~webhook.engine.model.cluster.Cluster` view.

Where several sources name the same namespace, the more authoritative one wins, whole (labels are
not merged key by key: a namespace's labels are one object's labels):
``--namespaces`` FILE > ``--context`` files (later files win) > the inputs themselves. A cluster dump
is what the cluster holds; a manifest's Namespace is what a pull request would like it to hold, and the
labels that grant entitlements are guarded in the cluster, so they never override it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from webhook import yamlpos
from webhook.check.inputs import ReadError, Source
from webhook.engine.model.claims import cluster_entry
from webhook.engine.model.cluster import Cluster

# kind -> the Cluster field it fills; "*List" forms hold items of that kind
CONTEXT_KINDS = {
    "Namespace": "namespaces",
    "Node": "nodes",
    "ResourceClaimTemplate": "claim_templates",
    "ResourceClaim": "claims",
    "DeviceClass": "device_classes",
    "ResourceSlice": "resource_slices",
}
_MENTION = re.compile(
    r"""\bkind["']?[ \t]*:[ \t]*["']?"""
    r"""(?:Namespace|Node|ResourceClaimTemplate|ResourceClaim|DeviceClass|ResourceSlice|ComputeDomain)"""
    r"""(?:List)?["']?[ \t]*(?:[,}\r\n#]|$)"""
)


_MENTION_BYTES = re.compile(_MENTION.pattern.encode())
_CLAIMANT = re.compile(r"\bresourceClaimTemplateName\b")
"""A workload naming a claim template: read in the first pass too, to know which gangs claim a
ComputeDomain's channel (two gangs must not share one)."""
_CLAIMANT_BYTES = re.compile(_CLAIMANT.pattern.encode())
_WORDS = (b"Namespace", b"Node", b"ResourceClaim", b"DeviceClass", b"ResourceSlice", b"ComputeDomain", b"resourceClaim")
"""What either pattern must contain, looked for first: a substring search is five times faster than the
patterns' word boundaries, and a stream of workloads names none of them."""


def source_mentions_context(source: Source) -> bool:
    """Whether any document of ``source`` may be a context object: a block scan, no parsing.

    Most inputs hold none; this keeps the first pass over them at the speed of reading the file.
    """
    stream = source.spool
    if stream is None:
        if source.path is None:
            return True
        try:
            stream = source.path.open("rb")
        except OSError:
            return False  # the judging pass reports it
    else:
        stream.seek(0)
    tail = b""
    try:
        while block := stream.read(1 << 20):
            window = tail + block
            if any(word in window for word in _WORDS) and (
                _MENTION_BYTES.search(window) or _CLAIMANT_BYTES.search(window)
            ):
                return True
            tail = block[-80:]
        return bool(_MENTION_BYTES.search(tail) or _CLAIMANT_BYTES.search(tail))
    finally:
        if stream is not source.spool:
            stream.close()


def mentions_context(text: str) -> bool:
    """A cheap pre-filter: only documents that name a context kind (or a claim template) are parsed by
    the first pass."""
    return _MENTION.search(text) is not None or _CLAIMANT.search(text) is not None


class ContextError(ValueError):
    """A ``--context`` file that cannot be used: file:line:col and what is wrong."""


@dataclass(slots=True)
class ClusterObjects:
    """Context objects as they are found; :meth:`cluster` freezes them into the engine's view."""

    default_namespace: str = "default"
    namespaces: dict[str, dict[str, str]] = field(default_factory=dict)
    nodes: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    claim_templates: dict[tuple[str, str], Mapping[str, Any]] = field(default_factory=dict)
    claims: dict[tuple[str, str], Mapping[str, Any]] = field(default_factory=dict)
    device_classes: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    resource_slices: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    compute_domains: dict[tuple[str, str], Mapping[str, Any]] = field(default_factory=dict)
    claimants: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    """(namespace, claim template) -> the workloads (``Kind/name``) of the inputs naming it."""
    complete: bool = False  # the claim maps are the cluster's (--context given): absent means missing

    def add(self, obj: Any, kind: str | None = None) -> str | None:
        """Take ``obj`` if it is a context object (or a List of them); None, or why it cannot be used."""
        if not isinstance(obj, dict):
            return None
        kind = obj.get("kind") if isinstance(obj.get("kind"), str) else kind
        if kind is None:
            return None
        if kind == "List" or (kind.endswith("List") and kind[:-4] in CONTEXT_KINDS):
            items = obj.get("items")
            if not isinstance(items, list):
                return None
            item_kind = kind[:-4] if kind != "List" else None
            for item in items:
                problem = self.add(item, item_kind)
                if problem:
                    return problem
            return None
        if kind == "ComputeDomain":  # itself, and the channel template its controller creates
            entry = cluster_entry(obj, self.default_namespace)
            if entry is not None:
                self.claim_templates[entry[1]] = entry[2]
                self.compute_domains[(entry[1][0], str(obj["metadata"]["name"]))] = obj
            return None
        target = CONTEXT_KINDS.get(kind)
        if target is None:
            self._claimant(obj, kind)
            return None
        meta = obj.get("metadata")
        name = meta.get("name") if isinstance(meta, dict) else None
        if not isinstance(name, str) or not name:
            return f"a {kind} without metadata.name"
        if target == "namespaces":
            labels = meta.get("labels") or {}
            if not isinstance(labels, dict):
                return f"Namespace {name}: metadata.labels is not a map"
            self.namespaces[name] = {str(k): str(v) for k, v in labels.items()}
        elif target == "nodes":
            self.nodes[name] = obj
        elif target == "device_classes":
            self.device_classes[name] = obj
        elif target == "resource_slices":
            self.resource_slices[name] = obj
        else:
            ns = meta.get("namespace") if isinstance(meta.get("namespace"), str) else self.default_namespace
            getattr(self, target)[(ns, name)] = obj
        return None

    def _claimant(self, obj: dict[str, Any], kind: str) -> None:
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        name = meta.get("name") or meta.get("generateName")
        if not isinstance(name, str) or not name:
            return
        ns = meta.get("namespace") if isinstance(meta.get("namespace"), str) else self.default_namespace
        stack: list[Any] = [obj.get("spec")]
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                template = node.get("resourceClaimTemplateName")
                if isinstance(template, str) and template:
                    self.claimants.setdefault((ns, template), set()).add(f"{kind}/{name}")
                stack.extend(v for v in node.values() if isinstance(v, dict | list))
            elif isinstance(node, list):
                stack.extend(v for v in node if isinstance(v, dict | list))

    def domain_users(self) -> dict[tuple[str, str], frozenset[str]]:
        """(namespace, ComputeDomain) -> the workloads of the inputs that claim its channel."""
        out = {}
        for (ns, domain), obj in self.compute_domains.items():
            spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
            channel = ((spec.get("channel") or {}).get("resourceClaimTemplate") or {}).get("name")
            users = self.claimants.get((ns, channel)) if isinstance(channel, str) else None
            if users:
                out[(ns, domain)] = frozenset(users)
        return out

    def update(self, other: ClusterObjects) -> None:
        """``other`` is more authoritative: its entries replace ours of the same key."""
        self.namespaces.update(other.namespaces)
        self.nodes.update(other.nodes)
        self.claim_templates.update(other.claim_templates)
        self.claims.update(other.claims)
        self.device_classes.update(other.device_classes)
        self.resource_slices.update(other.resource_slices)
        self.compute_domains.update(other.compute_domains)
        for key, users in other.claimants.items():
            self.claimants.setdefault(key, set()).update(users)

    def counts(self) -> dict[str, int]:
        return {
            "namespaces": len(self.namespaces),
            "nodes": len(self.nodes),
            "claimTemplates": len(self.claim_templates),
            "claims": len(self.claims),
            "deviceClasses": len(self.device_classes),
            "resourceSlices": len(self.resource_slices),
            "computeDomains": len(self.compute_domains),
        }

    def cluster(self) -> Cluster:
        return Cluster(
            namespaces=MappingProxyType({k: MappingProxyType(v) for k, v in self.namespaces.items()}),
            nodes=tuple(self.nodes.values()),
            claim_templates=MappingProxyType(dict(self.claim_templates)),
            claims=MappingProxyType(dict(self.claims)),
            device_classes=MappingProxyType(dict(self.device_classes)),
            resource_slices=MappingProxyType(dict(self.resource_slices)),
            compute_domains=MappingProxyType(dict(self.compute_domains)),
            domain_users=MappingProxyType(self.domain_users()),
            complete=self.complete,
        )


def documents(source: Source, *, prefilter: bool) -> Iterator[yamlpos.Document | yamlpos.SyntaxProblem]:
    """The documents of ``source``; with ``prefilter``, only those that name a context kind."""
    chunks: Iterable[tuple[int, str]] = yamlpos.iter_block_chunks(source.blocks())
    if prefilter:
        chunks = ((line, text) for line, text in chunks if mentions_context(text))
    return yamlpos.iter_chunk_documents(chunks, with_nodes=False)


def from_inputs(sources: Iterable[Source], default_namespace: str) -> ClusterObjects:
    """Context objects among the manifests. Problems are left to the judging pass, which reports them."""
    found = ClusterObjects(default_namespace)
    for source in sources:
        if source.error or source.empty or source.note or not source_mentions_context(source):
            continue
        try:
            for doc in documents(source, prefilter=True):
                if isinstance(doc, yamlpos.Document):
                    found.add(doc.data)
        except ReadError:
            continue
    return found


def from_files(sources: Iterable[Source], default_namespace: str) -> ClusterObjects:
    """``--context`` files: every problem is an error (``file:line:col``), since they are the cluster."""
    found = ClusterObjects(default_namespace)
    for source in sources:
        if source.error:
            raise ContextError(f"{source.name}: {source.error}")
        if source.empty:
            raise ContextError(f"{source.name}: {source.empty}")
        if source.note:  # kustomize configuration, a Helm chart: not cluster objects
            continue
        try:
            for doc in documents(source, prefilter=False):
                if isinstance(doc, yamlpos.SyntaxProblem):
                    raise ContextError(f"{source.name}:{doc.line}:{doc.column}: YAML syntax error: {doc.problem}")
                problem = found.add(doc.data)
                if problem:
                    raise ContextError(f"{source.name}:{doc.line}: {problem}")
        except ReadError as exc:
            raise ContextError(f"{source.name}:{exc.line}: {exc.message}") from None
    return found

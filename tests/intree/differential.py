"""The differential harness: the engine and the rendered in-tree policies judge the same stored objects.

Each object is stored as the apiserver would store it (``tests/intree/stored``) in two worlds:

* **webhook down**: the mutating webhook did not run; the in-tree policies see the object as the user
  wrote it, after the apiserver's defaulting and plugins;
* **engine up**: the mutating webhook's patch (the real engine's ``/mutate``) applied, then defaulted
  again, as the apiserver re-decodes a mutated object.

In both, the engine's validating view (``validate`` of a ``Stage.STORED`` request) and the emulated apiserver
(``tests/intree/apiserver``) judge the same object, namespace labels and request. The property, per
object: the in-tree policies deny nothing the engine admits (a false denial breaks the cluster while
the webhook is up); no in-tree expression errors (``failurePolicy: Fail`` would deny). Figures count
what was compared and where both deny.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import jsonpatch

from tests.intree.apiserver import DENY, InTree, Request
from tests.intree.stored import defaulted, stored
from webhook import engine
from webhook.engine.model.cluster import EMPTY_CLUSTER, Cluster
from webhook.policy.compiled import Policy

NAME_LABEL = "kubernetes.io/metadata.name"


@dataclass
class Figures:
    compared: int = 0
    engine_denied: int = 0
    in_tree_denied: int = 0
    both_denied: int = 0
    by_rule: Counter = field(default_factory=Counter)  # in-tree rule ids that denied
    disagreements: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def add(self, other: Figures) -> None:
        self.compared += other.compared
        self.engine_denied += other.engine_denied
        self.in_tree_denied += other.in_tree_denied
        self.both_denied += other.both_denied
        self.by_rule.update(other.by_rule)
        self.disagreements.extend(other.disagreements)
        self.errors.extend(other.errors)

    def summary(self) -> str:
        return (
            f"{self.compared} objects compared, engine denied {self.engine_denied}, in-tree denied "
            f"{self.in_tree_denied} (both {self.both_denied}), disagreements {len(self.disagreements)}, "
            f"expression errors {len(self.errors)}; in-tree denials by rule: {dict(sorted(self.by_rule.items()))}"
        )


def resources(policy: Policy) -> dict[tuple[str, str], tuple[str, str, str]]:
    """(apiVersion, kind) -> (group, version, resource) of every kind the policy knows."""
    out = {}
    for (api_version, kind_name), kind in policy.kinds.items():
        group, _, version = api_version.rpartition("/")
        out[(api_version, kind_name)] = (group, version, kind.spec.plural)
    return out


def _storable(obj: Any) -> bool:
    """What the apiserver would decode at all: metadata labels and annotations are string maps."""
    if not isinstance(obj, dict) or not isinstance(obj.get("metadata", {}), dict):
        return False
    stack = [obj]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            meta = node.get("metadata")
            if isinstance(meta, dict):
                for part in ("labels", "annotations"):
                    values = meta.get(part)
                    if values is not None and (
                        not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values())
                    ):
                        return False
            stack.extend(v for v in node.values() if isinstance(v, dict | list))
        elif isinstance(node, list):
            stack.extend(v for v in node if isinstance(v, dict | list))
    return True


class Differential:
    """One policy, its rendered in-tree policies, and the figures of everything compared so far."""

    def __init__(self, policy: Policy, objects: list[dict[str, Any]]) -> None:
        self.policy = policy
        self.in_tree = InTree(objects)
        self.kinds = resources(policy)
        self.figures = Figures()
        self._seen: set[str] = set()

    def _resource(self, obj: dict[str, Any]) -> tuple[str, str, str] | None:
        return self.kinds.get((obj.get("apiVersion"), obj.get("kind")))  # type: ignore[arg-type]

    def judge(
        self,
        obj: dict[str, Any],
        *,
        namespace: str,
        labels: dict[str, str],
        world: str,
        source: str,
        operation: str = "CREATE",
        old: dict[str, Any] | None = None,
        cluster: Cluster = EMPTY_CLUSTER,
        sub_resource: str = "",
    ) -> None:
        resource = self._resource(obj)
        if resource is None:
            return
        labels = {NAME_LABEL: namespace, **labels}
        key = json.dumps([obj, old, labels, operation, sub_resource, bool(cluster.nodes)], sort_keys=True, default=str)
        if key in self._seen:
            return
        self._seen.add(key)
        decision = engine.validate(
            self.policy,
            engine.Request(
                obj,
                operation=operation,
                namespace=namespace,
                namespace_labels=labels,
                old_object=old,
                stage=engine.Stage.STORED,
                cluster=cluster,
            ),
        )
        verdict = self.in_tree.review(Request(obj, old, operation, resource, namespace, labels, sub_resource))
        f = self.figures
        f.compared += 1
        engine_denies = not decision.allowed
        f.engine_denied += engine_denies
        in_tree_denies = verdict.decision == DENY
        f.in_tree_denied += in_tree_denies
        f.both_denied += engine_denies and in_tree_denies
        where = (
            f"{source} [{world}, {operation}, ns {namespace} {labels}] {obj.get('kind')}/"
            f"{(obj.get('metadata') or {}).get('name')}"
        )
        for message in verdict.messages:
            f.by_rule[message.split("]", 1)[0].lstrip("[")] += 1
        if verdict.errors:
            f.errors.append(f"{where}: {verdict.errors}")
        if in_tree_denies and not engine_denies:
            f.disagreements.append(
                f"{where}: in-tree denies {verdict.messages}; engine admits "
                f"{[(v.rule, v.action.value) for v in decision.violations]}\n{json.dumps(obj)}"
            )

    def create(
        self,
        obj: dict[str, Any],
        *,
        namespace: str,
        labels: dict[str, str],
        source: str,
        cluster: Cluster = EMPTY_CLUSTER,
        mutate: bool = True,
    ) -> dict[str, Any] | None:
        """Both worlds of one CREATE; the engine-up stored object is returned (None: not a known kind)."""
        if not _storable(obj) or self._resource(obj) is None:
            return None
        raw = stored(obj, namespace, self.policy)
        self.judge(raw, namespace=namespace, labels=labels, world="webhook down", source=source, cluster=cluster)
        if not mutate:
            return raw
        full = {NAME_LABEL: namespace, **labels}
        m = engine.mutate(self.policy, engine.Request(raw, namespace=namespace, namespace_labels=full, cluster=cluster))
        if not m.patch:
            return raw
        up = defaulted(jsonpatch.apply_patch(raw, list(m.patch)), namespace)
        if up.get("kind") == "Pod":
            from tests.intree.stored import default_pod_spec

            default_pod_spec(up["spec"], pod=True)  # the re-decode copies the new limits into requests
        self.judge(up, namespace=namespace, labels=labels, world="engine up", source=source, cluster=cluster)
        return up

    def update(
        self,
        new: dict[str, Any],
        old: dict[str, Any],
        *,
        namespace: str,
        labels: dict[str, str],
        source: str,
        cluster: Cluster = EMPTY_CLUSTER,
    ) -> None:
        if not (_storable(new) and _storable(old)) or self._resource(new) is None:
            return
        self.judge(
            stored(new, namespace, self.policy),
            old=stored(old, namespace, self.policy),
            operation="UPDATE",
            namespace=namespace,
            labels=labels,
            world="update as stored",
            source=source,
            cluster=cluster,
        )

"""The audit loop: context first, then every object judged as it arrives and handed on at once.

Nothing is kept per object except, for GPU-relevant controllers that are themselves owned (a
ReplicaSet of a Deployment, a Job of a CronJob), who owns them: a pod is then reported as
``Deployment/web (via ReplicaSet/web-5d8f)``. Objects in the namespaces the webhook configurations
exclude (``kube-system`` and the webhook's own) are counted, not judged: admission never sees them,
so an audit that judged them would report what the webhook can never enforce. Mirror pods likewise.
Namespace-level exemptions in the policy (``rules.<id>.exempt``) apply as at admission, since the
engine gets each namespace's real labels.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from webhook.audit.baseline import compare
from webhook.audit.inventory import Inventory
from webhook.audit.judge import MIRROR_POD, NOT_GPU, NOT_INTERCEPTED, Judged, identity, judge
from webhook.audit.screen import Screen, markers
from webhook.audit.stored import controller_of, is_mirror_pod
from webhook.check.runner import Status
from webhook.engine.cluster import Cluster
from webhook.engine.grants import GrantKeys
from webhook.policy.compiled import Policy

WEBHOOK_NAMESPACE = "gpu-admission"


@dataclass(slots=True)
class Audit:
    policy: Policy
    inventory: Inventory
    baseline: Policy | None = None
    not_intercepted: frozenset[str] = frozenset({"kube-system", WEBHOOK_NAMESPACE})
    default_namespace: str = "default"
    today: date | None = None  # exceptions apply as on this day (audit --date); None: none applies
    grant_keys: GrantKeys | None = None  # the webhook's grant keys (audit --grant-key): grants verify
    owners: dict[tuple[str, str, str], str] = field(default_factory=dict)
    context_counts: dict[str, int] = field(default_factory=dict)

    def run(self) -> Iterator[Judged]:
        found = self.inventory.context(self.default_namespace)
        self.context_counts = found.counts()
        cluster = found.cluster()
        labels = found.namespaces
        words = markers(self.policy, cluster)
        if self.baseline is not None:
            words += markers(self.baseline, cluster)
        for obj in self.inventory.objects(Screen(words)):
            if obj is None:  # the screen's: names nothing either policy could find relevant
                yield Judged("", "", "", "", "", Status.SKIPPED, skip=NOT_GPU)
                continue
            yield self.one(obj, cluster, labels)

    def one(self, obj: dict[str, Any], cluster: Cluster, labels: dict[str, dict[str, str]]) -> Judged:
        api_version, kind, namespace, name, uid = identity(obj)
        if namespace in self.not_intercepted or is_mirror_pod(obj):
            skip = NOT_INTERCEPTED if namespace in self.not_intercepted else MIRROR_POD
            return Judged(api_version, kind, namespace, name, uid, Status.SKIPPED, skip=skip)
        ns_labels = labels.get(namespace) if namespace else None
        excepting = {"today": self.today, "grant_keys": self.grant_keys}
        new = judge(
            self.policy, obj, cluster=cluster, namespace_labels=ns_labels, mutation=self.baseline is not None,
            **excepting,  # type: ignore[arg-type]
        )
        if self.baseline is not None:
            old = judge(
                self.baseline, obj, cluster=cluster, namespace_labels=ns_labels, mutation=True,
                **excepting,  # type: ignore[arg-type]
            )
            if new.status is not Status.SKIPPED or old.status is not Status.SKIPPED:
                new.change = compare(old, new)
                if new.status is Status.SKIPPED:  # judged by the old policy only: reported as admitted now
                    new.status, new.skip = Status.ADMITTED, ""
        if new.status is Status.SKIPPED:
            return new
        owner = controller_of(obj)
        if owner is not None:
            above = self.owners.get((namespace, *owner))
            new.owner = f"{above} (via {owner[0]}/{owner[1]})" if above else f"{owner[0]}/{owner[1]}"
            if kind != "Pod":  # a controller's own owner, for the pods it will report
                self.owners[(namespace, kind, name)] = new.owner
        return new

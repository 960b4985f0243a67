"""The audit loop: context first, then every object judged as it arrives and handed on at once.

Nothing is kept per object except, for GPU-relevant controllers that are themselves owned (a
ReplicaSet of a Deployment, a Job of a CronJob), who owns them: a pod is then reported as
``Deployment/web (via ReplicaSet/web-5d8f)``; and, for every object that may own others, its uid and
controlling owner, so that a grant a controller carried is believed only through an owner chain the
audit read (:mod:`webhook.audit.owners`). Objects in the namespaces the webhook configurations
exclude (``kube-system`` and the webhook's own) are counted, not judged: admission never sees them,
so an audit that judged them would report what the webhook can never enforce. Mirror pods likewise.
Namespace-level exemptions in the policy (``rules.<id>.exempt``) apply as at admission, since the
engine gets each namespace's real labels.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import date
from typing import Any

from webhook.audit.baseline import compare
from webhook.audit.inventory import Inventory, in_namespace
from webhook.audit.judge import MIRROR_POD, NOT_GPU, NOT_INTERCEPTED, Judged, identity, judge
from webhook.audit.owners import Owned, Owners
from webhook.audit.screen import Screen, markers
from webhook.audit.stored import controller_of, is_mirror_pod
from webhook.check.runner import Status
from webhook.engine.claim_object import is_claim_object
from webhook.engine.model.cluster import Cluster
from webhook.engine.model.grants import POD, GrantKeys, api_group
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
    chain: Owners = field(default_factory=Owners)  # the objects read that may own others: uid, owner
    context_counts: dict[str, int] = field(default_factory=dict)

    def run(self, workers: int = 1) -> Iterator[Judged]:
        """Every object's record, in the inventory's order. ``workers`` > 1 parses (snapshots) and
        judges on that many processes (:func:`webhook.pool.ordered`): the same records in the same
        order, since who owns whom is still decided here, in order."""
        found = self.inventory.context(self.default_namespace)
        for key, owned in getattr(self.inventory, "grant_carriers", ()):  # a snapshot's owners, read ahead
            self.chain.add(key, owned)
        self.context_counts = found.counts()
        cluster = found.cluster()
        labels = found.namespaces
        yield from self._claim_objects(cluster, labels)
        words = markers(self.policy, cluster)
        if self.baseline is not None:
            words |= markers(self.baseline, cluster)
        if workers > 1:
            yield from self._parallel(Screen(words), _Verdicts(self, cluster, labels), workers)
            return
        for obj in self.inventory.objects(Screen(words)):
            if obj is None:  # the screen's: names nothing either policy could find relevant
                yield Judged("", "", "", "", "", Status.SKIPPED, skip=NOT_GPU)
                continue
            if is_claim_object(obj):  # a snapshot's item: judged above, with the context
                continue
            yield self.one(obj, cluster, labels)

    def _claim_objects(self, cluster: Cluster, labels: dict[str, dict[str, str]]) -> Iterator[Judged]:
        """The ResourceClaims and ResourceClaimTemplates read as context, each judged on its own: a template
        created after the pod that names it was judged with no pod (``webhook.engine.claim_object``)."""
        namespace = getattr(self.inventory, "namespace", None)
        for obj in (*cluster.claim_templates.values(), *cluster.claims.values()):
            if isinstance(obj, dict) and is_claim_object(obj) and in_namespace(obj, namespace):
                yield self.one(obj, cluster, labels)

    def one(self, obj: dict[str, Any], cluster: Cluster, labels: dict[str, dict[str, str]]) -> Judged:
        new = self._believed(_Verdicts(self, cluster, labels).verdict(obj))
        return new if new.status is Status.SKIPPED else self._owned(new, controller_of(obj))

    def _believed(self, new: Judged) -> Judged:
        """Record ``new`` as a possible owner, and judge it without the grants its controller carried unless
        the chain they came by is one the audit read (:mod:`webhook.audit.owners`)."""
        if new.kind and new.name and not (new.kind == "Pod" and not api_group(new.api_version)):
            self.chain.add((new.namespace, api_group(new.api_version), new.kind, new.name),
                           Owned(new.uid, new.owner_ref))  # fmt: skip
        if not new.carried or new.ungranted is None:
            return new
        made = POD if new.kind == "Pod" and not api_group(new.api_version) else (api_group(new.api_version), new.kind)
        refused = {
            g.exception: why
            for g in new.carried
            if (why := self.chain.why_not(new.namespace, made, new.owner_ref, g)) is not None
        }
        if not refused:
            return new
        was = {v.rule: v.exception for v in new.violations if v.exception in refused}
        new.status, plain = new.ungranted
        new.violations = tuple(
            replace(v, message=f"{v.message} [grant of exception {was[v.rule]} not honoured: {refused[was[v.rule]]}]")
            if v.rule in was and not v.exception
            else v
            for v in plain
        )
        new.carried, new.ungranted = (), None
        return new

    def _owned(self, new: Judged, owner: tuple[str, str] | None) -> Judged:
        """Name ``new``'s controller chain: the only state of the loop, so it stays in this process."""
        if owner is not None:
            above = self.owners.get((new.namespace, *owner))
            new.owner = f"{above} (via {owner[0]}/{owner[1]})" if above else f"{owner[0]}/{owner[1]}"
            if new.kind != "Pod":  # a controller's own owner, for the pods it will report
                self.owners[(new.namespace, new.kind, new.name)] = new.owner
        return new

    def _parallel(self, screen: Screen, verdicts: _Verdicts, workers: int) -> Iterator[Judged]:
        from webhook.pool import Ready, Task, ordered

        unscreened = getattr(self.inventory, "unscreened", None)

        def jobs() -> Iterator[Ready[Any] | Task]:
            batch: list[Any] = []
            if unscreened is not None:  # a snapshot: the workers screen its items too (see ``unscreened``)
                per_task = UNITS_PER_TASK * SCREENED_PER_KEPT
                for item in unscreened():
                    batch.append(item)
                    if len(batch) >= per_task:
                        yield Task(_judge_units, (batch, True), len(batch) // SCREENED_PER_KEPT)
                        batch = []
                if batch:
                    yield Task(_judge_units, (batch, True), max(1, len(batch) // SCREENED_PER_KEPT))
                return
            for unit in self.inventory.units(screen):
                if isinstance(unit, dict) and is_claim_object(unit):
                    continue  # judged with the context
                if unit is None or isinstance(unit, dict):  # screened out, or an object judged here
                    if batch:
                        yield Task(_judge_units, (batch,), len(batch))
                        batch = []
                    yield Ready(None if unit is None else [(verdicts.verdict(unit), controller_of(unit))])
                    continue
                batch.append(unit)
                if len(batch) >= UNITS_PER_TASK:
                    yield Task(_judge_units, (batch,), len(batch))
                    batch = []
            if batch:
                yield Task(_judge_units, (batch,), len(batch))

        verdicts.screen = screen
        for value in ordered(
            jobs(), workers, initializer=_init_worker, initargs=(verdicts,), min_size=2 * UNITS_PER_TASK
        ):
            if value is None:
                yield Judged("", "", "", "", "", Status.SKIPPED, skip=NOT_GPU)
                continue
            for entry in value:
                if entry is None:  # a worker's screen: no GPUs or intent
                    yield Judged("", "", "", "", "", Status.SKIPPED, skip=NOT_GPU)
                    continue
                new, owner = entry
                new = self._believed(new)
                yield new if new.status is Status.SKIPPED else self._owned(new, owner)


UNITS_PER_TASK = 32
"""Objects (the API's objects as JSON, a snapshot's items to judge) per task of the pool: a stored pod is
~4 KB of text, so a task's round trip stays small next to its ~30 ms of parsing and judging."""
SCREENED_PER_KEPT = 4
"""A snapshot's task holds this many times ``UNITS_PER_TASK`` items before the screen (which, in a
cluster, keeps about one in five): about as many to judge as a task of the API's objects."""


@dataclass(slots=True)
class _Verdicts:
    """What judging one object needs, without the loop's state (owners) or the inventory (a client):
    what a pool worker gets once, by fork."""

    policy: Policy
    baseline: Policy | None
    not_intercepted: frozenset[str]
    cluster: Cluster
    labels: dict[str, dict[str, str]]
    namespace: str | None = None  # --namespace, for snapshot items parsed in a worker
    today: date | None = None  # exceptions apply as on this day
    grant_keys: GrantKeys | None = None  # grants verify with these keys
    screen: Screen | None = None  # a snapshot's items are screened in the worker (``SnapshotInventory.unscreened``)

    def __init__(self, audit: Audit, cluster: Cluster, labels: dict[str, dict[str, str]]) -> None:
        self.policy, self.baseline, self.not_intercepted = audit.policy, audit.baseline, audit.not_intercepted
        self.today, self.grant_keys = audit.today, audit.grant_keys
        self.cluster, self.labels = cluster, labels
        self.namespace = getattr(audit.inventory, "namespace", None)
        self.screen = None

    def verdict(self, obj: dict[str, Any]) -> Judged:
        """One object's record, before its owner chain is named (:meth:`Audit._owned`)."""
        api_version, kind, namespace, name, uid = identity(obj)
        if namespace in self.not_intercepted or is_mirror_pod(obj):
            skip = NOT_INTERCEPTED if namespace in self.not_intercepted else MIRROR_POD
            return Judged(api_version, kind, namespace, name, uid, Status.SKIPPED, skip=skip)
        ns_labels = self.labels.get(namespace) if namespace else None
        cluster = self.cluster
        new = judge(
            self.policy, obj, cluster=cluster, namespace_labels=ns_labels, mutation=self.baseline is not None,
            today=self.today, grant_keys=self.grant_keys,
        )
        if self.baseline is not None:
            old = judge(
                self.baseline, obj, cluster=cluster, namespace_labels=ns_labels, mutation=True,
                today=self.today, grant_keys=self.grant_keys,
            )
            if new.status is not Status.SKIPPED or old.status is not Status.SKIPPED:
                new.change = compare(old, new)
                if new.status is Status.SKIPPED:  # judged by the old policy only: reported as admitted now
                    new.status, new.skip = Status.ADMITTED, ""
        return new


_WORKER: _Verdicts | None = None  # a pool worker's judge, set once by its initializer


def _init_worker(verdicts: _Verdicts) -> None:
    global _WORKER
    _WORKER = verdicts


def _judge_units(units: list[Any], unscreened: bool = False) -> list[tuple[Judged, tuple[str, str] | None] | None]:
    """A pool task: parse (snapshot items) and judge a batch; each record with its object's owner.
    ``unscreened``: the items of :meth:`SnapshotInventory.unscreened`, screened here first; one
    screened out is a None in its place (the records of the objects without GPUs or intent)."""
    from webhook.audit.inventory import SCREENED_OUT, parse_unit, screen_item

    assert _WORKER is not None, "the pool's initializer sets the judge"
    out: list[tuple[Judged, tuple[str, str] | None] | None] = []
    for unit in units:
        if unscreened:
            assert _WORKER.screen is not None
            unit = screen_item(unit, _WORKER.screen, _WORKER.namespace)
            if unit is SCREENED_OUT:
                out.append(None)
            if unit is None or unit is SCREENED_OUT:
                continue
            unit = snapshot_item(unit)
        for obj in parse_unit(unit, _WORKER.namespace):
            if not is_claim_object(obj):  # judged with the context (Audit._claim_objects)
                out.append((_WORKER.verdict(obj), controller_of(obj)))
    return out


def snapshot_item(item: Any) -> Any:
    """The item dedented, as :meth:`SnapshotInventory.units` sends it."""
    from webhook.audit.snapshot import Item

    return Item(item.file, item.line, item.text)

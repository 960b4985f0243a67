"""What the audit believes of a grant a controller carried: nothing the object says of itself.

At admission the requester says who created an object; a stored object says only what its owner
references claim, and a tenant writes those as it likes (a pod with a copied grant and an owner
``ConfigMap/<granted-name>-x`` looks, by its own word, like a pod of the granted Deployment). So the
engine judges each stored object with the grants its controller would have carried, and reports which
ones it honoured that way (``Decision.carried_grants``); this module honours them only where the chain
holds in what the audit read:

- the object's controlling owner exists (same namespace, kind, API group and name, and the uid its
  reference names), is the granted object or a child of the kind the granted object's controller creates
  (a Deployment's ReplicaSet, a CronJob's Job: :data:`webhook.engine.model.grants.CREATES`), and that
  child's own controlling owner is the granted object, which exists too;
- the grant carries the digest of what the pods run (a ``v1`` grant has none: it cannot be checked, so
  it is not believed) and the object runs exactly that (the engine compared it).

Otherwise the object is judged as if it carried no grant, and the finding says why the grant was not
honoured. Owners are the objects of the kind table the audit read: a live cluster lists Pods last, so
every owner is known before its pods; a snapshot may list pods first, so its items that carry a grant
are read once more before the judging pass (:meth:`webhook.audit.inventory.SnapshotInventory.context`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.engine.model.grants import POD, Grant, api_group, controlling_owner, creates

Key = tuple[str, str, str, str]  # (namespace, API group, kind, name)
Ref = tuple[str, str, str, str]  # (API group, kind, name, uid) of a controlling owner reference


@dataclass(frozen=True, slots=True)
class Owned:
    """What the chain needs of one object: its uid and its own controlling owner."""

    uid: str
    owner: Ref | None


def facts(obj: Mapping[str, Any]) -> tuple[Key, Owned] | None:
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
        return None
    key = (str(meta.get("namespace") or ""), api_group(str(obj.get("apiVersion") or "")), str(obj.get("kind")),
           meta["name"])  # fmt: skip
    return key, Owned(str(meta.get("uid") or ""), controlling_owner(meta))


@dataclass(slots=True)
class Owners:
    """The objects read so far that may own others (never pods), by (namespace, group, kind, name)."""

    known: dict[Key, Owned] = field(default_factory=dict)

    def add(self, key: Key, owned: Owned) -> None:
        if key[2] != "Pod" or key[1]:
            self.known[key] = owned

    def _find(self, namespace: str, ref: Ref) -> Owned | None:
        group, kind, name, uid = ref
        owned = self.known.get((namespace, group, kind, name))
        if owned is None or (uid and owned.uid and uid != owned.uid):
            return None
        return owned

    def why_not(self, namespace: str, made: tuple[str, str], owner: Ref | None, grant: Grant) -> str | None:
        """Why the audit cannot honour ``grant`` on an object of ``made`` (group, kind) in ``namespace``
        whose controlling owner reference is ``owner``; None when the chain holds."""
        granted = f"{grant.kind}/{grant.name}"
        if not grant.content:
            return (f"the grant predates content binding (v1) and cannot be checked against what the pod runs; "
                    f"re-apply {granted} so the webhook re-issues it")  # fmt: skip
        if owner is None:
            return "the object has no controlling owner"
        group, kind, name, _ = owner
        said = f"{kind}/{name}"
        if self._find(namespace, owner) is None:
            return f"its owner {said} does not exist in what the audit read (or has another uid)"
        children = creates(grant.group, grant.kind)
        if (group, kind, name) == (grant.group, grant.kind, grant.name):
            if made not in children:
                return f"{grant.kind} does not create {made[1]}s itself; its owner {said} cannot have created it"
            return None
        if made != POD or (group, kind) not in children or POD not in creates(group, kind):
            return f"its owner {said} is not of a kind {granted} creates"
        above = self._find(namespace, owner)
        assert above is not None  # found above
        if above.owner is None or above.owner[:3] != (grant.group, grant.kind, grant.name):
            return f"its owner {said} is not owned by {granted}"
        if self._find(namespace, above.owner) is None:
            return f"{granted} does not exist in what the audit read (or has another uid)"
        return None

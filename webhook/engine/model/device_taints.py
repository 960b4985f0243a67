"""Device-taint tolerations (DRA, KEP-5055) judged like node tolerations: what a toleration lets a
claim onto, and whether the tenant's entitlement allows it. Pure; read by the ``device-taint-tolerated``
rule for pods and for claim objects alike.

DRA drivers taint devices that must not be handed out (NVIDIA's marks an XID error or a lost GPU
``NoSchedule``); the platform may taint its own (reservations, maintenance). A claim request's
toleration matches taints as a pod's matches node taints (an empty key with ``Exists`` every taint, an
empty effect every effect), so a tenant may tolerate only the taints its class or pool allows
(``allowedDeviceTaints``; ``*`` allows a blanket toleration too). Tolerating an informational taint
(effect ``None``) changes nothing and is always fine; a key the policy does not know is judged as a
taint that keeps devices out of service, since the webhook cannot tell it is not one.
"""

from __future__ import annotations

from collections.abc import Mapping

from webhook.engine.model.claims import DeviceToleration

BLANKET = "*"


def refusal(tol: DeviceToleration, known: Mapping[str, str], allowed: frozenset[str]) -> str | None:
    """Why the toleration may not be written (None: it may)."""
    if BLANKET in allowed:
        return None
    if not tol.key:
        if tol.operator != "Exists":
            return None  # the API rejects an empty key without Exists; nothing to tolerate here
        health = ", ".join(k for k, e in sorted(known.items()) if e != "None")
        return f"tolerates every device taint (empty key, Exists), the health taints {health} too"
    if tol.key in allowed:
        return None
    effect = known.get(tol.key)
    if effect == "None":
        return None  # informational: tolerating it lets the claim onto nothing it could not have
    if effect is None:
        return f"tolerates device taint {tol.key}, which the policy does not know"
    if tol.effect and tol.effect != effect:
        return None  # tolerates an effect this taint does not have
    return f"tolerates device taint {tol.key} ({effect}: devices kept out of service)"

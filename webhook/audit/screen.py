"""A text screen that says, before any YAML is parsed, that a snapshot item cannot be GPU-relevant;
and of an object read from the API, written as JSON, that it need not be judged or sent to a worker.

Most of a cluster's pods hold no GPU, and parsing a stored pod (managedFields, status) costs ~100
times judging it; the engine would return "not relevant" for each. An object is relevant to the
engine only if it names one of these somewhere in its text, so an item that names none is counted
as not GPU-relevant unparsed:

- the intent prefix (``gpu-admission.io/``: the workload label, every intent key);
- a GPU resource prefix of the policy, ``nvidia.com/``, a GPU-fraction annotation, the implicit
  DRA extended resource prefix, an extended resource name a DeviceClass of the cluster or the
  policy maps, or ``resourceClaims``;
- where some pool's cards are shared or sliced (``privileged-gpu`` judges CPU-only pods that could
  reach them): every word a trigger is spelled with (``privileged``, ``capabilities``, ``envFrom``,
  ``hostPath``, the container toolkit's variables).

The screen only ever lets more through (a word in a comment, in ``managedFields``): it may cost a
parse, never a judgement. ``tests/audit/test_audit_screen.py`` checks it against the engine.
"""

from __future__ import annotations

from collections.abc import Iterable

from webhook.engine.model.claims import IMPLICIT_PREFIX
from webhook.engine.model.cluster import Cluster
from webhook.engine.model.device_reach import TOOLKIT_ENV, exposed_pools
from webhook.policy.compiled import Policy

TRIGGER_WORDS = ("privileged", "capabilities", "envFrom", "hostPath", *TOOLKIT_ENV)


def markers(policy: Policy, cluster: Cluster) -> tuple[str, ...]:
    words: list[str] = [f"{policy.settings.prefix}/", "nvidia.com/", "resourceClaims", IMPLICIT_PREFIX]
    words += policy.gpu_prefixes
    words += policy.fraction_keys
    words += policy.dra.extended
    for device_class in cluster.device_classes.values():
        spec = device_class.get("spec") if isinstance(device_class.get("spec"), dict) else {}
        if isinstance(spec.get("extendedResourceName"), str):
            words.append(spec["extendedResourceName"])
    if exposed_pools(policy):
        words += TRIGGER_WORDS
    return tuple(dict.fromkeys(w for w in words if w))


class Screen:
    """``screen(text)``: False only when the text names no marker (the object cannot be relevant)."""

    def __init__(self, words: Iterable[str]) -> None:
        self.words = tuple(words)

    def __call__(self, text: str) -> bool:
        return any(w in text for w in self.words)

"""The engine's output: what every surface (admission, ``check``, ``policy test``, benchmarks) consumes.

Kept free of any transport so that the same value can become an AdmissionReview response, a CI
report line or a test assertion without translation loss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from webhook.actions import Action

if TYPE_CHECKING:
    from webhook.engine.model.grants import Grant

WOULD_DENY = "would deny"
"""How a finding the policy's enforcement mode admitted is marked in warnings, annotations and reports."""

WARNING_LIMIT = 120
"""The apiserver advises warnings of at most 120 characters; longer ones may be truncated."""


def short_warning(rule: str, message: str, limit: int = WARNING_LIMIT) -> str:
    """``[rule] fix (what)`` cut to ``limit``: the fix whole where it fits, the description trimmed first."""
    what, sep, fix = message.partition("; ")
    head = f"[{rule}] "
    if not sep:
        text = head + message
        return text if len(text) <= limit else text[: limit - 1] + "…"
    text = f"{head}{fix} ({what})"
    if len(text) <= limit:
        return text
    room = limit - len(head) - len(fix) - len(" (…)")
    if room >= 12:  # enough of the description to be worth showing
        return f"{head}{fix} ({what[:room].rstrip()}…)"
    text = head + fix
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken rule: the id users grep for, the effective action, where, and how to fix it."""

    rule: str
    action: Action
    path: str
    message: str
    exception: str | None = None
    """The policy exception that turned this finding into an ``audit`` entry (SPEC §14), if one did."""
    would_deny: bool = False
    """The rule says ``deny`` and the policy's enforcement mode (``warn`` or ``audit``) admitted it on the
    record instead: what ``enforce`` would deny. An excepted finding is never one (the exception admits it
    under every mode)."""

    def render(self) -> str:
        """``[rule-id] message (field path)`` — the denial message shape the API server shows users; an
        excepted finding ends with the exception's name, so the audit log says who allowed it, and a
        finding the enforcement mode admitted says it would be denied once the policy enforces."""
        where = f" ({self.path})" if self.path else ""
        excepted = f" [exception {self.exception}]" if self.exception else ""
        observed = f" [{WOULD_DENY}]" if self.would_deny else ""
        return f"[{self.rule}] {self.message}{where}{excepted}{observed}"

    def warning(self) -> str:
        """An admission warning as kubectl shows it: rule id and the fix first, within 120 characters.

        Messages read "what is wrong; how to fix it". kubectl users act on the fix, and a warning cut
        at 120 characters used to lose exactly that part, so the fix leads and the description of
        the problem fills the room that is left. The full message (and field path) stays in the
        audit annotation and in ``check``. A finding the enforcement mode admitted reads
        ``[rule, would deny]``: the user learns it will be refused once the policy enforces."""
        return short_warning(f"{self.rule}, {WOULD_DENY}" if self.would_deny else self.rule, self.message)


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one pod template lands and what it gets: the structured twin of the explanation."""

    template: str  # field path of the template ("" for a Pod)
    class_name: str
    pool: str
    isolation: str
    resources: dict[str, str]
    device: str
    adopted_from: str | None = None


@dataclass(slots=True)
class Decision:
    """The verdict for one object.

    ``patch`` holds JSON Patch operations (RFC 6902) against the object as received; it is empty
    when nothing needs to change (always on UPDATE and for kinds that are only validated).
    ``mutated`` is the object after the patch, so validators and ``check -o yaml`` need not apply it
    again.

    A value: nothing changes it after ``evaluate`` returns. It is not a frozen dataclass only
    because one is built per review and a frozen one costs three times as much to construct
    (every field through ``object.__setattr__``; docs/performance.md).
    """

    kind: str
    name: str
    operation: str
    patch: tuple[dict[str, Any], ...] = ()
    violations: tuple[Violation, ...] = ()
    explanation: tuple[str, ...] = ()
    mutated: dict[str, Any] | None = None
    relevant: bool = True
    """False when the object carries neither intent nor GPU resources: it was left untouched."""
    namespace_unknown: bool = False
    """The object is the webhook's business and its namespace was in ``Cluster.unknown_namespaces``:
    decided without the namespace's labels. An edge that marked the namespace unknown only because
    its cache lacked it can now look it up and evaluate again; other objects never need the lookup."""
    waste: WasteReport | None = None
    placements: tuple[Placement, ...] = ()
    carried_grants: tuple[Grant, ...] = ()
    """The exception grants honoured because a controller carried them to this object: an audit verifies them
    against the owners it read before it believes them (``webhook.audit.owners``)."""

    @property
    def denials(self) -> tuple[Violation, ...]:
        return tuple(v for v in self.violations if v.action is Action.DENY)

    @property
    def warnings(self) -> tuple[str, ...]:
        return tuple(v.warning() for v in self.violations if v.action is Action.WARN)

    @property
    def audits(self) -> tuple[Violation, ...]:
        return tuple(v for v in self.violations if v.action is Action.AUDIT)

    @property
    def would_deny(self) -> tuple[Violation, ...]:
        """Findings the enforcement mode admitted that ``enforce`` would deny."""
        return tuple(v for v in self.violations if v.would_deny)

    @property
    def allowed(self) -> bool:
        return not any(v.action is Action.DENY for v in self.violations)

    @property
    def message(self) -> str:
        """The denial message: every violation, not just the first, joined with "; "."""
        return "; ".join(v.render() for v in self.denials)

    @property
    def audit_annotations(self) -> dict[str, str]:
        """Audit- and warn-level violations, in full, as ``auditAnnotations`` (the apiserver prefixes the
        webhook name): a warning kubectl shows is the short form, the audit log keeps every word."""
        out: dict[str, str] = {}
        for v in self.violations:
            if v.action is not Action.AUDIT and v.action is not Action.WARN:
                continue
            key = v.rule
            out[key] = f"{out[key]}; {v.render()}" if key in out else v.render()
        used = self.exceptions
        if used:
            out["exceptions"] = "; ".join(f"{name}: {', '.join(rules)}" for name, rules in used.items())
        return out

    @property
    def exceptions(self) -> dict[str, tuple[str, ...]]:
        """Exception name -> the rules it covered in this decision (in the order found)."""
        out: dict[str, list[str]] = {}
        for v in self.violations:
            if v.exception is not None:
                rules = out.setdefault(v.exception, [])
                if v.rule not in rules:
                    rules.append(v.rule)
        return {name: tuple(rules) for name, rules in out.items()}


@dataclass(frozen=True, slots=True)
class WasteReport:
    """GPU memory asked for versus what the chosen device really holds (per pod)."""

    device: str
    requested_bytes: int | None
    device_bytes: int
    devices: int
    pods: int
    shared: bool = False  # time-slicing: a whole card shared with other pods, memory not isolated

    @property
    def wasted_bytes(self) -> int:
        if self.requested_bytes is None or self.shared:
            return 0
        return max(0, self.device_bytes - self.requested_bytes) * self.devices * self.pods

"""Policy exceptions in the audit (SPEC §13, §14): which exceptions cover findings of what already runs,
by name, and which expire within a week of the audit's date.

The engine applies exceptions to each stored object as ``/validate`` would on the audit's date
(``audit --date``, default today UTC): an excepted finding is an ``audit`` entry naming its exception,
never dropped. What a stored object cannot say is who sent it, so the audit judges it as admission saw
it where it can: an object with a controlling owner reference was created by that owner's controller
(the requester ``/validate`` saw; :func:`requester_of`), any other object by nobody the policy names.
Grants (the chain through controllers) verify only with the webhook's own key (``audit --grant-key``);
without it no grant can be told from a forgery, so none is honoured and the report says so.

:class:`ExceptionReport` gathers the uses as results stream past (a count and a few examples per
exception, whatever the cluster's size) and the writers print it in every format.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from webhook.audit.judge import Judged
from webhook.audit.tally import tap
from webhook.lint.checks import EXPIRY_WARNING_DAYS, describe
from webhook.policy.compiled import Policy
from webhook.policy.model import PolicyException


@dataclass(slots=True)
class Use:
    """One exception's findings in this audit: how many, and the first few as (object, rule, owner)."""

    count: int = 0
    examples: list[tuple[str, str, str]] = field(default_factory=list)
    objects: set[str] = field(default_factory=set)


class ExceptionReport:
    """Exceptions in use and expiring soon, for the audit's date."""

    def __init__(self, policy: Policy, today: date, *, verified: bool, max_listed: int = 20) -> None:
        self.policy = policy
        self.today = today
        self.verified = verified  # grants could be verified (--grant-key)
        self.max_listed = max_listed  # 0: every one
        self.uses: dict[str, Use] = {}
        self._objects_cap = 10_000  # distinct objects counted per exception (memory stays bounded)

    @property
    def exceptions(self) -> tuple[PolicyException, ...]:
        return tuple(self.policy.spec.exceptions)

    def observe(self, judged: Iterable[Judged]) -> Iterator[Judged]:
        return tap(self.add, judged)

    def add(self, j: Judged) -> None:
        for v in j.violations:
            if not v.exception:
                continue
            use = self.uses.setdefault(v.exception, Use())
            use.count += 1
            if len(use.objects) < self._objects_cap:
                use.objects.add(j.where)
            if not self.max_listed or len(use.examples) < self.max_listed:
                use.examples.append((j.where, v.rule, j.owner))

    def expiring(self) -> list[tuple[PolicyException, int]]:
        """(exception, days left) for each that expires within a week of the audit's date, or has expired
        and is still in the policy (days left <= 0: it no longer applies)."""
        out = []
        for exc in self.exceptions:
            left = (exc.expires - self.today).days
            if left <= EXPIRY_WARNING_DAYS:
                out.append((exc, left))
        return sorted(out, key=lambda pair: (pair[1], pair[0].name))

    def in_use(self) -> list[tuple[PolicyException, Use]]:
        by_name = {e.name: e for e in self.exceptions}
        return [(by_name[name], self.uses[name]) for name in sorted(self.uses) if name in by_name]

    @staticmethod
    def when(left: int, exc: PolicyException) -> str:
        if left <= 0:
            return f"expired on {exc.expires.isoformat()}: no longer applies"
        return f"expires on {exc.expires.isoformat()} (in {left} day{'s' * (left != 1)})"

    def note(self) -> str | None:
        """Why grants were not honoured, when they could not be verified."""
        if self.verified or not self.exceptions:
            return None
        return (
            "exception grants were not verified (no --grant-key): findings that an exception covers only "
            "through a grant (the pods of a subject's controllers) are reported with their rule's action"
        )

    def summary(self) -> dict[str, Any]:
        """The JSON form: the audit's date, every exception in use with what it covered, and the soon-expiring."""
        return {
            "date": self.today.isoformat(),
            "grantsVerified": self.verified,
            "inUse": [
                {
                    **describe_exception(exc),
                    "findings": use.count,
                    "objects": len(use.objects),
                    "covered": [
                        {"object": where, "rule": rule, **({"owner": owner} if owner else {})}
                        for where, rule, owner in use.examples
                    ],
                }
                for exc, use in self.in_use()
            ],
            "expiring": [
                {**describe_exception(exc), "daysLeft": left, "expired": left <= 0} for exc, left in self.expiring()
            ],
        }

    def lines(self) -> list[str]:
        """The text form (also what JUnit's properties and the ClusterReport's messages say)."""
        out = []
        used = self.in_use()
        if used:
            out.append(f"exceptions in use on {self.today.isoformat()} ({len(used)}):")
            for exc, use in used:
                out.append(
                    f"  {exc.name} ({', '.join(exc.rules)}; owner {exc.owner}; expires {exc.expires.isoformat()}): "
                    f"{use.count:,} finding(s) on {len(use.objects):,} object(s)"
                )
                for where, rule, owner in use.examples:
                    out.append(f"    {where}{f' (owner {owner})' if owner else ''}: [{rule}]")
                if use.count > len(use.examples):
                    out.append(f"    … and {use.count - len(use.examples):,} more (--max-listed 0 lists every one)")
        soon = self.expiring()
        if soon:
            head = f"exceptions expiring within {EXPIRY_WARNING_DAYS} days of {self.today.isoformat()}"
            out.append(f"{head} ({len(soon)}):")
            for exc, left in soon:
                out.append(
                    f"  {exc.name} ({', '.join(exc.rules)}; owner {exc.owner}): {self.when(left, exc)}; from then "
                    f"{', '.join(exc.rules)} applies again"
                )
        if (note := self.note()) is not None:
            out.append(f"note: {note}")
        return out


def describe_exception(exc: PolicyException) -> dict[str, Any]:
    """What reports say about one exception: its name and record (rules, scope, subjects, expiry, owner)."""
    return {
        "exception": exc.name,
        "rules": list(exc.rules),
        "namespaces": describe(exc.namespaces),
        "kinds": list(exc.kinds),
        "names": list(exc.names),
        "subjects": [s.ref for s in exc.subjects],
        "expires": exc.expires.isoformat(),
        "owner": exc.owner,
        "reason": exc.reason,
    }

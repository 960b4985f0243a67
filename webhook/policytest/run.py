"""Run loaded suites through the admission engine and compare each decision with its expectations."""

from __future__ import annotations

import re
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from webhook.engine import Decision, Request, Stage, explain
from webhook.engine.model.decision import Action
from webhook.policy import Policy, PolicyError, load_policy
from webhook.policytest import match
from webhook.policytest.load import LoadedCase, LoadedSuite


@dataclass(frozen=True, slots=True)
class Failure:
    """One unmet expectation: which key, where it is written, what differs."""

    key: str
    line: int
    message: str
    diff: tuple[str, ...] = ()


@dataclass(slots=True)
class CaseResult:
    case: LoadedCase
    decision: Decision | None
    failures: list[Failure] = field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None  # the engine raised: a bug, reported as a JUnit <error>

    @property
    def passed(self) -> bool:
        return not self.failures and self.error is None


@dataclass(slots=True)
class SuiteResult:
    suite: LoadedSuite
    cases: list[CaseResult]
    seconds: float = 0.0

    @property
    def failed(self) -> int:
        return sum(1 for c in self.cases if not c.passed)


class PolicyLoadError(Exception):
    """A suite's policy does not load: the suite cannot run (exit 2)."""

    def __init__(self, policy_dir: Path, suites: list[str], error: PolicyError):
        self.policy_dir, self.suites, self.error = policy_dir, suites, error
        super().__init__(str(error))


def load_policies(suites: Sequence[LoadedSuite]) -> dict[Path, Policy]:
    """Each distinct policy directory is loaded once, however many suites use it."""
    policies: dict[Path, Policy] = {}
    for suite in suites:
        if suite.policy_dir in policies:
            continue
        try:
            policies[suite.policy_dir] = load_policy(suite.policy_dir)
        except PolicyError as exc:
            users = [s.file for s in suites if s.policy_dir == suite.policy_dir]
            raise PolicyLoadError(suite.policy_dir, users, exc) from None
    return policies


def rollout_notes(policies: dict[Path, Policy]) -> list[str]:
    """One line per policy rolled out in an observe mode or without mutation: its suites were judged as
    enforce with mutation applied, not as the cluster currently answers."""
    notes = []
    for where, policy in policies.items():
        mode, mutation = policy.settings.enforcement, policy.settings.mutation
        if mode != "enforce" or mutation != "apply":
            notes.append(
                f"{where}: settings.enforcement {mode}, settings.mutation {mutation}: cases are judged as enforce "
                "with mutation applied (the rules' own verdicts); the cluster admits what they deny, on the record"
            )
    return notes


def select(suites: Sequence[LoadedSuite], pattern: str | None) -> list[LoadedSuite]:
    """``--run REGEX``: keep cases whose ``suite/case`` id the expression matches (re.search)."""
    if pattern is None:
        return list(suites)
    regex = re.compile(pattern)
    out = []
    for suite in suites:
        cases = [c for c in suite.cases if regex.search(c.id)]
        if cases:
            out.append(LoadedSuite(suite.file, suite.name, suite.policy_dir, cases))
    return out


def run_suites(suites: Sequence[LoadedSuite], policies: dict[Path, Policy]) -> list[SuiteResult]:
    """Every case judged under ``enforce`` with mutation applied (:meth:`Policy.enforcing`): a suite states
    what the platform's rules and mutation do, and must pass at every step of an observe-first rollout,
    whatever ``settings.enforcement`` and ``settings.mutation`` the policy is rolled out with for now."""
    results = []
    enforcing = {where: policy.enforcing() for where, policy in policies.items()}
    for suite in suites:
        start = time.perf_counter()
        cases = [run_case(enforcing[suite.policy_dir], case) for case in suite.cases]
        results.append(SuiteResult(suite, cases, time.perf_counter() - start))
    return results


def run_case(policy: Policy, loaded: LoadedCase) -> CaseResult:
    case = loaded.case
    start = time.perf_counter()
    try:
        decision = explain(
            policy,
            Request(
                loaded.obj,
                operation=case.operation,
                namespace=case.namespace,
                namespace_labels=loaded.namespace_labels,
                old_object=loaded.old,
                stage=Stage.STORED if case.as_stored else Stage.MANIFEST,
                cluster=loaded.cluster,
                requester=loaded.requester,
                today=case.date or datetime.now(UTC).date(),
            ),
        )
    except Exception:  # the engine must never raise; if it does, the case reports the bug
        return CaseResult(
            loaded, None, seconds=time.perf_counter() - start, error=traceback.format_exc(limit=8).rstrip()
        )
    result = CaseResult(loaded, decision, seconds=time.perf_counter() - start)
    result.failures = compare(loaded, decision)
    return result


def fired_rules(decision: Decision) -> list[str]:
    return list(dict.fromkeys(v.rule for v in decision.violations))


def verdict(decision: Decision, *, detail: bool = True) -> str:
    """One phrase for the decision; ``detail`` adds the denial message (for one-line failure reports)."""
    if not decision.relevant:
        return "not relevant (no GPU resources, no intent): admitted untouched"
    if not decision.allowed:
        return f"denied: {decision.message}" if detail else f"denied ({len(decision.denials)} denial(s))"
    if decision.warnings:
        return f"admitted with {len(decision.warnings)} warning(s)"
    return "admitted"


def compare(loaded: LoadedCase, d: Decision) -> list[Failure]:
    from webhook.engine.rules import RULES

    exp = loaded.case.expect
    out: list[Failure] = []
    fired = fired_rules(d)
    shown = ", ".join(fired) or "none"

    def fail(key: str, message: str, diff: list[str] | tuple[str, ...] = ()) -> None:
        out.append(Failure(key, loaded.line_of(key), message, tuple(diff)))

    if exp.allowed is not None and d.allowed != exp.allowed:
        fail("allowed", f"allowed: expected {str(exp.allowed).lower()}, got {str(d.allowed).lower()} ({verdict(d)})")
    missing = [r for r in exp.rules if r not in fired]
    if missing:
        fail("rules", f"rules: expected {', '.join(missing)} to fire; fired: {shown}")
    if exp.exact_rules:
        extra = [r for r in fired if r not in exp.rules]
        if extra:
            fail(
                "exactRules",
                f"exactRules: {', '.join(extra)} fired too (expected only {', '.join(exp.rules) or 'none'})",
            )
    unwanted = [v for v in d.violations if v.rule in exp.not_rules]
    for v in unwanted:
        fail("notRules", f"notRules: {v.rule} fired ({v.action.value}): {v.message}")
    warned = [v for v in d.violations if v.action is Action.WARN]
    for entry in exp.warnings:
        if entry in RULES:
            ok = any(v.rule == entry for v in warned)
        else:
            ok = any(entry in v.render() for v in warned)
        if not ok:
            got = "; ".join(v.render() for v in warned) or "none"
            fail("warnings", f"warnings: expected {entry!r}; warnings: {got}")
    used = d.exceptions
    for name in exp.exceptions:
        if name not in used:
            got = ", ".join(used) or "none"
            fail("exceptions", f"exceptions: expected {name!r} to apply; applied: {got}")
    for text in exp.messages:
        if not any(text in v.render() for v in d.violations):
            got = "; ".join(v.render() for v in d.violations) or "none"
            fail("messages", f"messages: no violation mentions {text!r}; violations: {got}")
    if exp.object is not None:
        actual = d.mutated if d.mutated is not None else loaded.obj
        problems = match.mismatches(exp.object, actual)
        if problems:
            fail(
                "object",
                "object: the resulting object does not contain the expected subset:\n"
                + "\n".join(f"  {p}" for p in problems),
                match.diff(exp.object, match.project(exp.object, actual), actual_label="actual (resulting object)"),
            )
    if exp.patch is not None and list(exp.patch) != list(d.patch):
        fail(
            "patch",
            f"patch: expected {len(exp.patch)} operation(s), got {len(d.patch)} that differ",
            match.diff(list(exp.patch), list(d.patch), actual_label="actual patch"),
        )
    return out

"""What a test run exercised of each policy: rules asserted to fire, classes resolved, pools taken.

A suite that never makes ``gang-incomplete`` fire does not protect it; ``policy test --coverage``
lists what no passing case reaches, per policy directory, the way ``go test -cover`` lists lines.

Classes and pools come from the engine's structured ``Decision.placements``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from webhook.policy import Policy
from webhook.policytest.run import SuiteResult, fired_rules


@dataclass(slots=True)
class Coverage:
    policy_dir: Path
    rules: dict[str, bool] = field(default_factory=dict)
    classes: dict[str, bool] = field(default_factory=dict)
    pools: dict[str, bool] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return all(self.rules.values()) and all(self.classes.values()) and all(self.pools.values())

    def missing(self) -> dict[str, list[str]]:
        return {
            what: [name for name, hit in table.items() if not hit]
            for what, table in (("rules", self.rules), ("classes", self.classes), ("pools", self.pools))
        }

    def lines(self) -> list[str]:
        out = [f"coverage of {self.policy_dir}:"]
        for what, table in (("rules", self.rules), ("classes", self.classes), ("pools", self.pools)):
            hit = sum(table.values())
            gaps = [n for n, ok in table.items() if not ok]
            tail = f"; not covered: {', '.join(gaps)}" if gaps else ""
            out.append(f"  {what:<8}{hit}/{len(table)}{tail}")
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "policy": str(self.policy_dir),
            "complete": self.complete,
            "rules": self.rules,
            "classes": self.classes,
            "pools": self.pools,
        }


def coverage(results: Sequence[SuiteResult], policies: dict[Path, Policy]) -> list[Coverage]:
    from webhook.engine.rules import RULES

    out: dict[Path, Coverage] = {}
    for path, policy in policies.items():
        out[path] = Coverage(
            path,
            rules=dict.fromkeys(sorted(RULES), False),
            classes=dict.fromkeys(policy.classes, False),
            pools=dict.fromkeys(policy.pools, False),
        )
    for suite in results:
        cov = out[suite.suite.policy_dir]
        for case in suite.cases:
            if not case.passed or case.decision is None:
                continue
            fired = set(fired_rules(case.decision))
            for rule_id in case.case.case.expect.rules:
                if rule_id in fired:
                    cov.rules[rule_id] = True
            for placement in case.decision.placements:
                if placement.pool in cov.pools:
                    cov.pools[placement.pool] = True
                if placement.class_name in cov.classes:
                    cov.classes[placement.class_name] = True
    return list(out.values())

"""``check --explain``: the engine's decision trace, grouped into the resolution steps and aligned.

The engine emits one flat line per decision (``pool infer-a100: taken (...)``, ``rule x: pass``);
eighteen ``pass`` lines bury the one that matters. The text keeps the engine's lines but folds the
rule lines: failing rules first with their action, passing ones in one wrapped list. For JSON each
line is also filed under its step — namespace, class, pool, backend, rdma, gang, topology, rules,
patch — and unknown lines are kept as notes, so a new trace line from the engine is never lost.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field
from typing import Any

_RULE = re.compile(r"^rule (\S+): (pass|deny|warn|audit|off)(?: \(exception ([^)]+)\))?(?:: (.*))?$")
_STEPS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("namespace", re.compile(r"^namespace (.*)$")),
    ("class", re.compile(r"^(.*?): class (.*)$")),
    ("class", re.compile(r"^(.*?): raw request (adopted as class .*)$")),
    ("resolution", re.compile(r"^(.*: not resolved: .*)$")),
    ("pool", re.compile(r"^pool (.*)$")),
    ("backend", re.compile(r"^backend: (.*)$")),
    ("rdma", re.compile(r"^rdma:? (.*)$")),
    ("gang", re.compile(r"^gang:? (.*)$")),
    ("topology", re.compile(r"^topology (.*)$")),
    ("scheduling", re.compile(r"^scheduling:? (.*)$")),
    ("patch", re.compile(r"^patch: (.*)$")),
    ("malformed", re.compile(r"^malformed: (.*)$")),
    ("exceptions", re.compile(r"^(exception .*)$")),
)
WIDTH = 100


@dataclass(slots=True)
class Trace:
    steps: list[tuple[str, str]] = field(default_factory=list)  # (step, text) in engine order
    passed: list[str] = field(default_factory=list)
    failed: list[tuple[str, str, str, str | None]] = field(default_factory=list)  # (rule, action, message, exception)

    def as_dict(self) -> dict[str, Any]:
        return {
            "steps": [{"step": s, "text": t} for s, t in self.steps],
            "rules": {
                "passed": self.passed,
                "failed": [
                    {"rule": r, "action": a, "message": m, **({"exception": e} if e else {})}
                    for r, a, m, e in self.failed
                ],
            },
        }


def parse(lines: tuple[str, ...] | list[str]) -> Trace:
    trace = Trace()
    rules_at: int | None = None
    for line in lines:
        rule = _RULE.match(line)
        if rule:
            if rules_at is None:
                rules_at = len(trace.steps)
                trace.steps.append(("rules", ""))
            name, outcome, exception, message = rule.groups()
            if outcome == "pass":
                trace.passed.append(name)
            else:
                trace.failed.append((name, outcome, message or "", exception))
            continue
        for step, pattern in _STEPS:
            found = pattern.match(line)
            if found:
                trace.steps.append((step, ": ".join(found.groups())))
                break
        else:
            trace.steps.append(("note", line))
    if rules_at is not None:
        total = len(trace.passed) + len(trace.failed)
        summary = f"{len(trace.passed)} of {total} passed"
        if trace.failed:
            counts: dict[str, int] = {}
            for _, action, _, _ in trace.failed:
                counts[action] = counts.get(action, 0) + 1
            summary += ", " + ", ".join(f"{n} {a}" for a, n in counts.items())
        trace.steps[rules_at] = ("rules", summary)
    return trace


def render(lines: tuple[str, ...] | list[str], indent: str = "    ") -> list[str]:
    """Readable text of a decision trace (one entry per output line, no newlines).

    The engine's lines are kept verbatim (they already start with their step: ``pool infer-a100:
    taken …``, ``backend: …``), so what users grep for in CI logs is stable; only the rule lines are
    regrouped: failures first with their action, passes folded into one wrapped list.
    """
    trace = parse(lines)
    if not trace.steps:
        return []
    pad = indent + "  "
    sub = pad + "  "
    out = [f"{indent}decision trace:"]
    rules_done = False
    for line in lines:
        if _RULE.match(line):
            if rules_done:
                continue
            rules_done = True
            summary = next(text for step, text in trace.steps if step == "rules")
            out.append(f"{pad}rules: {summary}")
            for rule, action, message, exception in trace.failed:
                via = f" [exception {exception}]" if exception else ""
                out.extend(
                    sub + part
                    for part in textwrap.wrap(
                        f"{action:<5} {rule}: {message}{via}",
                        WIDTH - len(sub),
                        subsequent_indent="      ",
                        break_on_hyphens=False,  # label keys (gpu-admission.io/workload) stay whole
                        break_long_words=False,
                    )
                )
            if trace.passed:
                out.extend(
                    sub + part
                    for part in textwrap.wrap(
                        "pass  " + ", ".join(trace.passed),
                        WIDTH - len(sub),
                        subsequent_indent="      ",
                        break_on_hyphens=False,
                        break_long_words=False,
                    )
                )
            continue
        out.append(f"{pad}{line}")
    return out

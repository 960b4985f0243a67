"""The rule catalogue: which rules exist, their default actions and what each catches, as shipped data.

The policy validates ``rules.<id>`` and exceptions against these ids and documents them; the engine's
check functions register under them and take their default action from here. Keeping the facts in
data (``rules.yaml``) puts them below both, so neither the policy loader nor its schema has to import
the engine to know a rule's name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from types import MappingProxyType

from webhook.actions import Action
from webhook.policy.shipped import load_shipped


@dataclass(frozen=True, slots=True)
class RuleEntry:
    id: str
    default: Action
    catches: str


@cache
def catalog() -> Mapping[str, RuleEntry]:
    """Every shipped rule by id, in the file's order (read once; the file ships with the package)."""
    doc = load_shipped("rules.yaml")
    out: dict[str, RuleEntry] = {}
    for entry in doc["rules"]:
        rule_id = str(entry["id"])
        if rule_id in out:
            raise ValueError(f"rules.yaml: rule {rule_id} listed twice")
        out[rule_id] = RuleEntry(rule_id, Action(entry["default"]), str(entry["catches"]).strip())
    return MappingProxyType(out)

"""``intent-invalid`` in-tree: an unknown class, and intent annotations no reading can make valid.

The engine strips annotation values (Python's ``str.strip``, which removes more than RE2's ``\\s``)
and compares exactly; CEL has no such strip. So each test here is one no stripping can undo: the
value contains no valid spelling at all, or a character that is never whitespace and never part of
a valid value. Only the template's own annotations are read (the engine reads a workload's own
metadata as a fallback; the webhook judges that case alone).
"""

from __future__ import annotations

from webhook.engine.model.intent import OPT_OUT
from webhook.policy.compiled import Policy
from webhook.policy.model import Isolation, TopologyLevel
from webhook.render.intree.cel import cel_list, class_of
from webhook.render.intree.checks import check
from webhook.render.webhooks import cel_string


def declares(policy: Policy, t: str) -> str:
    """Template ``t`` declares a class (its own label, other than the opt-out ``none``)."""
    key = cel_string(policy.keys.workload)
    return (
        f"(has({t}.metadata) && has({t}.metadata.labels) && {key} in {t}.metadata.labels &&\n"
        f"  {t}.metadata.labels[{key}] != {cel_string(OPT_OUT)})"
    )


@check(
    "intent-invalid",
    "unknown-class",
    "the workload label names no class of the policy; use one of the policy's classes",
    over="classed",
    exact=True,
)
def unknown_class(policy: Policy, t: str) -> str:
    return f"!({class_of(policy, t)} in {cel_list(sorted(policy.classes))})"


def _annotation(policy: Policy, t: str, key: str, bad: str) -> str:
    k = cel_string(key)
    return (
        f"(has({t}.metadata) && has({t}.metadata.annotations) && {k} in {t}.metadata.annotations &&\n"
        f"  [{t}.metadata.annotations[{k}]].exists(v, {bad}))"
    )


# a character that is neither an ASCII digit nor anything str.strip() could remove
_NOT_DIGIT = r"v.matches('[!-/:-~]') || !v.matches('[0-9]') || v.matches('^[\\s0]*$') || v.matches('[0-9]{10}')"


def _names(values: list[str]) -> str:
    return "|".join(v.replace(".", "\\\\.").replace("+", "\\\\+") for v in values)


@check(
    "intent-invalid",
    "malformed-intent",
    "an intent annotation (gpus, gang-size, isolation, rdma, topology, pool, gpu-model) has a value "
    "no reading makes valid; see docs/policy.md for the accepted values",
    over="classed",
    exact=True,
)
def malformed(policy: Policy, t: str) -> str:
    keys = policy.keys
    tests = [
        _annotation(policy, t, keys.gpus, _NOT_DIGIT),
        _annotation(policy, t, keys.gang_size, _NOT_DIGIT),
        _annotation(policy, t, keys.isolation, f"!v.matches('{_names([i.value for i in Isolation])}')"),
        _annotation(policy, t, keys.rdma, "!v.matches('(?i)true|false')"),
        _annotation(
            policy, t, keys.topology, f"!v.matches('{_names([level.value for level in TopologyLevel] + ['none'])}')"
        ),
        _annotation(policy, t, keys.pool, f"!v.matches('{_names(sorted(policy.pools))}')" if policy.pools else "true"),
        _annotation(policy, t, keys.gpu_model, f"!v.matches('{_names(sorted(policy.models))}')"),
    ]
    return "(" + " ||\n".join(tests) + ")"

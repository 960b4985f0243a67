"""A raw GPU request (no workload label) pinned to a pool is held to that pool's limits like a class pod:
the count rule and the gang schedulability rule judge it against the pool it was pinned to."""

from __future__ import annotations

from tests.engine.helpers import container, pod, rules, run, violation


def test_a_raw_request_no_node_of_its_pinned_pool_can_hold_is_denied(policy):
    decision = run(policy, pod({}, [container("c", limits={"nvidia.com/gpu": "16"})]))
    assert not decision.allowed
    found = violation(decision, "gpu-count-exceeded")
    assert "16 GPUs per pod can never fit pool infer-a100's 8 GPUs per node" in found.message
    assert decision.mutated["spec"]["nodeSelector"] == {"workload": "gpu-infer"}  # pinned, then judged there


def test_a_raw_request_that_fits_its_pinned_pool_is_only_warned(policy):
    decision = run(policy, pod({}, [container("c", limits={"nvidia.com/gpu": "8"})]))
    assert decision.allowed and rules(decision) == ["raw-gpu-request"]


def test_an_unpinned_raw_request_is_judged_as_before(policy):
    """Where the policy pins nothing (rawRequests: deny), there is no pool to count against."""
    import yaml

    from tests.conftest import POLICIES
    from webhook.policy import load_policy_texts

    doc = yaml.safe_load((POLICIES / "default.yaml").read_text(encoding="utf-8"))
    doc["spec"]["settings"]["rawRequests"] = "deny"
    deny = load_policy_texts([("default.yaml", yaml.safe_dump(doc))])
    decision = run(deny, pod({}, [container("c", limits={"nvidia.com/gpu": "16"})]))
    assert "gpu-count-exceeded" not in rules(decision)

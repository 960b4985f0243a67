"""Within the apiserver's CEL limits: every rendered expression is bounded, and a policy too large is refused.

The bound is ``webhook.render.intree.cost``'s model (an upper bound in cel-go's units for an object as
large as ``BOUNDS`` describes); the limits are the apiserver's (1,000,000 per expression, 10,000,000
per binding, 2,500,000 for match conditions).
"""

from __future__ import annotations

import pytest
import yaml

from tests.conftest import POLICIES
from tests.intree.conftest import NAMES, in_tree
from webhook.cli import main
from webhook.policy import load_policy_texts
from webhook.render.core import RenderOptions
from webhook.render.intree import render
from webhook.render.intree.cost import (
    BINDING_BUDGET,
    BOUNDS,
    MATCH_CONDITIONS_BUDGET,
    PER_CALL_LIMIT,
    TooLarge,
    estimate,
    estimates,
)


def test_every_expression_fits_the_per_call_limit_and_every_binding_its_budget():
    largest = (0, "")
    for name in NAMES:
        for obj in in_tree(name, (1, 36)):
            if "Policy" not in obj["kind"] or "Binding" in obj["kind"]:
                continue
            found = estimates(obj)
            assert found
            for e in found:
                assert e.cost <= PER_CALL_LIMIT, f"{name}: {e.where}: {e.cost:,}"
                largest = max(largest, (e.cost, f"{name}: {e.where}"))
            assert sum(e.cost for e in found if "matchConditions[" in e.where) <= MATCH_CONDITIONS_BUDGET
            assert sum(e.cost for e in found if "matchConditions[" not in e.where) <= BINDING_BUDGET
    print(f"\nlargest in-tree expression: {largest[1]}, estimated cost {largest[0]:,} (limit {PER_CALL_LIMIT:,})")


def test_the_bound_grows_with_what_an_expression_iterates():
    flat = estimate("has(t.spec) && t.spec.nodeName != ''")
    one = estimate("t.spec.containers.exists(c, c.name == 'x')")
    nested = estimate("t.spec.containers.exists(c, c.env.exists(e, e.name == 'x'))")
    assert flat < 20 < one
    assert nested >= BOUNDS["containers"] * BOUNDS["env"]
    assert estimate("[1, 2, 3].exists(x, x == 1)") < one
    assert estimate("x.matches('a')") > estimate("x == 'a'")


def _big_policy(pools: int) -> str:
    doc = yaml.safe_load((POLICIES / "default.yaml").read_text())
    spec = doc["spec"]
    for i in range(pools):
        spec["pools"][f"extra-{i}"] = {
            "gpuModel": "H100-80GB",
            "gpusPerNode": 8,
            "nodeSelector": {f"pool-{i}": "yes"},
            "tolerations": [{"key": f"taint-{i}", "operator": "Exists", "effect": "NoSchedule"}],
        }
        spec["classes"][f"class-{i}"] = {"pools": [f"extra-{i}"], "maxGPUs": 8}
    return yaml.safe_dump(doc)


def test_a_policy_too_large_to_fit_is_refused_with_the_reason(tmp_path, capsys):
    big = load_policy_texts([("big.yaml", _big_policy(150))])
    with pytest.raises(TooLarge) as exc:
        render(big, RenderOptions())
    assert "estimated cost" in str(exc.value) and "per-expression limit" in str(exc.value)
    (tmp_path / "big.yaml").write_text(_big_policy(150))
    assert main(["policy", "render", "--in-tree", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "too large for in-tree enforcement" in captured.err
    assert main(["policy", "render", str(tmp_path)]) == 0  # the webhook's own objects still render


def test_a_policy_a_little_larger_than_the_shipped_one_still_fits():
    render(load_policy_texts([("more.yaml", _big_policy(4))]), RenderOptions())


def test_lint_says_why_the_in_tree_policies_cannot_be_rendered(tmp_path, capsys):
    """A policy beside an in-tree manifest that no longer fits: lint names the expression and the limit."""
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "big.yaml").write_text(_big_policy(150))
    (tmp_path / "manifests" / "in-tree").mkdir(parents=True)
    (tmp_path / "manifests" / "in-tree" / "rendered.yaml").write_text("# rendered from a smaller policy\n")
    assert main(["policy", "lint", "--strict", str(tmp_path / "policies")]) == 1
    out = capsys.readouterr().out
    assert "cannot be rendered from this policy" in out and "per-expression limit" in out, out

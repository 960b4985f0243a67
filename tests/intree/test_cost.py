"""Within the apiserver's CEL limits: every rendered expression is bounded, and a policy too large is refused.

The bound is ``webhook.render.intree.runtimecost``'s (cel-go's runtime charges, as a worst case over the
objects within the documented bounds, ``DOCUMENTED``); the limits are the apiserver's (1,000,000 per
expression, 10,000,000 per binding, 2,500,000 for match conditions).
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

import pytest
import yaml

from tests.conftest import POLICIES
from tests.intree.conftest import NAMES, in_tree
from webhook.cli import main
from webhook.policy import load_policy_texts
from webhook.render.core import RenderOptions
from webhook.render.intree import render
from webhook.render.intree.runtimecost import (
    BINDING_BUDGET,
    DOCUMENTED,
    MATCH_CONDITIONS_BUDGET,
    PER_CALL_LIMIT,
    TooLarge,
    bound,
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
                assert e.own <= PER_CALL_LIMIT, f"{name}: {e.where}: {e.own:,}"
                largest = max(largest, (e.own, f"{name}: {e.where}"))
            assert sum(e.own for e in found if "matchConditions[" in e.where) <= MATCH_CONDITIONS_BUDGET
            assert sum(e.own for e in found if "matchConditions[" not in e.where) <= BINDING_BUDGET
    print(f"\nlargest in-tree expression: {largest[1]}, estimated cost {largest[0]:,} (limit {PER_CALL_LIMIT:,})")


def test_the_bound_grows_with_what_an_expression_iterates():
    flat = bound("has(t.spec) && t.spec.nodeName != ''")
    one = bound("t.spec.containers.exists(c, c.name == 'x')")
    nested = bound("t.spec.containers.exists(c, c.env.exists(e, e.name == 'x'))")
    assert flat < 40 < one
    assert nested >= DOCUMENTED.lists["containers"] * DOCUMENTED.lists["env"]
    assert bound("[1, 2, 3].exists(x, x == 1)") < one
    assert bound("x.matches('a')") > bound("x == 'a'")


def test_a_joint_bound_caps_a_nested_fold_read_through_the_outer_one_only():
    """With at most 100 env entries in the whole object, a fold over each container's env nested in the fold
    over the containers is charged for 100 steps in all, not 16 x 64; a fold nested in a fold over another
    list re-reads the same containers at every step, and is charged for every one of them."""
    joint = dataclasses.replace(DOCUMENTED, totals=MappingProxyType({"env": 100, "containers": 20}))
    free = dataclasses.replace(DOCUMENTED, totals=MappingProxyType({}))
    nested = "t.spec.containers.exists(c, c.env.exists(e, true))"
    # t.spec.containers 3; per container the step 4, c.env 2, the inner fold, its result 1
    assert bound(nested, free) == 3 + 16 * (4 + 2 + 64 * 4 + 1) + 1
    assert bound(nested, joint) == 3 + 16 * (4 + 2 + 7 * 4 + 1) + 1  # ⌈100 / 16⌉ = 7 entries each
    again = "t.spec.tolerations.exists(x, t.spec.containers.exists(c, true))"
    assert bound(again, joint) == bound(again, free) == 3 + 16 * (4 + 3 + 16 * 4 + 1) + 1


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
    big = load_policy_texts([("big.yaml", _big_policy(60))])
    with pytest.raises(TooLarge) as exc:
        render(big, RenderOptions())
    assert "costs up to" in str(exc.value) and "per-expression limit" in str(exc.value)
    (tmp_path / "big.yaml").write_text(_big_policy(60))
    assert main(["policy", "render", "--in-tree", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "too large for in-tree enforcement" in captured.err
    assert main(["policy", "render", str(tmp_path)]) == 0  # the webhook's own objects still render


def test_webhooks_the_apiserver_would_refuse_are_not_rendered(tmp_path, capsys):
    """Past cel-go's parser limit the apiserver rejects the webhook configuration at creation (and the
    install fails half-way): the render says so instead of printing it."""
    (tmp_path / "huge.yaml").write_text(_big_policy(150))
    assert main(["policy", "render", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "too large for the webhooks' matchConditions" in captured.err and "parser would refuse" in captured.err


def test_a_policy_a_little_larger_than_the_shipped_one_still_fits():
    render(load_policy_texts([("more.yaml", _big_policy(4))]), RenderOptions())


@pytest.mark.parametrize(
    ("pools", "manifest", "why"),
    [
        (60, "in-tree", "per-expression limit"),  # the in-tree policies no longer fit
        (150, "base", "parser would refuse"),  # the webhooks' conditions pass cel-go's parser limit
    ],
)
def test_lint_says_why_the_policy_cannot_be_rendered(tmp_path, capsys, pools, manifest, why):
    """A policy beside a committed manifest that it can no longer render: lint names the expression and the
    limit, not only that the manifest is stale."""
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "big.yaml").write_text(_big_policy(pools))
    (tmp_path / "manifests" / manifest).mkdir(parents=True)
    (tmp_path / "manifests" / manifest / "rendered.yaml").write_text("# rendered from a smaller policy\n")
    assert main(["policy", "lint", "--strict", str(tmp_path / "policies")]) == 1
    out = capsys.readouterr().out
    assert "cannot be rendered from this policy" in out and why in out, out

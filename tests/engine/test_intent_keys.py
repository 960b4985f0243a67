"""intent-unknown-key: a key under the intent prefix that no intent reads, or on the wrong side, is a
warning naming the key meant, never silently ignored (and never a reason to skip the object)."""

from __future__ import annotations

import copy

import pytest
import yaml

from tests.conftest import POLICIES
from tests.engine.helpers import container, intent, job, pod, rules, run, violation
from webhook.engine import Request, report
from webhook.engine.model.decision import Action
from webhook.policy import load_policy_texts

RULE = "intent-unknown-key"


def _pod(labels: dict | None = None, annotations: dict | None = None) -> dict:
    meta = {k: v for k, v in (("labels", labels), ("annotations", annotations)) if v}
    return pod(meta, [container()])


def test_a_typo_names_the_key_meant_and_the_class_default_applies(policy):
    obj = _pod({"gpu-admission.io/workload": "inference"}, {"gpu-admission.io/gpu-mem": "12Gi"})
    decision = run(policy, obj)
    found = violation(decision, RULE)
    assert found.action is Action.WARN and decision.allowed
    assert found.path == "metadata.annotations[gpu-admission.io/gpu-mem]"
    assert "did you mean gpu-admission.io/gpu-memory?" in found.message
    limits = decision.mutated["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/mig-1g.5gb": "1"}  # 12Gi was not read: the class default (5Gi)
    (warning,) = [w for w in decision.warnings if RULE in w]
    assert warning.startswith(f"[{RULE}] did you mean gpu-admission.io/gpu-memory?") and len(warning) <= 120


def test_the_workload_key_as_an_annotation_is_judged_not_skipped(policy):
    decision = run(policy, _pod(annotations={"gpu-admission.io/workload": "dev"}))
    assert decision.relevant and decision.allowed and rules(decision) == [RULE]
    found = violation(decision, RULE)
    assert found.message.endswith("; move gpu-admission.io/workload to metadata.labels")


def test_an_annotation_key_as_a_label(policy):
    obj = _pod({"gpu-admission.io/workload": "training", "gpu-admission.io/gpus": "8"})
    found = violation(run(policy, obj, training=True), RULE)
    assert found.path == "metadata.labels[gpu-admission.io/gpus]"
    assert "move gpu-admission.io/gpus to metadata.annotations" in found.message


def test_a_key_like_one_of_the_other_side_says_so(policy):
    found = violation(run(policy, _pod(annotations={"gpu-admission.io/workloads": "dev"})), RULE)
    assert "did you mean gpu-admission.io/workload (in metadata.labels)?" in found.message


def test_a_key_like_none_lists_the_intent_keys(policy):
    found = violation(run(policy, _pod({"gpu-admission.io/workload": "dev"}, {"gpu-admission.io/zzzq": "1"})), RULE)
    assert "intent keys under gpu-admission.io/: workload (label), container, gang" in found.message


def test_job_level_and_template_keys_name_their_own_paths(policy):
    obj = job(
        {**intent("training"), "annotations": {"gpu-admission.io/gang-sise": "2"}},
        [container()],
        job_meta={"annotations": {"gpu-admission.io/topolgy": "node"}},
    )
    decision = run(policy, obj, training=True)
    paths = sorted(v.path for v in decision.violations if v.rule == RULE)
    assert paths == [
        "metadata.annotations[gpu-admission.io/topolgy]",
        "spec.template.metadata.annotations[gpu-admission.io/gang-sise]",
    ]


def test_intent_keys_other_domains_and_other_prefixes_are_not_findings(policy):
    obj = _pod(
        {"gpu-admission.io/workload": "dev", "x.gpu-admission.io/workload": "a", "app": "nb"},
        {"gpu-admission.io/gpu-memory": "4Gi", "gpu-admission.iox/gpus": "1", "example.com/gpu-mem": "4Gi"},
    )
    assert RULE not in rules(run(policy, obj))
    assert not report(policy, Request(_pod({"app": "nb"}, {"note": "x"}))).relevant  # a plain pod stays skipped


def _with_rules(rules_block: dict, prefix: str | None = None):
    doc = yaml.safe_load((POLICIES / "default.yaml").read_text(encoding="utf-8"))
    doc["spec"].setdefault("rules", {}).update(rules_block)
    if prefix:
        doc["spec"]["settings"]["prefix"] = prefix
    return load_policy_texts([("default.yaml", yaml.safe_dump(doc))])


@pytest.mark.parametrize(("action", "allowed"), [("deny", False), ("off", True)])
def test_the_action_is_the_policys(action, allowed):
    policy = _with_rules({RULE: {"action": action}})
    decision = report(policy, Request(_pod({"gpu-admission.io/workload": "dev"}, {"gpu-admission.io/gpu-mem": "4Gi"})))
    assert decision.allowed is allowed and (RULE in rules(decision)) is (action == "deny")


def test_a_policy_prefix_is_the_one_judged():
    policy = _with_rules({}, prefix="gpus.example.com")
    obj = _pod({"gpus.example.com/workload": "dev"}, {"gpus.example.com/gpu-mem": "4Gi", "gpu-admission.io/x": "1"})
    (found,) = [v for v in report(policy, Request(obj)).violations if v.rule == RULE]
    assert "did you mean gpus.example.com/gpu-memory?" in found.message


def test_an_update_is_not_held_to_a_typo_the_stored_object_had(policy):
    old = _pod({"gpu-admission.io/workload": "dev"}, {"gpu-admission.io/gpu-mem": "4Gi"})
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["app"] = "nb"
    assert RULE not in rules(report(policy, Request(new, operation="UPDATE", old_object=old)))
    new["metadata"]["annotations"]["gpu-admission.io/gpu-modle"] = "A10"
    assert RULE in rules(report(policy, Request(new, operation="UPDATE", old_object=old)))

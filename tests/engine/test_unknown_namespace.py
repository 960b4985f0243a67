"""A namespace the edge could not find is never judged by the catch-all entitlement.

With the shipped policy an unlabelled namespace may train (``everyone-else``); a serving-only one may
not. A namespace whose labels are unknown (``Cluster.unknown_namespaces``, set by the server after a
cache miss and a failed GET) must not get the catch-all's grant: every GPU object there is denied at
``/validate`` and left unmutated at ``/mutate``.
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import POLICIES
from tests.engine.helpers import container, intent, pod, rules, vcjob
from webhook.engine import Request, explain, mutate, report
from webhook.engine.model.cluster import Cluster
from webhook.policy import load_policy

GHOST = Cluster(unknown_namespaces=frozenset({"ghost"}))


def training_job() -> dict:
    return vcjob(intent("training", gpus=8), replicas=4, min_available=4)


def test_the_catch_all_would_admit_it(policy):
    assert report(policy, Request(training_job(), namespace="ghost")).allowed  # what the unknown namespace got before


def test_a_gpu_object_in_an_unknown_namespace_is_denied_and_says_retry(policy):
    decision = report(policy, Request(training_job(), namespace="ghost", cluster=GHOST))
    assert not decision.allowed and rules(decision) == ["class-not-allowed"]
    (v,) = decision.violations
    assert v.path == "metadata.namespace" and v.message.startswith("namespace ghost unknown, retry")
    assert decision.patch == ()


def test_mutate_leaves_it_alone(policy):
    decision = mutate(policy, Request(training_job(), namespace="ghost", cluster=GHOST))
    assert decision.patch == () and decision.violations == () and decision.relevant


def test_raw_gpu_requests_and_updates_are_denied_too(policy):
    raw = pod(containers=[container(limits={"nvidia.com/gpu": "1"})])
    assert rules(report(policy, Request(raw, namespace="ghost", cluster=GHOST))) == ["class-not-allowed"]
    old = training_job()
    new = training_job()
    new["metadata"]["labels"] = {"team": "b"}
    update = report(policy, Request(new, namespace="ghost", cluster=GHOST, operation="UPDATE", old_object=old))
    assert not update.allowed, "the old object's identical finding must not cancel the update's"


def test_only_the_unknown_namespace_and_only_gpu_objects(policy):
    assert report(policy, Request(training_job(), namespace="research", cluster=GHOST)).allowed
    cpu = report(policy, Request(pod(), namespace="ghost", cluster=GHOST))
    assert cpu.allowed and not cpu.relevant


def test_exemptions_cannot_select_an_unknown_namespace_class_overrides_apply(tmp_path: Path):
    text = (POLICIES / "default.yaml").read_text()
    text = text.replace(
        "  rules:\n",
        "  rules:\n"
        "    class-not-allowed:\n"
        "      classes: {dev: warn}\n"
        "      exempt:\n"
        "        - matchExpressions: [{key: gpu-admission.io/tier, operator: DoesNotExist}]\n",
        1,
    )
    (tmp_path / "p.yaml").write_text(text)
    policy = load_policy(tmp_path)
    denied = report(policy, Request(training_job(), namespace="ghost", cluster=GHOST))
    assert not denied.allowed  # the exemption matches unlabelled namespaces, and this one is not known to be
    dev = pod(intent("dev", gpu_memory="4Gi"))
    warned = report(policy, Request(dev, namespace="ghost", cluster=GHOST))
    assert warned.allowed and [v.action.value for v in warned.violations] == ["warn"]


def test_explain_says_why(policy):
    decision = explain(policy, Request(training_job(), namespace="ghost", cluster=GHOST))
    assert any("unknown" in line for line in decision.explanation)

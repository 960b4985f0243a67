"""Values written to make the engine raise are judged, not crashed on (the engine's side of fail-closed).

An exception at ``/validate`` is denied by the server (``engine-error``), but an input that can make
the engine raise is still a bug: every such input here must become an ordinary finding with a path.
Each case raised ``ValueError``/``RecursionError`` before the engine bounded what it reads.
"""

from __future__ import annotations

import pytest

from tests.engine.helpers import container, intent, pod, rules, run, violation
from webhook.engine import Stage

# str.isdigit() is true of each; int() takes some (Arabic-Indic, fullwidth, Bengali), not all
UNICODE_DIGITS = ["²", "\u0663", "\uff11", "\u09ea", "1²"]
HUGE = "9" * 5000  # int() refuses more than 4300 digits


@pytest.mark.parametrize("value", [*UNICODE_DIGITS, HUGE, "1" + "0" * 40])
@pytest.mark.parametrize("key", ["gpus", "gang_size"])
def test_intent_integers_are_short_ascii_digits(policy, key, value):
    extra = {"gang": "g"} if key == "gang_size" else {}
    decision = run(policy, pod(intent("inference", **{key: value}, **extra)), training=True)
    found = violation(decision, "intent-invalid")
    assert found.path == f"metadata.annotations[gpu-admission.io/{key.replace('_', '-')}]"
    assert "ASCII digits" in found.message
    assert len(found.message) < 200, "the message quotes the value, not all 5000 digits of it"
    assert not decision.allowed


def test_the_superscript_that_disabled_every_check_is_judged_with_the_rest(policy):
    """The issue's attack: a privileged, non-entitled pod with nodeName and ``gpus: "²"``."""
    obj = pod(
        intent("training", gpus="²"),
        [container(securityContext={"privileged": True})],
        nodeName="gpu-node-1",
    )
    decision = run(policy, obj, labels={"gpu-admission.io/tier": "serving"})
    assert not decision.allowed
    assert {"intent-invalid", "class-not-allowed"} <= set(rules(decision))


def test_a_gpu_memory_of_thousands_of_digits_is_intent_invalid(policy):
    decision = run(policy, pod(intent("inference", gpu_memory=HUGE + "Gi")), training=True)
    assert "intent-invalid" in rules(decision)
    assert not decision.allowed


@pytest.mark.parametrize("as_received", [False, True])
def test_a_gpu_resource_of_thousands_of_digits_is_denied(policy, as_received):
    obj = pod(None, [container(limits={"nvidia.com/gpu": HUGE})])
    decision = run(policy, obj, training=True, stage=Stage.STORED if as_received else Stage.MANIFEST)
    assert not decision.allowed
    assert "extended-resource" in rules(decision)


@pytest.mark.parametrize("depth", [100, 1000, 100_000])
def test_a_multus_annotation_nested_deep_is_intent_invalid(policy, depth):
    meta = intent("training", gpus=8)
    meta["annotations"]["k8s.v1.cni.cncf.io/networks"] = "[" * depth + "]" * depth
    decision = run(policy, pod(meta, [container()]), training=True)
    found = violation(decision, "intent-invalid")
    assert found.path == "metadata.annotations[k8s.v1.cni.cncf.io/networks]"
    assert "nested" in found.message
    assert not decision.allowed


def test_a_multus_entry_with_a_nested_name_is_intent_invalid(policy):
    meta = intent("training", gpus=8)
    meta["annotations"]["k8s.v1.cni.cncf.io/networks"] = '[{"name": ' + "[" * 900 + "]" * 900 + "}]"
    decision = run(policy, pod(meta, [container()]), training=True)
    assert "intent-invalid" in rules(decision)
    assert not decision.allowed


# --- the policy cannot weaken engine-error -------------------------------------------------------------

HEAD = "apiVersion: gpu-admission.io/v1\nkind: GPUPolicy\nspec:\n"


@pytest.mark.parametrize(
    "setting",
    [
        "{action: off}",
        "{action: deny}",
        "{action: warn}",
        "{exempt: [{matchLabels: {team: a}}]}",
        "{namespaces: [{selector: {matchLabels: {team: a}}, action: audit}]}",
        "{classes: {inference: off}}",
    ],
)
def test_the_policy_may_not_turn_engine_error_off(setting):
    from tests.conftest import POLICIES
    from webhook.policy import PolicyError, load_policy_texts

    texts = [(str(p), p.read_text()) for p in sorted(POLICIES.glob("*.yaml"))]
    extra = HEAD + f"  rules:\n    engine-error: {setting}\n"
    with pytest.raises(PolicyError) as exc:
        load_policy_texts([*texts, ("zz-override.yaml", extra)])
    (issue,) = [i for i in exc.value.issues if "engine-error" in i.message]
    assert issue.file == "zz-override.yaml" and issue.line == 5
    assert "cannot be configured" in issue.message and "settings.failure" in issue.message

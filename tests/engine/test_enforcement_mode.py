"""``settings.enforcement`` (enforce | warn | audit) and ``settings.mutation`` (apply | off) in the engine.

The observe-first rollout: under ``warn`` or ``audit`` no rule denies, and every finding whose rule says
``deny`` is still on the record, marked ``would_deny``, so the platform team sees what ``enforce`` would
refuse. An attacker's objects (privileged, non-entitled, nodeName) are the test: under observe modes
they are admitted, never silently.
"""

from __future__ import annotations

from datetime import date

import pytest
import yaml

from tests.conftest import DEFAULT_POLICY_DIR, SERVING_NS
from tests.engine.helpers import container, intent, pod, run
from webhook.engine import Stage, explain, mutate, validate
from webhook.engine.model.decision import Action
from webhook.engine.model.request import Request, Requester
from webhook.policy import load_policy_texts
from webhook.policy.loader import PolicyError


def with_settings(**settings: object):
    """The shipped default with ``settings`` merged in, loaded the way ``serve`` loads a directory."""
    doc = yaml.safe_load((DEFAULT_POLICY_DIR / "default.yaml").read_text())
    doc["spec"]["settings"].update(settings)
    return load_policy_texts([("default.yaml", yaml.safe_dump(doc))])


def attack() -> dict:
    """A serving namespace's training pod: privileged, pinned to a node, asking 16 GPUs."""
    return pod(intent("training", gpus=16), [container(securityContext={"privileged": True})], nodeName="gpu-node-1")


@pytest.fixture(scope="module")
def warn_policy():
    return with_settings(enforcement="warn")


@pytest.fixture(scope="module")
def audit_policy():
    return with_settings(enforcement="audit")


def test_enforce_is_the_default_and_denies(policy):
    assert policy.settings.enforcement == "enforce"
    assert policy.settings.mutation == "apply"
    decision = run(policy, attack(), labels=SERVING_NS)
    assert not decision.allowed
    assert not decision.would_deny, "enforce denies: nothing is merely 'would deny'"


@pytest.mark.parametrize(("mode", "action"), [("warn", Action.WARN), ("audit", Action.AUDIT)])
def test_observe_modes_admit_the_attack_on_the_record(policy, mode, action):
    enforcing = run(policy, attack(), labels=SERVING_NS)
    observed = run(with_settings(enforcement=mode), attack(), labels=SERVING_NS)
    assert observed.allowed
    assert not observed.denials
    # every finding enforce denies is still there, with the mode's action, marked would-deny
    assert {(v.rule, v.path, v.message) for v in observed.would_deny} == {
        (v.rule, v.path, v.message) for v in enforcing.denials
    }
    assert {"class-not-allowed", "privileged-gpu", "node-name-set"} <= {v.rule for v in observed.would_deny}
    assert all(v.action is action for v in observed.would_deny)


def test_warn_mode_shows_each_would_be_denial_as_an_admission_warning(warn_policy):
    decision = run(warn_policy, attack(), labels=SERVING_NS)
    assert any(w.startswith("[privileged-gpu, would deny] ") for w in decision.warnings)
    assert all(len(w) <= 120 for w in decision.warnings)
    annotations = decision.audit_annotations
    assert annotations["node-name-set"].endswith("[would deny]")


def test_audit_mode_shows_the_user_nothing_and_records_everything(audit_policy):
    decision = run(audit_policy, attack(), labels=SERVING_NS)
    enforce_warnings = {v.rule for v in decision.violations if v.action is Action.WARN}
    assert not any("would deny" in w for w in decision.warnings), "audit mode shows no would-deny warning"
    assert not enforce_warnings & {v.rule for v in decision.would_deny}
    assert "[would deny]" in decision.audit_annotations["class-not-allowed"]


def test_warn_rules_stay_warnings_under_audit_mode(audit_policy, policy):
    """The mode caps deny only: a rule the policy says warns still warns (not 'would deny')."""
    obj = pod(intent("inference", gpu_memory="4Gi"))  # inference-not-guaranteed: warn
    decision = run(audit_policy, obj)
    found = [v for v in decision.violations if v.rule == "inference-not-guaranteed"]
    assert found and found[0].action is Action.WARN and not found[0].would_deny
    assert decision.warnings == run(policy, obj).warnings


def test_an_exception_is_not_a_would_be_denial(tmp_path):
    """An excepted finding is admitted under every mode: reporting it as 'would deny' would be false."""
    doc = yaml.safe_load((DEFAULT_POLICY_DIR / "default.yaml").read_text())
    doc["spec"]["settings"]["enforcement"] = "audit"
    doc["spec"]["exceptions"] = [
        {
            "name": "pinned",
            "rules": ["node-name-set"],
            "namespaces": {},
            "subjects": [{"kind": "User", "name": "alice"}],
            "expires": "2099-01-01",
            "reason": "debugging a node",
            "owner": "platform",
        }
    ]
    excepting = load_policy_texts([("default.yaml", yaml.safe_dump(doc))])
    obj = pod(intent("inference", gpu_memory="4Gi"), nodeName="gpu-node-1")
    decision = run(excepting, obj, requester=Requester("alice", ()), today=date(2026, 1, 1))
    found = [v for v in decision.violations if v.rule == "node-name-set"]
    assert found and found[0].exception == "pinned" and not found[0].would_deny


def test_malformed_objects_follow_the_mode(warn_policy):
    obj = pod(intent("inference", gpu_memory="4Gi"))
    obj["spec"]["containers"] = "not a list"
    decision = validate(warn_policy, Request(obj, operation="CREATE", namespace="team-a", stage=Stage.STORED))
    assert decision.allowed
    assert "malformed-object" in {v.rule for v in decision.would_deny}


def test_the_trace_says_would_deny_and_the_mode(warn_policy):
    decision = run(warn_policy, attack(), labels=SERVING_NS, entry=explain)
    (line,) = [line for line in decision.explanation if line.startswith("rule node-name-set: ")]
    assert line.startswith("rule node-name-set: warn: ") and line.endswith(" [would deny: enforcement warn]")
    from webhook.check.explain import parse

    failed = {rule: (action, message) for rule, action, message, _ in parse(decision.explanation).failed}
    assert failed["node-name-set"][0] == "warn" and failed["node-name-set"][1].endswith(
        "[would deny: enforcement warn]"
    )


def test_mutation_off_gives_no_patch(policy):
    off = with_settings(mutation="off")
    obj = pod(intent("inference", gpu_memory="4Gi"))
    request = Request(obj, operation="CREATE", namespace="team-a", stage=Stage.MANIFEST)
    assert mutate(policy, request).patch, "the default mutates"
    assert mutate(off, request).patch == ()


def test_mutation_off_reads_yaml_off():
    doc = yaml.safe_load((DEFAULT_POLICY_DIR / "default.yaml").read_text())
    text = yaml.safe_dump(doc).replace("failure: allow", "failure: allow\n    mutation: off\n    enforcement: audit")
    loaded = load_policy_texts([("default.yaml", text)])
    assert loaded.settings.mutation == "off"


def test_an_unknown_mode_is_refused_with_where_and_what():
    with pytest.raises(PolicyError) as caught:
        with_settings(enforcement="dryrun")
    text = str(caught.value)
    assert "enforcement" in text and "enforce" in text and "audit" in text


def stored(policy, obj: dict, labels: dict | None = None):
    """``/validate`` of a CREATE: the object as the apiserver will store it."""
    return validate(
        policy, Request(obj, operation="CREATE", namespace="team-a", namespace_labels=labels, stage=Stage.STORED)
    )


def test_mutation_off_under_enforce_denies_the_unplaced_class_pod():
    """Nothing placed it, so it can land on any pool: enforce stays fail-closed (placement-missing)."""
    decision = stored(with_settings(mutation="off"), pod(intent("inference", gpu_memory="4Gi")))
    assert not decision.allowed
    assert "placement-missing" in {v.rule for v in decision.denials}


@pytest.mark.parametrize("mode", ["warn", "audit"])
def test_mutation_off_in_observe_mode_records_what_enforce_would_deny_not_every_class_pod(mode):
    observing = with_settings(mutation="off", enforcement=mode)
    plain = stored(observing, pod(intent("inference", gpu_memory="4Gi")))
    assert plain.allowed
    assert not plain.would_deny, "an ordinary class pod is not 'would deny' just because mutation is off"
    hostile = stored(observing, attack(), labels=SERVING_NS)
    assert hostile.allowed
    assert {"class-not-allowed", "privileged-gpu", "node-name-set"} <= {v.rule for v in hostile.would_deny}
    assert "placement-missing" not in {v.rule for v in hostile.violations}


def test_check_sees_mutation_off_as_the_cluster_does():
    """Offline (``report``, the manifest stage) agrees with /validate: no patch, and under enforce the
    unplaced pod that the cluster will deny."""
    off = with_settings(mutation="off")
    decision = run(off, pod(intent("inference", gpu_memory="4Gi")))
    assert decision.patch == ()
    assert "placement-missing" in {v.rule for v in decision.denials}

"""A namespace entitled only to a shared pool of a MIG-default class.

The class's default isolation (``mig``) is served by a pool the namespace may not use; the pool it may
use serves ``shared``. Without a say for the entitlement, every pod of the class that names no isolation
is denied there, lint is silent, and the denial does not say what to add. Now the entitlement decides
the isolation its pods get when they say nothing (``defaultIsolation``), lint warns when a class's
default cannot be served by any pool an entitlement leaves it, and the denial names both fixes.
"""

from __future__ import annotations

import pytest

from tests.engine.helpers import container, intent, limits, pod, rules, run
from webhook.lint.checks import policy_warnings
from webhook.policy.loader import PolicyError, load_policy_texts

POLICY = """\
apiVersion: gpu-admission.io/v1
kind: GPUPolicy
spec:
  pools:
    infer-mig:
      gpuModel: A100-40GB
      gpusPerNode: 8
      nodeSelector: {pool: mig}
      isolation: [mig]
      mig: {strategy: mixed}
    infer-shared:
      gpuModel: A10
      gpusPerNode: 4
      nodeSelector: {pool: shared}
      isolation: [shared]
      sharing: {provider: aliyun-cgpu}
  classes:
    inference:
      pools: [infer-mig, infer-shared]
      isolation: {default: mig, allowed: [mig, shared]}
      defaultGPUMemory: 4Gi
  namespaces:
    - name: shared-only
      selector: {matchLabels: {tier: shared}}
      classes: [inference]
      pools: [infer-shared]
{extra}    - name: everyone
      selector: {}
      classes: [inference]
"""

SHARED_NS = {"tier": "shared"}


def _policy(extra: str = ""):
    return load_policy_texts([("p.yaml", POLICY.replace("{extra}", extra))])


def test_the_denial_names_the_fix(tmp_path):
    d = run(_policy(), pod(intent("inference"), [container()]), labels=SHARED_NS)
    assert not d.allowed
    message = " ".join(v.message for v in d.violations)
    assert "gpu-admission.io/isolation: shared" in message, message
    assert "defaultIsolation" in message and "shared-only" in message, message


def test_lint_warns_when_an_entitlement_leaves_a_class_no_pool_for_its_default():
    found = [w for w in policy_warnings(_policy()) if w.code == "entitlement-default-unserved"]
    assert found, [w.code for w in policy_warnings(_policy())]
    assert found[0].loc[:2] == ("namespaces", 0)
    assert "inference" in found[0].message and "mig" in found[0].message
    assert "defaultIsolation" in found[0].hint


DEFAULTED = POLICY.replace(
    "      pools: [infer-shared]\n", "      pools: [infer-shared]\n      defaultIsolation: {inference: shared}\n"
)


def test_the_entitlement_decides_the_isolation_of_pods_that_say_nothing():
    policy = load_policy_texts([("p.yaml", DEFAULTED.replace("{extra}", ""))])
    d = run(policy, pod(intent("inference"), [container()]), labels=SHARED_NS)
    assert d.allowed, [v.render() for v in d.violations]
    assert limits(d.mutated) == {"aliyun.com/gpu-mem": "4"}
    assert not [w for w in policy_warnings(policy) if w.code == "entitlement-default-unserved"]
    # other namespaces keep the class default, and a pod that says mig is still judged as mig
    other = run(policy, pod(intent("inference"), [container()]), labels={})
    assert "nvidia.com/mig-1g.5gb" in limits(other.mutated)
    said = run(policy, pod(intent("inference", isolation="mig"), [container()]), labels=SHARED_NS)
    assert not said.allowed and "class-not-allowed" in rules(said)


@pytest.mark.parametrize(
    ("value", "said"),
    [("{inference: exclusive}", "class 'inference' allows"), ("{training: shared}", "unknown class 'training'")],
)
def test_a_default_the_class_does_not_allow_is_a_load_error(value, said):
    text = POLICY.replace("{extra}", "").replace(
        "      pools: [infer-shared]\n", f"      pools: [infer-shared]\n      defaultIsolation: {value}\n"
    )
    with pytest.raises(PolicyError) as err:
        load_policy_texts([("p.yaml", text)])
    assert said in str(err.value)


def test_the_stored_pod_is_judged_with_the_entitlement_default():
    from webhook.engine import Stage

    policy = load_policy_texts([("p.yaml", DEFAULTED.replace("{extra}", ""))])
    d = run(policy, pod(intent("inference"), [container()]), labels=SHARED_NS)
    stored = run(policy, d.mutated, labels=SHARED_NS, stage=Stage.STORED)
    assert stored.allowed, [v.render() for v in stored.violations]

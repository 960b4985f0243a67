"""The rule catalogue, rule by rule: a failing case (rule id, action, path, message parts) and a passing case."""

from __future__ import annotations

import pytest

from tests.conftest import SERVING_NS
from tests.engine.helpers import container, intent, job, pod, rules, run, vcjob, violation
from webhook.engine.model.decision import Action
from webhook.engine.rules import RULES
from webhook.policy import load_policy_texts

GPU1 = {"nvidia.com/gpu": "1"}


def test_every_spec_rule_is_registered_with_its_default_action():
    spec = {
        "intent-invalid": "deny",
        "class-not-allowed": "deny",
        "extended-resource": "deny",
        "mig-profile-unavailable": "deny",
        "gpu-kind-mixed": "deny",
        "gpu-count-exceeded": "deny",
        "gpu-memory-exceeded": "deny",
        "gang-required": "deny",
        "gang-incomplete": "deny",
        "gang-unschedulable": "deny",
        "rdma-unavailable": "deny",
        "pool-spoofing": "deny",
        "privileged-gpu": "deny",
        "node-name-set": "deny",
        "raw-gpu-request": "warn",
        "whole-gpu-waste": "warn",
        "inference-not-guaranteed": "warn",
        "claim-unresolved": "warn",
        "workload-invalid": "deny",
        "placement-missing": "deny",
        "scheduling-not-allowed": "deny",
    }
    assert {k: v.default.value for k, v in RULES.items() if k in spec} == spec
    # beyond the table: input hygiene, and the Kubernetes 1.36 DRA checks the DRA section asks for
    # without naming them (device taints, the scheduler's claim marker, capacity, ComputeDomains)
    beyond = {
        "unknown-field": None,
        "malformed-object": None,
        "intent-unknown-key": "warn",
        "device-taint-tolerated": "deny",
        "scheduler-claim-forged": "deny",
        "claim-capacity-unsatisfiable": "deny",
        "compute-domain-invalid": "deny",
        "compute-domain-num-nodes": "warn",
    }
    assert set(RULES) - set(spec) == set(beyond)
    assert {k: RULES[k].default.value for k, v in beyond.items() if v} == {k: v for k, v in beyond.items() if v}


# --- intent-invalid --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("meta", "path", "part"),
    [
        (intent("inference", gpus="two"), "metadata.annotations[gpu-admission.io/gpus]", "integer >= 1"),
        (intent("inference", gpu_memory="4"), "metadata.annotations[gpu-admission.io/gpu-memory]", "no unit"),
        (
            intent("inference", gpu_memory="4GB"),
            "metadata.annotations[gpu-admission.io/gpu-memory]",
            "not a Kubernetes quantity",
        ),
        (intent("inferense"), "metadata.labels[gpu-admission.io/workload]", "unknown workload class 'inferense'"),
        (
            intent("inference", isolation="vgpu"),
            "metadata.annotations[gpu-admission.io/isolation]",
            "shared, mig or exclusive",
        ),
        (
            intent("inference", gpu_model="A100"),
            "metadata.annotations[gpu-admission.io/gpu-model]",
            "unknown GPU model 'A100'",
        ),
        (intent("inference", pool="nope"), "metadata.annotations[gpu-admission.io/pool]", "unknown pool 'nope'"),
        (
            intent("inference", topology="rack:preferred"),
            "metadata.annotations[gpu-admission.io/topology]",
            "node, switch, rack, zone or none",
        ),
        (
            intent("inference", container="sidecar"),
            "metadata.annotations[gpu-admission.io/container]",
            "no container named 'sidecar'",
        ),
        (
            intent("inference", isolation="shared"),
            "metadata.annotations[gpu-admission.io/isolation]",
            "allows isolation mig/exclusive",
        ),
    ],
)
def test_intent_invalid(policy, meta, path, part):
    d = run(policy, pod(meta))
    v = violation(d, "intent-invalid")
    assert v.path == path and part in v.message and v.action is Action.DENY and not d.allowed


def test_intent_invalid_lists_all_mistakes_at_once(policy):
    d = run(policy, pod(intent("inference", gpus="x", gpu_memory="y", rdma="maybe")))
    assert len([v for v in d.violations if v.rule == "intent-invalid"]) == 3
    assert d.message.count("[intent-invalid]") == 3


def test_valid_intent_passes(policy):
    d = run(policy, pod(intent("inference", gpu_memory="4Gi", gpus="1", topology="none", rdma="false")))
    assert "intent-invalid" not in rules(d) and d.allowed


# --- class-not-allowed ------------------------------------------------------------------------------


def test_class_not_allowed_outside_entitlement(policy):
    d = run(policy, pod(intent("training", gpus=8)), labels=SERVING_NS)
    v = violation(d, "class-not-allowed")
    assert "namespace 'team-a' is not entitled to class 'training'" in v.message
    assert v.path == "metadata.labels[gpu-admission.io/workload]"
    assert "class-not-allowed" not in rules(run(policy, pod(intent("training", gpus=8)), training=True))


def test_pool_outside_namespace_pool_list():
    policy = load_policy_texts(
        [
            (
                "p.yaml",
                """
apiVersion: gpu-admission.io/v1
kind: GPUPolicy
spec:
  pools:
    a: {gpuModel: H100-80GB, gpusPerNode: 8, nodeSelector: {p: a}}
    b: {gpuModel: H100-80GB, gpusPerNode: 8, nodeSelector: {p: b}}
  classes:
    train: {pools: [a, b]}
  namespaces:
    - {selector: {}, classes: [train], pools: [b]}
""",
            )
        ]
    )
    d = run(policy, pod(intent("train", pool="a")))
    assert "class-not-allowed" in rules(d)
    ok = run(policy, pod(intent("train")))
    assert ok.mutated["spec"]["nodeSelector"] == {"p": "b"} and ok.allowed


# --- extended-resource ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("res", "part"),
    [
        ({"limits": {"nvidia.com/gpu": "0.5"}}, "whole, non-negative"),
        ({"limits": {"nvidia.com/gpu": "500m"}}, "whole, non-negative"),
        ({"limits": {"nvidia.com/gpu": "2"}, "requests": {"nvidia.com/gpu": "1"}}, "must equal its limit"),
        ({"requests": {"nvidia.com/gpu": "1"}}, "requested without a limit"),
        ({"limits": {"rdma/hca": "1", "nvidia.com/gpu": "1"}, "requests": {"rdma/hca": "2"}}, "must equal its limit"),
    ],
)
def test_extended_resource(policy, res, part):
    c = container(**{"resources": res})
    d = run(policy, pod({}, [c]))
    v = violation(d, "extended-resource")
    assert part in v.message and v.path.startswith("spec.containers[0].resources")


def test_extended_resource_passes_for_equal_whole_values(policy):
    c = container(limits={"nvidia.com/gpu": 2}, requests={"nvidia.com/gpu": "2"})
    assert "extended-resource" not in rules(run(policy, pod({}, [c])))


# --- mig-profile-unavailable -----------------------------------------------------------------------------


def test_mig_profile_not_offered_by_the_targeted_pool(policy):
    c = container(limits={"nvidia.com/mig-3g.40gb": "1"})
    d = run(policy, pod({}, [c], nodeSelector={"workload": "gpu-infer"}))
    v = violation(d, "mig-profile-unavailable")
    assert "pool infer-a100 (A100-40GB) does not offer nvidia.com/mig-3g.40gb" in v.message
    assert "nvidia.com/mig-1g.5gb" in v.message  # lists the valid ones


def test_mig_profile_unknown_everywhere(policy):
    d = run(policy, pod({}, [container(limits={"nvidia.com/mig-1g.99gb": "1"})]))
    assert (
        "no GPU model in the catalog offers nvidia.com/mig-1g.99gb" in violation(d, "mig-profile-unavailable").message
    )


def test_mig_profile_of_the_chapter_is_fine(policy):
    d = run(policy, pod({}, [container(limits={"nvidia.com/mig-1g.5gb": "1"})]))
    assert "mig-profile-unavailable" not in rules(d)


# --- gpu-kind-mixed ----------------------------------------------------------------------------------------


def test_whole_and_mig_in_one_container(policy):
    d = run(policy, pod({}, [container(limits={"nvidia.com/gpu": "1", "nvidia.com/mig-1g.5gb": "1"})]))
    assert "mixes device kinds" in violation(d, "gpu-kind-mixed").message


def test_two_mig_devices_in_one_container(policy):
    d = run(policy, pod({}, [container(limits={"nvidia.com/mig-1g.5gb": "2"})]))
    assert "2 MIG devices" in violation(d, "gpu-kind-mixed").message


def test_hami_gpu_plus_gpumem_is_not_mixed(policy):
    d = run(policy, pod({}, [container(limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"})]))
    assert "gpu-kind-mixed" not in rules(d)


# --- gpu-count-exceeded -----------------------------------------------------------------------------------


def test_gpu_count_above_node_size(policy):
    d = run(policy, pod(intent("training", gpus=16)), training=True)
    v = violation(d, "gpu-count-exceeded")
    assert "16 GPUs per pod > 8 per node" in v.message


def test_gpu_count_above_class_max(policy):
    d = run(policy, pod(intent("inference", isolation="exclusive", gpus=4)))
    assert "exceed class 'inference''s maximum of 2" in violation(d, "gpu-count-exceeded").message


def test_raw_pod_above_targeted_pool_node_size(policy):
    d = run(policy, pod({}, [container(limits={"nvidia.com/gpu": "9"})], nodeSelector={"workload": "gpu-infer"}))
    assert "pool infer-a100's 8 GPUs per node" in violation(d, "gpu-count-exceeded").message


def test_gpu_count_within_limits(policy):
    assert "gpu-count-exceeded" not in rules(run(policy, pod(intent("training", gpus=8)), training=True))


# --- gpu-memory-exceeded ----------------------------------------------------------------------------------


def test_gpu_memory_above_class_max():
    policy = load_policy_texts(
        [
            (
                "p.yaml",
                """
apiVersion: gpu-admission.io/v1
kind: GPUPolicy
spec:
  pools:
    big: {gpuModel: H100-80GB, gpusPerNode: 8, isolation: [exclusive]}
  classes:
    small: {pools: [big], maxGPUMemory: 16Gi}
  namespaces: [{selector: {}, classes: [small]}]
""",
            )
        ]
    )
    d = run(policy, pod(intent("small", gpu_memory="20Gi")))
    assert "exceeds class 'small''s maximum of 16Gi" in violation(d, "gpu-memory-exceeded").message
    assert "gpu-memory-exceeded" not in rules(run(policy, pod(intent("small", gpu_memory="16Gi"))))


def test_gpu_memory_above_the_card(policy):
    d = run(policy, pod(intent("dev", gpu_memory="30Gi")))
    # an A10 reports 23028Mi; gpushare advertises floor(23028 / 1024) = 22 GiB per card, not the name's 24
    message = violation(d, "gpu-memory-exceeded").message
    assert "at most 22Gi (aliyun.com/gpu-mem: 22 per card)" in message and "ask for at most 22Gi" in message


# --- gang-required / gang-incomplete / gang-unschedulable ---------------------------------------------------


def test_gang_required_when_user_scheduler_bypasses_volcano(policy):
    d = run(policy, job(intent("training", gpus=8), parallelism=4, schedulerName="kai-scheduler"), training=True)
    v = violation(d, "gang-required")
    assert "4 pods of class 'training' must start together" in v.message and "'kai-scheduler'" in v.message
    assert "gang-required" not in rules(run(policy, job(intent("training", gpus=8), parallelism=4), training=True))


def test_gang_required_for_bare_pods_without_a_gang_name(policy):
    d = run(policy, pod(intent("training", gpus=8, gang_size=4)), training=True)
    assert "no gang name" in violation(d, "gang-required").message


def test_gang_incomplete_volcano_min_available(policy):
    d = run(policy, vcjob(intent("training"), replicas=8, min_available=4), training=True)
    v = violation(d, "gang-incomplete")
    assert v.path == "spec.minAvailable" and "minAvailable 4 < 8 replicas" in v.message


def test_gang_incomplete_task_min_available(policy):
    obj = vcjob(intent("training"), replicas=4, min_available=4)
    obj["spec"]["tasks"][0]["minAvailable"] = 2
    v = violation(run(policy, obj, training=True), "gang-incomplete")
    assert v.path == "spec.tasks[0].minAvailable" and "task 'worker' minAvailable 2 < its 4 replicas" in v.message


def test_gang_incomplete_gang_size_vs_parallelism(policy):
    d = run(policy, job(intent("training", gang_size=8), parallelism=4), training=True)
    assert "gang-size 8 does not match the 4 pods" in violation(d, "gang-incomplete").message


def test_gang_incomplete_on_update_when_parallelism_grows(policy):
    created = run(policy, job(intent("training", gpus=8), parallelism=4), training=True).mutated
    scaled = {**created, "spec": {**created["spec"], "parallelism": 8}}
    d = run(policy, scaled, training=True, operation="UPDATE", old_object=created)
    assert d.patch == ()
    assert "group-min-member 4 != parallelism 8" in violation(d, "gang-incomplete").message


def test_full_gang_passes(policy):
    d = run(policy, vcjob(intent("training"), replicas=8, min_available=8), training=True)
    assert "gang-incomplete" not in rules(d) and d.allowed


def test_gang_unschedulable_needs_more_nodes_than_the_pool(policy):
    d = run(policy, job(intent("training", gpus=8), parallelism=17), training=True)
    v = violation(d, "gang-unschedulable")
    assert "needs 136 GPUs on 17 nodes but pool train-h100 has 16 nodes x 8 GPUs (128)" in v.message
    assert "gang-unschedulable" not in rules(
        run(policy, job(intent("training", gpus=8), parallelism=16), training=True)
    )


def test_gang_unschedulable_counts_packing_not_just_totals(policy):
    # 5 GPUs per pod: only one pod fits a node of 8, so 17 pods need 17 nodes although 85 < 128 GPUs.
    d = run(policy, job(intent("training", gpus=5), parallelism=17), training=True)
    assert "on 17 nodes" in violation(d, "gang-unschedulable").message


# --- rdma-unavailable ----------------------------------------------------------------------------------------


def test_rdma_on_a_pool_without_rdma(policy):
    d = run(policy, pod(intent("inference", gpu_memory="4Gi", rdma="true")))
    v = violation(d, "rdma-unavailable")
    assert "infer-a100: has no RDMA network" in v.message and v.path.endswith("[gpu-admission.io/rdma]")
    assert "rdma-unavailable" not in rules(run(policy, pod(intent("training", rdma="true")), training=True))


# --- pool-spoofing -------------------------------------------------------------------------------------------


def test_pool_spoofing_by_node_selector(policy):
    d = run(policy, pod({}, [container(limits=GPU1)], nodeSelector={"workload": "gpu-train"}), labels=SERVING_NS)
    v = violation(d, "pool-spoofing")
    assert "targets pool train-h100, which namespace 'team-a' is not entitled to" in v.message
    assert v.path == "spec.nodeSelector"


def test_pool_spoofing_by_node_affinity_and_toleration(policy):
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "workload", "operator": "In", "values": ["gpu-train"]}]}
                ]
            }
        }
    }
    tol = [{"key": "workload", "operator": "Equal", "value": "gpu-train", "effect": "NoSchedule"}]
    d = run(policy, pod(intent("inference", gpu_memory="4Gi"), affinity=affinity, tolerations=tol))
    found = [v.path for v in d.violations if v.rule == "pool-spoofing"]
    assert "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]" in found
    assert "spec.tolerations[0]" in found


def test_shared_gpu_toleration_is_not_spoofing(policy):
    tol = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert "pool-spoofing" not in rules(run(policy, pod(intent("inference", gpu_memory="4Gi"), tolerations=tol)))


def test_entitled_namespace_may_target_its_pool(policy):
    d = run(policy, pod({}, [container(limits=GPU1)], nodeSelector={"workload": "gpu-train"}), training=True)
    assert "pool-spoofing" not in rules(d)


# --- privileged-gpu / node-name-set --------------------------------------------------------------------------


def test_privileged_container_with_a_mig_slice(policy):
    c = container(securityContext={"privileged": True})
    d = run(policy, pod(intent("inference", gpu_memory="4Gi"), [c]))
    v = violation(d, "privileged-gpu")
    assert v.path == "spec.containers[0].securityContext.privileged" and "see every GPU" in v.message


def test_privileged_with_whole_gpus_is_denied_too(policy):
    # it was allowed: a privileged container sees every card of the node, not only its grant (issue 11)
    c = container(securityContext={"privileged": True})
    d = run(policy, pod(intent("training", gpus=4), [c]), training=True)
    assert violation(d, "privileged-gpu").path == "spec.containers[0].securityContext.privileged"
    assert "privileged-gpu" not in rules(run(policy, pod(intent("training", gpus=4)), training=True))


def test_node_name_set(policy):
    d = run(policy, pod(intent("inference", gpu_memory="4Gi"), nodeName="gpu-node-01"))
    assert "nodeName 'gpu-node-01' bypasses the scheduler" in violation(d, "node-name-set").message


def test_node_name_on_non_gpu_pod_is_not_our_business(policy):
    d = run(policy, pod({}, [container()], nodeName="n1"))
    # no rule judges it (n1 may be a GPU node: its container only gets NVIDIA_VISIBLE_DEVICES=void)
    assert d.violations == () and [op["path"] for op in d.patch] == ["/spec/containers/0/env"]


# --- raw-gpu-request / whole-gpu-waste / inference-not-guaranteed (warnings) ---------------------------------


def test_raw_gpu_request_warns(policy):
    d = run(policy, pod({}, [container(limits=GPU1)]))
    v = violation(d, "raw-gpu-request")
    assert v.action is Action.WARN and d.allowed
    assert all(len(w) <= 120 for w in d.warnings)
    assert "raw-gpu-request" not in rules(run(policy, pod(intent("inference", gpu_memory="4Gi"))))


def test_whole_gpu_waste_warns_below_the_fraction(policy):
    d = run(policy, pod(intent("inference", isolation="exclusive", gpu_memory="8Gi")))
    v = violation(d, "whole-gpu-waste")
    assert "8Gi on a whole A100-40GB uses 20%" in v.message and "mig" in v.message and v.action is Action.WARN
    assert "whole-gpu-waste" not in rules(
        run(policy, pod(intent("inference", isolation="exclusive", gpu_memory="30Gi")))
    )


def test_inference_not_guaranteed(policy):
    d = run(policy, pod(intent("inference", gpu_memory="4Gi")))
    assert "has no cpu limit" in violation(d, "inference-not-guaranteed").message
    c = container(limits={"cpu": "2", "memory": "4Gi"}, requests={"cpu": "2", "memory": "4Gi"})
    assert "inference-not-guaranteed" not in rules(run(policy, pod(intent("inference", gpu_memory="4Gi"), [c])))


# --- unknown-field ----------------------------------------------------------------------------------------------


def test_unknown_volcano_field_with_hint(policy):
    obj = vcjob(intent("training"), min_available=None)
    obj["spec"]["minMember"] = 8
    obj["spec"]["tasks"][0]["replica"] = 8
    d = run(policy, obj, training=True)
    found = {v.path: v.message for v in d.violations if v.rule == "unknown-field"}
    assert "did you mean minAvailable?" in found["spec.minMember"]
    assert "did you mean replicas?" in found["spec.tasks[0].replica"]


# --- actions from the policy --------------------------------------------------------------------------------------


def _with_rules(rules_yaml: str):
    from tests.conftest import POLICIES

    text = (POLICIES / "default.yaml").read_text()
    head, _, _ = text.partition("\n  rules:\n")
    return load_policy_texts([("default.yaml", head + "\n  rules:\n" + rules_yaml)])


def test_rule_action_global_class_namespace_and_exemption():
    policy = _with_rules("""
    raw-gpu-request:
      action: deny
      namespaces:
        - selector: {matchLabels: {team: lab}}
          action: audit
      exempt:
        - matchLabels: {team: infra}
    inference-not-guaranteed:
      action: warn
      classes: {inference: deny}
""")
    raw = pod({}, [container(limits=GPU1)])
    assert violation(run(policy, raw), "raw-gpu-request").action is Action.DENY
    audited = run(policy, raw, labels={"team": "lab"})
    assert audited.allowed and violation(audited, "raw-gpu-request").action is Action.AUDIT
    assert "raw-gpu-request" in audited.audit_annotations
    assert "raw-gpu-request" not in rules(run(policy, raw, labels={"team": "infra"}))
    d = run(policy, pod(intent("inference", gpu_memory="4Gi")))
    assert violation(d, "inference-not-guaranteed").action is Action.DENY


def test_rule_off():
    policy = _with_rules("    raw-gpu-request: {action: off}\n")
    assert run(policy, pod({}, [container(limits=GPU1)])).violations == ()


# --- malformed-object ----------------------------------------------------------------------------------------------


def test_malformed_object_is_reported_with_path_and_expected_type(policy):
    d = run(policy, pod(intent("inference", gpu_memory="4Gi"), nodeSelector=["gpu"]))
    v = violation(d, "malformed-object")
    assert v.path == "spec.nodeSelector" and v.message == "spec.nodeSelector must be a map of strings, got a list"
    assert d.patch == () and not d.allowed


def test_malformed_non_gpu_object_is_not_our_business(policy):
    d = run(policy, pod({}, nodeSelector=["x"]))
    assert not d.relevant and d.violations == ()


def test_class_default_memory_does_not_invent_waste_for_whole_cards(policy):
    d = run(policy, pod(intent("inference", isolation="exclusive")))
    assert "whole-gpu-waste" not in rules(d)
    assert d.waste is not None and d.waste.requested_bytes is None

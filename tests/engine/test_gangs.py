"""Gangs judged as their schedulers judge them: a gang that can never form, a backend that may start
part of one, and the messages that say what the scheduler will do and the fix that works.

Volcano's semantics are emulated from its source as the reference records it (mutating defaults:
task ``minAvailable`` = replicas, job ``minAvailable`` = Σ task minAvailable; the controller creates a
``dependsOn`` task's pods only after its dependencies run), independently of the engine's code."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from tests.engine.helpers import assert_valid, container, intent, job, mutated, pod, rules, run, vcjob, violation
from webhook.engine import Stage, explain
from webhook.policy import load_policy

GPU8 = {"nvidia.com/gpu": "8"}
PROVIDERS = Path(__file__).parent / "policies" / "providers.yaml"


@pytest.fixture(scope="module")
def providers():
    return load_policy(PROVIDERS)


def task(name: str | None, replicas: int, *, depends: list[str] | None = None, **extra) -> dict:
    t: dict = {
        "replicas": replicas,
        "template": {
            "metadata": {},
            "spec": {"restartPolicy": "OnFailure", "containers": [container(limits=GPU8)]},
        },
        **extra,
    }
    if name is not None:
        t["name"] = name
    if depends:
        t["dependsOn"] = {"name": depends}
    return t


def training_vcjob(tasks: list[dict], min_available: int | None = None) -> dict:
    return vcjob(job_meta=intent("training"), tasks=tasks, min_available=min_available)


def update(policy, old: dict, new: dict):
    return run(policy, new, training=True, operation="UPDATE", old_object=old)


# --- minAvailable above the pods the tasks create ---------------------------------------------------


def test_job_min_available_above_total_replicas_is_unschedulable_on_create(policy):
    d = run(policy, training_vcjob([task("worker", 4)], min_available=8), training=True)
    v = violation(d, "gang-unschedulable")
    assert v.path == "spec.minAvailable"
    assert "minAvailable 8 > the 4 pods" in v.message and "never" in v.message
    assert "set minAvailable: 4" in v.message
    assert not d.allowed


def test_job_min_available_raised_above_replicas_on_update(policy):
    old = training_vcjob([task("worker", 4)], min_available=4)
    new = copy.deepcopy(old)
    new["spec"]["minAvailable"] = 6
    v = violation(update(policy, old, new), "gang-unschedulable")
    assert v.path == "spec.minAvailable" and "set minAvailable: 4" in v.message


def test_scaling_tasks_below_min_available_on_update(policy):
    old = training_vcjob([task("worker", 4)], min_available=4)
    new = copy.deepcopy(old)
    new["spec"]["tasks"][0]["replicas"] = 2
    v = violation(update(policy, old, new), "gang-unschedulable")
    assert "minAvailable 4 > the 2 pods" in v.message


def test_task_min_available_above_its_replicas(policy):
    d = run(policy, training_vcjob([task("worker", 2, minAvailable=3)], min_available=2), training=True)
    v = violation(d, "gang-unschedulable")
    assert v.path == "spec.tasks[0].minAvailable"
    assert "task 'worker' minAvailable 3 > its 2 replicas" in v.message and "set minAvailable: 2" in v.message


def test_task_min_available_above_replicas_on_update(policy):
    old = training_vcjob([task("worker", 2, minAvailable=2)], min_available=2)
    new = copy.deepcopy(old)
    new["spec"]["tasks"][0]["minAvailable"] = 5
    assert "gang-unschedulable" in rules(update(policy, old, new))


def test_negative_replicas_are_unschedulable_and_never_planned_as_a_negative_gang(policy):
    obj = training_vcjob([task("worker", -1)])
    d = run(policy, obj, training=True, entry=explain)
    v = violation(d, "gang-unschedulable")
    assert v.path == "spec.tasks[0].replicas" and "replicas -1" in v.message
    assert not any("-1 pod" in line for line in d.explanation), d.explanation
    assert "minAvailable" not in mutated(d)["spec"]  # no gang of -1 (or 0) pods written


def test_a_valid_gang_passes(policy):
    d = run(policy, training_vcjob([task("master", 1), task("worker", 3)], min_available=4), training=True)
    assert "gang-unschedulable" not in rules(d) and "gang-incomplete" not in rules(d)


# --- dependsOn: the dependent tasks' pods do not exist when the gang must form ---------------------


def _staged(min_available: int | None) -> dict:
    return training_vcjob([task("master", 1), task("worker", 3, depends=["master"])], min_available)


def test_depends_on_counted_into_the_gang_is_unschedulable(policy):
    d = run(policy, _staged(4), training=True)
    v = violation(d, "gang-unschedulable")
    assert v.path == "spec.minAvailable"
    assert "worker" in v.message and "dependsOn" in v.message
    assert "set minAvailable: 1" in v.message and "remove dependsOn" in v.message
    assert "gang-incomplete" not in rules(d)  # never advise raising minAvailable into the deadlock


def test_depends_on_without_min_available_gets_the_gang_that_can_form(policy):
    d = run(policy, _staged(None), training=True)
    assert mutated(d)["spec"]["minAvailable"] == 1, "not Σ replicas: that gang would never form"
    assert "gang-unschedulable" not in rules(d) and "gang-incomplete" not in rules(d)
    assert_valid(mutated(d))


def test_depends_on_gang_below_the_first_wave_is_incomplete_with_the_right_fix(policy):
    obj = training_vcjob([task("master", 2), task("worker", 3, depends=["master"])], 1)
    v = violation(run(policy, obj, training=True), "gang-incomplete")
    assert "set minAvailable: 2" in v.message and "without dependsOn" in v.message


def test_depends_on_gang_raised_on_update(policy):
    old = _staged(1)
    new = copy.deepcopy(old)
    new["spec"]["minAvailable"] = 4
    assert "gang-unschedulable" in rules(update(policy, old, new))


def test_depends_on_with_volcano_default_min_available_as_received(policy):
    # judged as the apiserver will store it (our mutation did not run): Volcano then defaults
    # minAvailable to Σ task minAvailable, which counts the dependent task
    v = violation(run(policy, _staged(None), training=True, stage=Stage.STORED), "gang-unschedulable")
    assert v.path == "spec.tasks[1].dependsOn" and "set minAvailable: 1" in v.message


# --- messages ---------------------------------------------------------------------------------------


def test_an_unnamed_task_is_called_what_volcano_calls_it(policy):
    obj = training_vcjob([task(None, 4, minAvailable=2)], min_available=4)
    d = run(policy, obj, training=True)
    messages = " ".join(v.message for v in d.violations)
    assert "'default0'" in messages and "None" not in messages
    obj = training_vcjob([task(None, 2, minAvailable=3)], min_available=2)
    assert "task 'default0' minAvailable 3" in violation(run(policy, obj, training=True), "gang-unschedulable").message


def test_a_gang_name_over_63_characters_says_the_limit(policy):
    p = pod(intent("training", gang="g" * 64, gang_size=2), [container(limits=GPU8)])
    d = run(policy, p, training=True)
    assert "limit is 63" in violation(d, "intent-invalid").message
    required = violation(d, "gang-required").message
    assert "invalid" in required and "has no gang name" not in required


# --- Kueue partial admission ------------------------------------------------------------------------


def _kueue_job(min_parallelism: str | None, parallelism: int = 4) -> dict:
    annotations = {} if min_parallelism is None else {"kueue.x-k8s.io/job-min-parallelism": min_parallelism}
    return job(
        intent("kueue-train"),
        [container(limits=GPU8)],
        parallelism=parallelism,
        job_meta={"annotations": annotations},
        completionMode="Indexed",
        completions=parallelism,
    )


def test_kueue_min_parallelism_under_an_all_or_nothing_class_is_unschedulable(providers):
    d = run(providers, _kueue_job("2"))
    v = violation(d, "gang-unschedulable")
    assert v.path == "metadata.annotations[kueue.x-k8s.io/job-min-parallelism]"
    assert "partial admission" in v.message and "remove the annotation" in v.message
    assert not d.allowed


def test_kueue_job_without_min_parallelism_passes(providers):
    assert "gang-unschedulable" not in rules(run(providers, _kueue_job(None)))


def test_kueue_min_parallelism_added_on_update(providers):
    old = _kueue_job(None)
    new = _kueue_job("3")
    d = run(providers, new, operation="UPDATE", old_object=old)
    assert "gang-unschedulable" in rules(d)


def test_kueue_min_parallelism_allowed_when_the_class_is_not_all_or_nothing():
    text = PROVIDERS.read_text().replace(
        "gang: {backend: kueue, required: true}", "gang: {backend: kueue, required: true, allOrNothing: false}"
    )
    from webhook.policy import load_policy_texts

    relaxed = load_policy_texts([("providers.yaml", text)])
    assert "gang-unschedulable" not in rules(run(relaxed, _kueue_job("2")))


# --- workload-invalid: Volcano ----------------------------------------------------------------------


def test_a_labelled_volcano_job_without_tasks_is_judged_not_skipped(policy):
    obj = training_vcjob([])
    obj["spec"]["tasks"] = []
    d = run(policy, obj, training=True)
    assert d.relevant
    v = violation(d, "workload-invalid")
    assert v.path == "spec.tasks" and "No task specified in job spec" in v.message and not d.allowed
    del obj["spec"]["tasks"]
    assert "workload-invalid" in rules(run(policy, obj, training=True))


def test_duplicate_task_names(policy):
    obj = training_vcjob([task("worker", 2), task("worker", 2)], min_available=4)
    v = violation(run(policy, obj, training=True), "workload-invalid")
    assert v.path == "spec.tasks[1].name" and "duplicated task name worker" in v.message


def test_duplicate_with_volcano_default_name(policy):
    # Volcano names the unnamed second task default1, which the first one already is
    obj = training_vcjob([task("default1", 2), task(None, 2)], min_available=4)
    assert "duplicated task name default1" in violation(run(policy, obj, training=True), "workload-invalid").message


def test_negative_and_missing_replicas(policy):
    obj = training_vcjob([task("worker", -2), task("ps", 1)], min_available=1)
    del obj["spec"]["tasks"][1]["replicas"]
    d = run(policy, obj, training=True)
    found = {v.path: v.message for v in d.violations if v.rule == "workload-invalid"}
    assert "'replicas' must be >= 0 in task: worker" in found["spec.tasks[0].replicas"]
    assert "has no replicas" in found["spec.tasks[1].replicas"]


def test_negative_min_available(policy):
    obj = training_vcjob([task("worker", 2, minAvailable=-1)], min_available=-1)
    found = {v.path: v.message for v in run(policy, obj, training=True).violations if v.rule == "workload-invalid"}
    assert "job 'minAvailable' must be >= 0" in found["spec.minAvailable"]
    assert "'minAvailable' must be >= 0 in task: worker" in found["spec.tasks[0].minAvailable"]


@pytest.mark.parametrize(
    ("partition", "replicas", "path", "message"),
    [
        ({"totalPartitions": 2, "partitionSize": 4}, 6, "spec.tasks[0].replicas", "'Replicas' are not equal to"),
        (
            {"totalPartitions": 0, "partitionSize": 4},
            8,
            "spec.tasks[0].partitionPolicy.totalPartitions",
            "'TotalPartitions' must be greater than 0",
        ),
        (
            {"totalPartitions": 2, "partitionSize": 0},
            8,
            "spec.tasks[0].partitionPolicy.partitionSize",
            "'PartitionSize' must be greater than 0",
        ),
    ],
)
def test_partition_arithmetic(policy, partition, replicas, path, message):
    obj = training_vcjob([task("worker", replicas, partitionPolicy=partition)], min_available=replicas)
    found = {v.path: v.message for v in run(policy, obj, training=True).violations if v.rule == "workload-invalid"}
    assert message in found[path], found
    assert "task: worker, job: train-qwen" in found[path]


def test_partition_arithmetic_that_adds_up_passes(policy):
    obj = training_vcjob([task("worker", 8, partitionPolicy={"totalPartitions": 2, "partitionSize": 4})], 8)
    assert "workload-invalid" not in rules(run(policy, obj, training=True))


def test_both_tier_fields_in_network_topology(policy):
    obj = training_vcjob([task("worker", 2)], min_available=2)
    obj["spec"]["networkTopology"] = {"mode": "hard", "highestTierAllowed": 1, "highestTierName": "leaf"}
    v = violation(run(policy, obj, training=True), "workload-invalid")
    assert v.path == "spec.networkTopology"
    assert "must not specify 'highestTierAllowed' and 'highestTierName' in networkTopology simultaneously" in v.message


def test_our_mutation_never_writes_both_tier_fields(policy):
    # the user names the tier; the topology step must leave networkTopology alone, not add a tier number
    obj = training_vcjob([task("worker", 2)], min_available=2)
    obj["spec"]["networkTopology"] = {"mode": "soft", "highestTierName": "leaf"}
    d = run(policy, obj, training=True)
    assert mutated(d)["spec"]["networkTopology"] == {"mode": "soft", "highestTierName": "leaf"}
    assert "workload-invalid" not in rules(d)
    fresh = run(policy, training_vcjob([task("worker", 2)], min_available=2), training=True)
    topology = mutated(fresh)["spec"]["networkTopology"]
    assert not ("highestTierAllowed" in topology and "highestTierName" in topology)
    assert "workload-invalid" not in rules(fresh)


def test_depends_on_cycle_and_unknown_task(policy):
    obj = training_vcjob([task("a", 1, depends=["b"]), task("b", 1, depends=["a"])], min_available=1)
    assert "directed acyclic graph(DAG)" in violation(run(policy, obj, training=True), "workload-invalid").message
    obj = training_vcjob([task("master", 1), task("worker", 2, depends=["mastr"])], min_available=1)
    v = violation(run(policy, obj, training=True), "workload-invalid")
    assert "'mastr'" in v.message and "master" in v.message


def test_mpi_plugin_without_its_master_task(policy):
    obj = training_vcjob([task("worker", 2)], min_available=2)
    obj["spec"]["plugins"] = {"mpi": ["--port=5000"]}
    assert "The specified mpi master task was not found" in violation(
        run(policy, obj, training=True), "workload-invalid"
    ).message


def test_volcano_update_that_goes_negative(policy):
    old = training_vcjob([task("worker", 2)], min_available=2)
    new = copy.deepcopy(old)
    new["spec"]["tasks"][0]["replicas"] = -1
    assert "workload-invalid" in rules(update(policy, old, new))


def test_a_cpu_volcano_job_with_broken_keys_is_not_ours_to_deny(policy):
    obj = vcjob(tasks=[{"name": "w", "replicas": -1, "template": {"spec": {"containers": [container()]}}}])
    obj["spec"]["tasks"].append(copy.deepcopy(obj["spec"]["tasks"][0]))
    d = run(policy, obj)
    assert not d.relevant and d.allowed


# --- workload-invalid: Kueue ------------------------------------------------------------------------


def _kueue_pod(labels: dict | None = None, annotations: dict | None = None, **intent_keys) -> dict:
    meta = intent("kueue-train", **intent_keys)
    meta.setdefault("labels", {}).update(labels or {})
    meta.setdefault("annotations", {}).update(annotations or {})
    return pod(meta, [container(limits=GPU8)], nodeSelector={"pool": "kueue"})


GROUP, TOTAL = "kueue.x-k8s.io/pod-group-name", "kueue.x-k8s.io/pod-group-total-count"


@pytest.mark.parametrize(
    ("labels", "annotations", "path", "message"),
    [
        ({GROUP: "g1"}, {}, f"metadata.annotations[{TOTAL}]", "should be set"),
        ({}, {TOTAL: "2"}, f"metadata.labels[{GROUP}]", "should be set"),
        ({GROUP: "g1"}, {TOTAL: "0"}, f"metadata.annotations[{TOTAL}]", "greater than zero"),
        ({GROUP: "g1"}, {TOTAL: ""}, f"metadata.annotations[{TOTAL}]", "greater than zero"),
        ({GROUP: "Group_1"}, {TOTAL: "2"}, f"metadata.labels[{GROUP}]", "not a valid name"),
        ({"kueue.x-k8s.io/queue-name": "Team Queue"}, {}, "metadata.labels[kueue.x-k8s.io/queue-name]", "LocalQueue"),
    ],
)
def test_kueue_pod_group_and_queue_keys(providers, labels, annotations, path, message):
    d = run(providers, _kueue_pod(labels, annotations))
    found = {v.path: v.message for v in d.violations if v.rule == "workload-invalid"}
    assert message in found.get(path, ""), [v.render() for v in d.violations]
    assert not d.allowed


def test_kueue_pod_group_both_keys_are_the_exact_kueue_message(providers):
    v = violation(run(providers, _kueue_pod({GROUP: "g1"}, {})), "workload-invalid")
    assert v.message.startswith(
        "both the 'kueue.x-k8s.io/pod-group-total-count' annotation and the 'kueue.x-k8s.io/pod-group-name' "
        "label should be set"
    )


def test_a_user_written_total_count_is_the_gang_without_gang_size(providers):
    # the user spelled the group in Kueue's keys only: that is the gang (2 pods), not a single pod
    d = run(providers, _kueue_pod({GROUP: "g1"}, {TOTAL: "2"}), entry=explain)
    assert any("gang: backend kueue, 2 pod(s), name g1" in line for line in d.explanation), d.explanation
    assert "gang-required" not in rules(d) and "workload-invalid" not in rules(d)
    v = violation(run(providers, _kueue_pod({GROUP: "g1"}, {TOTAL: "3"}, gang_size=2)), "gang-incomplete")
    assert "3 != gang-size 2" in v.message


def test_kueue_group_name_changed_on_update(providers):
    old = _kueue_pod({GROUP: "g1"}, {TOTAL: "2"})
    new = copy.deepcopy(old)
    new["metadata"]["labels"][GROUP] = "G_2"
    assert "workload-invalid" in rules(run(providers, new, operation="UPDATE", old_object=old))


def test_more_than_one_tas_annotation(providers):
    d = run(
        providers,
        _kueue_job_with_template_annotations(
            {
                "kueue.x-k8s.io/podset-required-topology": "topology.example.com/rack",
                "kueue.x-k8s.io/podset-preferred-topology": "kubernetes.io/hostname",
            }
        ),
    )
    v = violation(d, "workload-invalid")
    assert "must not contain more than one topology annotation" in v.message
    assert v.path.startswith("spec.template.metadata.annotations")


def test_a_tas_level_that_is_not_a_label_key(providers):
    d = run(providers, _kueue_job_with_template_annotations({"kueue.x-k8s.io/podset-required-topology": "rack level"}))
    assert "not a node label key" in violation(d, "workload-invalid").message


def test_kueue_tas_slice_size(providers):
    base = {"kueue.x-k8s.io/podset-slice-required-topology": "kubernetes.io/hostname"}
    d = run(providers, _kueue_job_with_template_annotations(base))
    assert "must be set when" in violation(d, "workload-invalid").message
    d = run(providers, _kueue_job_with_template_annotations({**base, "kueue.x-k8s.io/podset-slice-size": "9"}))
    assert "must not be greater than pod set count 4" in violation(d, "workload-invalid").message


def test_our_kueue_topology_output_is_valid(providers):
    assert "workload-invalid" not in rules(run(providers, _kueue_job(None)))


def test_kueue_min_parallelism_out_of_range(providers):
    for value in ("4", "0", "x"):
        v = violation(run(providers, _kueue_job(value)), "workload-invalid")
        assert "from 1 to 3" in v.message


def test_a_cpu_pod_with_broken_kueue_keys_is_not_ours_to_deny(providers):
    p = pod({"labels": {GROUP: "Bad_Name", "kueue.x-k8s.io/queue-name": "Bad Queue"}, "annotations": {TOTAL: "0"}})
    d = run(providers, p)
    # relevant only because this policy's pools have no taints (any pod may land there: it gets
    # NVIDIA_VISIBLE_DEVICES=void); the Kueue keys of a CPU pod are still not ours to judge
    assert d.allowed and not d.violations, [v.render() for v in d.violations]


def _kueue_job_with_template_annotations(annotations: dict) -> dict:
    obj = _kueue_job(None)
    obj["spec"]["template"]["metadata"].setdefault("annotations", {}).update(annotations)
    return obj


# --- shared-GPU pools: the pool's stack decides what nvidia.com/gpu means ---------------------------

STACK_POLICY = """
apiVersion: gpu-admission.io/v1
kind: GPUPolicy
spec:
  pools:
    hami:
      gpuModel: A100-80GB
      gpusPerNode: 8
      nodeSelector: {pool: hami}
      isolation: [shared]
      sharing: {provider: hami}
      adoptAs: shared
    slices:
      gpuModel: L4
      gpusPerNode: 8
      nodeSelector: {pool: slices}
      isolation: [shared]
      sharing: {provider: time-slicing}
      adoptAs: shared
    whole:
      gpuModel: H100-80GB
      gpusPerNode: 8
      nodeSelector: {pool: whole}
      isolation: [exclusive]
      adoptAs: exclusive
  classes:
    shared: {pools: [hami, slices], isolation: {default: shared}}
    exclusive: {pools: [whole], isolation: {default: exclusive}}
  namespaces:
    - selector: {}
      classes: [shared, exclusive]
"""


@pytest.fixture(scope="module")
def stacks():
    from webhook.policy import load_policy_texts

    return load_policy_texts([("stacks.yaml", STACK_POLICY)])


def _raw(pool_label: str, limits: dict, privileged: bool = False, **meta) -> dict:
    extra = {"securityContext": {"privileged": True}} if privileged else {}
    return pod(meta or None, [container(limits=limits, **extra)], nodeSelector={"pool": pool_label})


@pytest.mark.parametrize("pool_label", ["hami", "slices"])
def test_a_privileged_container_with_nvidia_gpu_on_a_shared_pool_is_privileged_gpu(stacks, pool_label):
    d = run(stacks, _raw(pool_label, {"nvidia.com/gpu": "1"}, privileged=True))
    v = violation(d, "privileged-gpu")
    assert v.path == "spec.containers[0].securityContext.privileged"
    assert "shared" in v.message and not d.allowed


def test_a_privileged_class_pod_on_a_hami_pool(stacks):
    p = pod(intent("shared", gpu_memory="4Gi"), [container(securityContext={"privileged": True})])
    assert "privileged-gpu" in rules(run(stacks, p))


def test_the_same_pod_on_a_whole_gpu_pool_is_not_a_slice(stacks):
    # privileged in any GPU pod is privileged-gpu (it sees the node's other cards), but not a shared slice
    v = violation(run(stacks, _raw("whole", {"nvidia.com/gpu": "1"}, privileged=True)), "privileged-gpu")
    assert "on pool whole" in v.message and "shared" not in v.message


@pytest.mark.parametrize("pool_label", ["hami", "slices"])
def test_adopting_nvidia_gpu_on_a_shared_pool_is_shared_not_intent_invalid(stacks, pool_label):
    d = run(stacks, _raw(pool_label, {"nvidia.com/gpu": "1"}))
    assert "intent-invalid" not in rules(d), [v.render() for v in d.violations]
    assert not any("not 'exclusive'" in v.message for v in d.violations)
    assert [p.isolation for p in d.placements] == ["shared"]


def test_gpumem_percentage_above_100_is_extended_resource(stacks):
    d = run(stacks, _raw("hami", {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "150"}))
    v = violation(d, "extended-resource")
    assert v.path == "spec.containers[0].resources.limits[nvidia.com/gpumem-percentage]"
    assert "above 100" in v.message
    ok = run(stacks, _raw("hami", {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50"}))
    assert "extended-resource" not in rules(ok)

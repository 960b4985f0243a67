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
    d = run(policy, obj, training=True, explain=True)
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
    v = violation(run(policy, _staged(None), training=True, as_received=True), "gang-unschedulable")
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

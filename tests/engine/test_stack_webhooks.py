"""A sharing stack's own webhook runs before ``/validate``: the pod is judged as stored after it.

HAMi's mutating webhook gives every pod holding a HAMi resource ``schedulerName: hami-scheduler`` (and
env, a runtime class, a default core share). ``/validate`` judges the stored pod, so it must admit
exactly what that webhook writes, and nothing an attacker writes in its name: ``hami-scheduler`` on a
pod HAMi would have left alone (a class that names its own scheduler or gang scheduler), or on a
cluster whose policy has no HAMi pool.
"""

from __future__ import annotations

import copy
from pathlib import Path

import jsonpatch
import pytest

from tests.engine.helpers import container, intent, pod, rules
from tests.engine.stack_webhooks import hami_webhook
from webhook.engine import Request, Stage, mutate, report
from webhook.policy import load_policy, load_policy_texts

PROVIDERS = Path(__file__).parent / "policies" / "providers.yaml"


@pytest.fixture(scope="module")
def providers():
    return load_policy(PROVIDERS)


def _stored(policy, obj: dict, namespace_labels: dict | None = None) -> dict:
    """The pod as the apiserver stores it: our /mutate patch, then HAMi's webhook."""
    done = mutate(policy, Request(copy.deepcopy(obj), namespace="team", namespace_labels=namespace_labels))
    ours = jsonpatch.apply_patch(obj, list(done.patch)) if done.patch else obj
    return hami_webhook(ours)


def _validate(policy, obj: dict, namespace_labels: dict | None = None):
    return report(policy, Request(obj, namespace="team", namespace_labels=namespace_labels, stage=Stage.STORED))


def test_a_hami_class_pod_is_admitted_as_stored_after_hamis_webhook(providers):
    final = _stored(providers, pod(intent("hami", gpu_memory="10Gi"), [container("main"), container("side")]))
    assert final["spec"]["schedulerName"] == "hami-scheduler"
    d = _validate(providers, final)
    assert d.allowed, [v.render() for v in d.violations]
    assert "scheduling-not-allowed" not in rules(d)


def test_a_whole_card_hami_pod_with_the_default_cores_hami_adds_is_admitted(providers):
    obj = pod(None, [container(limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "100"})],
              nodeSelector={"pool": "hami"})
    final = hami_webhook(obj)
    assert final["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpucores"] == "100"
    d = _validate(providers, final)
    assert "scheduling-not-allowed" not in rules(d), [v.render() for v in d.violations]


def test_a_raw_gpu_request_hami_schedules_is_admitted_where_hami_runs(providers):
    """HAMi's webhook reacts to nvidia.com/gpu on any pod of the cluster, not only on its own pool."""
    final = _stored(providers, pod(None, [container(limits={"nvidia.com/gpu": "1"})]))
    assert final["spec"]["schedulerName"] == "hami-scheduler"
    d = _validate(providers, final)
    assert "scheduling-not-allowed" not in rules(d), [v.render() for v in d.violations]


def test_another_class_pod_holding_nvidia_gpu_is_admitted_after_hamis_webhook(providers):
    final = _stored(providers, pod(intent("mig-single", gpu_memory="4Gi"), [container()]))
    assert final["spec"]["schedulerName"] == "hami-scheduler"
    d = _validate(providers, final)
    assert "scheduling-not-allowed" not in rules(d), [v.render() for v in d.violations]


def test_hami_scheduler_on_a_pod_whose_class_names_another_scheduler_is_still_denied():
    """HAMi leaves a pod naming another scheduler alone: hami-scheduler on a pod whose class sends it to
    Volcano was written by the user, and would take the pod out of Volcano's queues."""
    text = PROVIDERS.read_text().replace(
        "    hami: {pools: [hami], isolation: {default: shared}}\n",
        "    hami: {pools: [hami], isolation: {default: shared}}\n"
        "    gang-hami: {pools: [hami], isolation: {default: shared}, schedulerName: volcano}\n",
    ).replace("classes: [mig-single, hami,", "classes: [gang-hami, mig-single, hami,")
    policy = load_policy_texts([("p.yaml", text)])
    final = _stored(policy, pod(intent("gang-hami", gpu_memory="10Gi"), [container()]))
    assert final["spec"]["schedulerName"] == "volcano", "our class step set it, and HAMi left it alone"
    assert "scheduling-not-allowed" not in rules(_validate(policy, final))
    attacked = copy.deepcopy(final)
    attacked["spec"]["schedulerName"] = "hami-scheduler"
    assert "scheduling-not-allowed" in rules(_validate(policy, attacked))


def test_hami_scheduler_is_not_allowed_where_the_policy_has_no_hami_pool(policy):
    obj = pod(None, [container(limits={"nvidia.com/gpu": "1"})], schedulerName="hami-scheduler")
    d = _validate(policy, obj)
    assert "scheduling-not-allowed" in rules(d)


def test_a_pod_without_a_hami_resource_may_not_name_hamis_scheduler(providers):
    """HAMi writes its scheduler only on pods holding its resources: a qGPU slice is not one."""
    final = _stored(providers, pod(intent("qgpu", gpu_memory="4Gi"), [container()]))
    assert "schedulerName" not in final["spec"]
    attacked = copy.deepcopy(final)
    attacked["spec"]["schedulerName"] = "hami-scheduler"
    assert "scheduling-not-allowed" in rules(_validate(providers, attacked))


def test_the_stack_table_says_what_each_stacks_webhook_writes():
    from webhook.policy.stacks import stacks

    hami = stacks()["hami"].spec.webhook
    assert hami is not None and hami.scheduler == "hami-scheduler"
    assert hami.name == "vgpu.hami.io"
    assert {"CUDA_TASK_PRIORITY", "GPU_CORE_UTILIZATION_POLICY"} <= set(hami.env)
    assert hami.resources.get("nvidia.com/gpucores") == "100"
    for sid in ("aliyun-cgpu", "tencent-qgpu", "time-slicing", "volcano-vgpu"):
        assert stacks()[sid].spec.webhook is None, sid


def test_lint_is_quiet_about_hamis_scheduler_because_validate_admits_it():
    """A class with no scheduler of its own on a HAMi pool: HAMi's webhook sets hami-scheduler, which
    /validate now admits by construction, so there is nothing for lint to warn about; a class that names
    a scheduler HAMi will not overwrite still gets the sharing-scheduler warning."""
    from webhook.lint.checks import policy_warnings

    text = PROVIDERS.read_text()
    quiet = policy_warnings(load_policy_texts([("p.yaml", text)]))
    assert not [w for w in quiet if w.code == "sharing-scheduler" and "hami" in w.message]
    loud_text = text.replace("hami: {pools: [hami], isolation: {default: shared}}",
                             "hami: {pools: [hami], isolation: {default: shared}, schedulerName: my-sched}")
    loud = policy_warnings(load_policy_texts([("p.yaml", loud_text)]))
    assert [w for w in loud if w.code == "sharing-scheduler" and "hami-scheduler" in w.message]


def test_a_kueue_pod_is_admitted_as_stored_after_kueues_webhook(providers):
    """Kueue's Pod webhook adds its managed label and admission gate: nothing a rule judges."""
    from tests.engine.stack_webhooks import kueue_pod_webhook

    obj = pod(intent("kueue-train", gpus=8), [container()])
    done = mutate(providers, Request(copy.deepcopy(obj), namespace="team"))
    final = kueue_pod_webhook(jsonpatch.apply_patch(obj, list(done.patch)))
    assert final["metadata"]["labels"]["kueue.x-k8s.io/managed"] == "true"
    d = _validate(providers, final)
    assert d.allowed, [v.render() for v in d.violations]


def test_a_volcano_job_is_admitted_as_stored_after_volcanos_webhook(policy):
    """Volcano's Job webhook defaults queue, scheduler, retries and minAvailable: the gang stays whole."""
    from tests.conftest import TRAINING_NS
    from tests.engine.helpers import vcjob
    from tests.engine.stack_webhooks import volcano_job_webhook

    job = vcjob(intent("training", gpus=8))
    done = mutate(policy, Request(copy.deepcopy(job), namespace="team", namespace_labels=TRAINING_NS))
    final = volcano_job_webhook(jsonpatch.apply_patch(job, list(done.patch)))
    d = report(policy, Request(final, namespace="team", namespace_labels=TRAINING_NS, stage=Stage.STORED))
    assert d.allowed, [v.render() for v in d.violations]


def _gang_on_hami():
    text = PROVIDERS.read_text().replace(
        "    hami: {pools: [hami], isolation: {default: shared}}\n",
        "    hami: {pools: [hami], isolation: {default: shared}}\n"
        "    gang-hami: {pools: [hami], isolation: {default: shared}, gang: {backend: volcano}}\n",
    ).replace("classes: [mig-single, hami,", "classes: [gang-hami, mig-single, hami,")
    return load_policy_texts([("p.yaml", text)])


def test_hami_scheduler_on_a_gang_template_our_gang_step_schedules_is_denied():
    """A two-pod Job of a Volcano-gang class gets schedulerName volcano from our gang step, so HAMi never
    writes its scheduler there: hami-scheduler on the template takes the pods out of their gang."""
    from tests.engine.helpers import job

    policy = _gang_on_hami()
    obj = job(intent("gang-hami", gpu_memory="10Gi"), [container()], parallelism=2)
    done = mutate(policy, Request(copy.deepcopy(obj), namespace="team"))
    final = jsonpatch.apply_patch(obj, list(done.patch))
    assert final["spec"]["template"]["spec"]["schedulerName"] == "volcano"
    assert "scheduling-not-allowed" not in rules(_validate(policy, final))
    final["spec"]["template"]["spec"]["schedulerName"] = "hami-scheduler"
    assert "scheduling-not-allowed" in rules(_validate(policy, final))


def test_a_single_pod_of_a_gang_class_hami_schedules_is_admitted():
    """One pod is no gang: our gang step writes no scheduler, so HAMi's webhook writes its own."""
    policy = _gang_on_hami()
    final = _stored(policy, pod(intent("gang-hami", gpu_memory="10Gi"), [container()]))
    assert final["spec"]["schedulerName"] == "hami-scheduler"
    assert "scheduling-not-allowed" not in rules(_validate(policy, final))

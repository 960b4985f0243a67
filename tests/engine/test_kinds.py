"""Every workload kind of the kind table through the same steps: templates mutated, gang keys where the
kind's controller reads them, denials judged on the workload, a platform's own kind declared in policy.

The CRD kinds (Kubeflow, MPI, JobSet, LWS, Ray, TrainJob) have no schema in ../shared/realworld/crds,
so each of their pod templates is validated as a ``PodTemplateSpec`` (strict OpenAPI, 1.30 and 1.37)
and the object-level fields the webhook writes are checked against the operators' documented fields
(``runPolicy.schedulingPolicy.minAvailable`` is an int32, the Kueue queue is a label of the top object).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import POLICIES
from tests.engine.helpers import container, rules, run, schema_errors, violation
from webhook.check.inputs import read_sources
from webhook.check.runner import Namespaces, Status, check_sources
from webhook.engine.model.workload import classify, templates
from webhook.policy import load_policy
from webhook.policy.loader import PolicyError, load_policy_texts

TRAIN = {"labels": {"gpu-admission.io/workload": "training"}, "annotations": {"gpu-admission.io/gpus": "8"}}


def tpl(meta: dict | None = None, name: str = "main", **spec: Any) -> dict:
    return {
        "metadata": copy.deepcopy(meta) if meta is not None else {},
        "spec": {"containers": [container(name)], **spec},
    }


def pytorchjob(workers: int = 3, meta: dict | None = TRAIN, **spec: Any) -> dict:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "llm"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": tpl(meta, "pytorch")},
                "Worker": {"replicas": workers, "template": tpl(meta, "pytorch")},
            },
            **spec,
        },
    }


def mpijob() -> dict:
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": "nccl"},
        "spec": {
            "slotsPerWorker": 8,
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": tpl(None, "launcher")},  # no GPU, still in the gang
                "Worker": {"replicas": 2, "template": tpl(TRAIN, "worker")},
            },
        },
    }


def jobset() -> dict:
    job = {"parallelism": 2, "completions": 2, "template": tpl(TRAIN, restartPolicy="Never")}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "slices"},
        "spec": {"replicatedJobs": [{"name": "workers", "replicas": 2, "template": {"spec": job}}]},
    }


def lws() -> dict:
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "vllm", **TRAIN},  # the object's own intent applies to both templates
        "spec": {
            "replicas": 2,
            "leaderWorkerTemplate": {"size": 4, "leaderTemplate": tpl(), "workerTemplate": tpl()},
        },
    }


def raycluster() -> dict:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "ray"},
        "spec": {
            "headGroupSpec": {"rayStartParams": {}, "template": tpl(None, "ray-head")},
            "workerGroupSpecs": [
                {"groupName": "gpu", "replicas": 2, "numOfHosts": 1, "rayStartParams": {}, "template": tpl(TRAIN)}
            ],
        },
    }


def rayjob() -> dict:
    cluster = raycluster()["spec"]
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "ray-train"},
        "spec": {"entrypoint": "python train.py", "rayClusterSpec": cluster, "submitterPodTemplate": tpl(None, "sub")},
    }


def tfjob() -> dict:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": "tf"},
        "spec": {
            "tfReplicaSpecs": {
                "Chief": {"replicas": 1, "template": tpl(TRAIN, "tensorflow")},
                "Worker": {"replicas": 2, "template": tpl(TRAIN, "tensorflow")},
            }
        },
    }


KINDS = {
    "PyTorchJob": (pytorchjob, 4),
    "TFJob": (tfjob, 3),
    "MPIJob": (mpijob, 3),
    "LeaderWorkerSet": (lws, 4),
    "RayCluster": (raycluster, 3),
    "RayJob": (rayjob, 3),
}


@pytest.mark.parametrize("name", sorted(KINDS))
def test_each_kind_is_mutated_on_every_template_and_joins_one_volcano_gang(policy, name):
    make, size = KINDS[name]
    obj = make()
    d = run(policy, obj, training=True)  # the patch applies, and re-mutating its output yields none
    assert d.allowed, [v.render() for v in d.violations]
    out = d.mutated
    kind = classify(out)
    assert kind is not None and kind.mutate
    tpls = templates(out, kind)
    assert sum(t.replicas for t in tpls if t.gang) == size
    for t in tpls:
        if not t.gang:  # a RayJob's submitter is not part of the cluster's gang
            assert "schedulerName" not in t.spec
            continue
        assert t.spec["schedulerName"] == "volcano", (name, t.dotted())  # GPU-free launchers and heads too
        gpu = t.spec["containers"][0].get("resources", {}).get("limits", {}).get("nvidia.com/gpu")
        asked = "gpu-admission.io/workload" in t.metadata.get("labels", {}) or name == "LeaderWorkerSet"
        assert gpu == ("8" if asked else None), (name, t.dotted())
        if asked:
            assert t.spec["nodeSelector"] == {"workload": "gpu-train"}
    assert schema_errors(out) == []


def test_kubeflow_gang_minimum_is_set_to_the_full_gang_where_the_operator_reads_it(policy):
    d = run(policy, pytorchjob(), training=True)
    policy_ = d.mutated["spec"]["runPolicy"]["schedulingPolicy"]
    assert policy_["minAvailable"] == 4 and isinstance(policy_["minAvailable"], int)  # int32 in the CRD
    assert policy_["priorityClass"] == "gpu-training"
    # topology: the operator labels every pod training.kubeflow.org/job-name=<job>
    affinity = d.mutated["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["affinity"]["podAffinity"]
    term = affinity["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
    assert term["labelSelector"] == {"matchLabels": {"training.kubeflow.org/job-name": "llm"}}


def test_a_partial_operator_gang_is_gang_incomplete(policy):
    obj = pytorchjob(runPolicy={"schedulingPolicy": {"minAvailable": 2}})
    v = violation(run(policy, obj, training=True), "gang-incomplete")
    assert v.path == "spec.runPolicy.schedulingPolicy.minAvailable"
    assert "minAvailable 2 < 4 replicas" in v.message and "set minAvailable: 4" in v.message


def test_workload_level_denials_show_at_the_operator_object(policy):
    # entitlement: a serving-only namespace may not train
    d = run(policy, pytorchjob(), labels={"kubernetes.io/metadata.name": "web", "gpu-admission.io/tier": "serving"})
    assert "class-not-allowed" in rules(d) and not d.allowed
    # too many GPUs per pod for the class
    big = pytorchjob(meta={**TRAIN, "annotations": {"gpu-admission.io/gpus": "16"}})
    assert "gpu-count-exceeded" in rules(run(policy, big, training=True))
    # a gang larger than the pool can ever hold
    huge = pytorchjob(workers=5000)
    assert "gang-unschedulable" in rules(run(policy, huge, training=True))


def test_a_kind_the_backend_cannot_gang_is_gang_required_naming_the_backend_that_can(policy):
    d = run(policy, jobset(), training=True)
    v = violation(d, "gang-required")
    assert "volcano has no integration for JobSet" in v.message and "kueue" in v.message


def kueue_policy():
    doc = yaml.safe_load((POLICIES / "default.yaml").read_text())
    doc["spec"]["classes"]["training"]["gang"]["backend"] = "kueue"
    doc["spec"]["classes"]["training"]["kueueQueue"] = "team-a"
    return load_policy_texts([("default.yaml", yaml.safe_dump(doc))])


def test_under_kueue_the_queue_label_goes_on_the_top_object_of_every_kind():
    p = kueue_policy()
    for make in (jobset, pytorchjob, mpijob, lws, raycluster):
        d = run(p, make(), training=True)
        assert d.allowed, (make.__name__, [v.render() for v in d.violations])
        assert d.mutated["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a", make.__name__
        assert schema_errors(d.mutated) == []


def test_lws_packs_each_group_with_its_exclusive_topology_annotation(policy):
    d = run(policy, lws(), training=True)
    annotations = d.mutated["metadata"]["annotations"]
    assert annotations["leaderworkerset.sigs.k8s.io/exclusive-topology"] == "network.topology.nvidia.com/leaf"


def test_trainjob_is_judged_from_resources_per_node(policy):
    obj = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "t", "labels": TRAIN["labels"], "annotations": {"gpu-admission.io/gpus": "16"}},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {"numNodes": 2, "resourcesPerNode": {"limits": {"nvidia.com/gpu": "16"}}},
        },
    }
    d = run(policy, obj, training=True)
    assert "gpu-count-exceeded" in rules(d)
    assert all(not v.path.startswith("spec.trainer.spec") for v in d.violations), "paths name real fields"
    raw = run(policy, {**obj, "metadata": {"name": "t"}}, training=True)
    assert violation(raw, "raw-gpu-request").path == "metadata.labels"
    # (placement through spec.runtimePatches: tests/engine/test_kinds_backends.py)


@pytest.mark.parametrize("kind", ["Deployment", "StatefulSet"])
def test_class_label_on_a_controllers_own_metadata_says_where_to_move_it(policy, kind):
    obj = {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": "svc", "labels": {"gpu-admission.io/workload": "inference"}},
        "spec": {"replicas": 2, "template": tpl(None)},
    }
    d = run(policy, obj, training=True)
    v = violation(d, "intent-invalid")
    assert v.path == "metadata.labels[gpu-admission.io/workload]"
    assert "never reaches its pods" in v.message and "spec.template.metadata.labels" in v.message
    assert d.placements == (), "no GPU is promised for pods that will run without one"


def test_the_operators_pods_are_admitted_unchanged(policy):
    """What the training operator creates from the mutated template is already what the engine writes."""
    d = run(policy, pytorchjob(), training=True)
    worker = d.mutated["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "llm-worker-0", **copy.deepcopy(worker["metadata"])},
        "spec": copy.deepcopy(worker["spec"]),
    }
    again = run(policy, pod, training=True)
    assert again.patch == () and again.allowed, [v.render() for v in again.violations]


# --- a platform's own kind, declared in the policy ---------------------------------------------------

CUSTOM = """
apiVersion: gpu-admission.io/v1
kind: GPUPolicy
metadata: {name: kinds}
spec:
  workloadKinds:
    - apiVersion: example.com/v1
      kind: TrainRun
      mutate: true
      templates:
        - path: "spec.workers[*].template"
          role: "spec.workers[*].name"
          replicas:
            - {fields: ["spec.workers[*].replicas"]}
      gang: {selector: example.com/run}
      backends:
        volcano:
          - {path: spec.schedulerName, template: true, value: scheduler}
          - {path: spec.gangSize, value: size, check: below}
"""


def trainrun(gang_size: int | None = None) -> dict:
    spec: dict[str, Any] = {"workers": [{"name": "w", "replicas": 3, "template": tpl(TRAIN)}]}
    if gang_size is not None:
        spec["gangSize"] = gang_size
    return {"apiVersion": "example.com/v1", "kind": "TrainRun", "metadata": {"name": "run"}, "spec": spec}


def custom_policy_dir(tmp_path: Path) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "default.yaml").write_text((POLICIES / "default.yaml").read_text())
    (tmp_path / "kinds.yaml").write_text(CUSTOM)
    return tmp_path


def test_a_custom_kind_from_the_policy_is_mutated_and_judged(tmp_path):
    p = load_policy(custom_policy_dir(tmp_path))
    d = run(p, trainrun(), training=True)
    worker = d.mutated["spec"]["workers"][0]["template"]["spec"]
    assert worker["schedulerName"] == "volcano" and worker["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
    assert d.mutated["spec"]["gangSize"] == 3
    v = violation(run(p, trainrun(gang_size=2), training=True), "gang-incomplete")
    assert v.path == "spec.gangSize"


def test_a_custom_kind_works_through_check(tmp_path):
    p = load_policy(custom_policy_dir(tmp_path / "policy"))
    manifest = tmp_path / "run.yaml"
    manifest.write_text(yaml.safe_dump(trainrun(gang_size=1)))
    training = Namespaces("team-a", {"team-a": {"gpu-admission.io/tier": "training"}})
    results = list(check_sources(p, read_sources([str(manifest)]), namespaces=training))
    assert [r.status for r in results] == [Status.DENIED]
    assert [v.rule for v in results[0].decision.violations] == ["gang-incomplete"]
    # without the declaration the same document is not judged
    plain = list(check_sources(load_policy(POLICIES), read_sources([str(manifest)]), namespaces=training))
    assert plain[0].status is Status.SKIPPED


def test_a_kind_declared_twice_is_a_policy_error():
    doc = yaml.safe_load(CUSTOM)
    doc["spec"]["workloadKinds"].append(copy.deepcopy(doc["spec"]["workloadKinds"][0]))
    with pytest.raises(PolicyError) as exc:
        load_policy_texts([("default.yaml", (POLICIES / "default.yaml").read_text()), ("k.yaml", yaml.safe_dump(doc))])
    assert "declared twice" in str(exc.value) and "k.yaml" in str(exc.value)


def test_a_bad_template_path_is_a_located_policy_error():
    doc = yaml.safe_load(CUSTOM)
    doc["spec"]["workloadKinds"][0]["templates"][0]["path"] = "spec..workers"
    with pytest.raises(PolicyError) as exc:
        load_policy_texts([("default.yaml", (POLICIES / "default.yaml").read_text()), ("k.yaml", yaml.safe_dump(doc))])
    assert "empty segment" in str(exc.value)


def _asking(obj: Any, gpus: str) -> Any:
    """The object with every ``gpu-admission.io/gpus`` intent (templates and the object's own) set to ``gpus``."""
    if isinstance(obj, dict):
        return {
            k: (gpus if k == "gpu-admission.io/gpus" else _asking(v, gpus)) for k, v in obj.items()
        }
    if isinstance(obj, list):
        return [_asking(v, gpus) for v in obj]
    return obj


@pytest.mark.parametrize("name", sorted(KINDS))
def test_each_kinds_workload_denials(policy, name):
    """Entitlement and the class maximum are judged on the workload of every kind, at its own CREATE."""
    make, _ = KINDS[name]
    serving = {"kubernetes.io/metadata.name": "web", "gpu-admission.io/tier": "serving"}
    d = run(policy, make(), labels=serving)
    assert "class-not-allowed" in rules(d) and not d.allowed, name
    d = run(policy, _asking(make(), "16"), training=True)
    assert "gpu-count-exceeded" in rules(d) and not d.allowed, name


@pytest.mark.parametrize("name", ["PyTorchJob", "TFJob", "MPIJob"])
def test_each_kubeflow_kinds_partial_gang_is_gang_incomplete(policy, name):
    obj = KINDS[name][0]()
    obj["spec"]["runPolicy"] = {"schedulingPolicy": {"minAvailable": 1}}
    v = violation(run(policy, obj, training=True), "gang-incomplete")
    assert v.path == "spec.runPolicy.schedulingPolicy.minAvailable", name

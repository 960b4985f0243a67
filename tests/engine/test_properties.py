"""Property-based: random intents over random pre-existing fields always give a patch that applies with
``jsonpatch``, equals the engine's own mutated object, and is idempotent; JSON Pointer escaping holds for
any key."""

from __future__ import annotations

import copy

import jsonpatch
import jsonpointer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import TRAINING_NS
from webhook.engine import Request, report
from webhook.engine.patch import PatchBuilder, pointer

KEY_CHARS = st.sampled_from(list("abz09-._/~"))
keys = st.text(KEY_CHARS, min_size=1, max_size=12)
small_maps = st.dictionaries(keys, st.text(max_size=6), max_size=3)

classes = st.sampled_from(["inference", "batch", "dev", "training", "nope"])
memories = st.sampled_from(["1Gi", "4Gi", "4096Mi", "5Gi", "9.5Gi", "20G", "40Gi", "41Gi", "bad", "0"])
isolations = st.sampled_from(["mig", "shared", "exclusive", "x"])
topologies = st.sampled_from(["node", "switch", "switch:required", "rack", "none", "bogus"])


@st.composite
def intent_objects(draw):
    annotations = {}
    if draw(st.booleans()):
        annotations["gpu-admission.io/gpu-memory"] = draw(memories)
    if draw(st.booleans()):
        annotations["gpu-admission.io/gpus"] = str(draw(st.integers(0, 12)))
    if draw(st.booleans()):
        annotations["gpu-admission.io/isolation"] = draw(isolations)
    if draw(st.booleans()):
        annotations["gpu-admission.io/rdma"] = draw(st.sampled_from(["true", "false"]))
    if draw(st.booleans()):
        annotations["gpu-admission.io/topology"] = draw(topologies)
    annotations.update(draw(small_maps))
    if draw(st.booleans()):
        annotations["k8s.v1.cni.cncf.io/networks"] = draw(
            st.sampled_from(["a", "ns/b@net2", '[{"name":"x"}]', "rdma-net-a@net1", ""])
        )
    labels = {"gpu-admission.io/workload": draw(classes), **draw(small_maps)}
    container = {"name": "main", "image": "img"}
    resources = {}
    if draw(st.booleans()):
        resources["limits"] = {"nvidia.com/gpu": str(draw(st.integers(1, 4))), "cpu": "1"}
    if draw(st.booleans()):
        resources["requests"] = dict(resources.get("limits", {"cpu": "1"}))
    if resources:
        container["resources"] = resources
    if draw(st.booleans()):
        container["env"] = [{"name": "NCCL_IB_HCA", "value": "mlx5_1"}]
    if draw(st.booleans()):
        container["securityContext"] = {"capabilities": {"add": ["NET_ADMIN"]}}
    spec = {"containers": [container]}
    if draw(st.booleans()):
        spec["nodeSelector"] = draw(small_maps)
    if draw(st.booleans()):
        spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    if draw(st.booleans()):
        spec["volumes"] = [{"name": "dshm", "emptyDir": {}}]
    meta = {"labels": labels, "annotations": annotations}
    shape = draw(st.sampled_from(["pod", "job", "vcjob"]))
    if shape == "pod":
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", **meta}, "spec": spec}
    if shape == "job":
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "j"},
            "spec": {"parallelism": draw(st.integers(1, 20)), "template": {"metadata": meta, "spec": spec}},
        }
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "v"},
        "spec": {
            "tasks": [{"name": "w", "replicas": draw(st.integers(1, 20)), "template": {"metadata": meta, "spec": spec}}]
        },
    }


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(obj=intent_objects(), training=st.booleans())
def test_patch_applies_equals_mutated_and_is_idempotent(policy, obj, training):
    labels = TRAINING_NS if training else None
    before = copy.deepcopy(obj)
    d = report(policy, Request(obj, namespace="ns", namespace_labels=labels))
    assert obj == before
    applied = jsonpatch.apply_patch(obj, list(d.patch))
    assert applied == d.mutated
    again = report(policy, Request(applied, namespace="ns", namespace_labels=labels))
    assert again.patch == ()
    assert [v.rule for v in again.violations] == [v.rule for v in d.violations] or not d.patch


@given(key=st.text(min_size=1, max_size=20))
def test_json_pointer_escaping_round_trips_any_key(key):
    doc = {"metadata": {"annotations": {"other": "x"}}}
    builder = PatchBuilder(doc)
    builder.set(("metadata", "annotations", key), "v")
    applied = jsonpatch.apply_patch(doc, builder.ops)
    assert applied["metadata"]["annotations"][key] == "v"
    assert jsonpointer.resolve_pointer(applied, pointer(("metadata", "annotations", key))) == "v"
    assert builder.doc == applied and doc == {"metadata": {"annotations": {"other": "x"}}}


@given(key=keys, value=st.text(max_size=5))
def test_missing_parents_are_created_once(key, value):
    builder = PatchBuilder({"spec": {}})
    builder.set(("spec", "template", "metadata", "labels", key), value)
    builder.set(("spec", "template", "metadata", "annotations", key), value)
    assert builder.ops[0] == {"op": "add", "path": "/spec/template", "value": {"metadata": {"labels": {key: value}}}}
    assert builder.ops[1]["path"] == "/spec/template/metadata/annotations"
    assert jsonpatch.apply_patch({"spec": {}}, builder.ops) == builder.doc

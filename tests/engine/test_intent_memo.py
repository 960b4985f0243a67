"""The intent a template's annotations spell is remembered on the policy; remembering must never change it.

``read_intent`` keys its memo by the class, where the class label was found, the template's path and
every intent annotation present with its value and whether the template or the workload's metadata
holds it. These tests read intents through a memo that other requests have filled first and compare
each with a fresh reading (``_read``, no memo): same ``Intent``, field for field, paths and error
messages included. The ``container`` key is judged against the template's containers and is never
remembered."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from webhook.engine.model.intent import _read, read_intent
from webhook.engine.model.workload import Template

VALUES = ("8", "0", "-1", "4Gi", "4096", "20G", "mig", "shared", "exclusive", "bogus", "A100-40GB", "true", "FALSE",
          "team-a", "Team_A", "switch", "rack:required", "none", "infer-a100", "", " 2 ")


def _template(path: tuple, annotations: dict, containers: tuple[str, ...] = ("main", "side")) -> Template:
    meta = {"annotations": annotations}
    spec = {"containers": [{"name": n, "image": "i"} for n in containers]}
    return Template(path, meta, spec, 1, None, True, False, (), None)


def _fresh(policy, obj, tpl, class_name, class_path):
    """What ``read_intent`` computes, with no memo at all."""
    own = tpl.metadata.get("annotations") or {}
    meta_ann = obj.get("metadata", {}).get("annotations") if tpl.path != () else None
    outer = meta_ann if isinstance(meta_ann, dict) else {}
    present = policy.keys.annotations.intersection(own) | policy.keys.annotations.intersection(outer)
    return _read(policy, tpl, class_name, class_path, present, own, outer) if present else None


annotations = st.dictionaries(st.sampled_from(("gpus", "gpu-memory", "isolation", "gpu-model", "pool", "rdma", "gang",
                                               "gang-size", "topology", "container")),
                              st.sampled_from(VALUES), max_size=5)


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(batch=st.lists(st.tuples(annotations, annotations, st.booleans(), st.sampled_from(("training", "inference"))),
                      min_size=1, max_size=6))
def test_a_remembered_intent_is_the_intent_read_fresh(policy, batch):
    prefix = policy.settings.prefix
    for own_keys, outer_keys, nested, class_name in batch:
        own = {f"{prefix}/{k}": v for k, v in own_keys.items()}
        outer = {f"{prefix}/{k}": v for k, v in outer_keys.items()}
        obj = {"metadata": {"annotations": outer}}
        tpl = _template(("spec", "template") if nested else (), own)
        got = read_intent(policy, obj, tpl, class_name, "metadata.labels")
        again = read_intent(policy, obj, tpl, class_name, "metadata.labels")
        fresh = _fresh(policy, obj, tpl, class_name, "metadata.labels")
        assert got == again
        if fresh is not None:
            assert got == fresh


def test_the_same_values_at_another_place_are_another_intent(policy):
    """A key on the workload's metadata and the same key on the template name different fields."""
    prefix = policy.settings.prefix
    bad = {f"{prefix}/gpus": "zero"}
    on_template = read_intent(policy, {"metadata": {}}, _template(("spec", "template"), bad), "training", "x")
    on_workload = read_intent(policy, {"metadata": {"annotations": bad}}, _template(("spec", "template"), {}),
                              "training", "x")
    assert on_template.errors[0][0] == f"spec.template.metadata.annotations[{prefix}/gpus]"
    assert on_workload.errors[0][0] == f"metadata.annotations[{prefix}/gpus]"


def test_the_container_key_is_judged_against_each_templates_containers(policy):
    """Same annotations, different containers: the memo must not carry one template's answer to another."""
    prefix = policy.settings.prefix
    ann = {f"{prefix}/container": "side", f"{prefix}/gpus": "2"}
    has_it = read_intent(policy, {"metadata": {}}, _template((), ann, ("main", "side")), "training", "x")
    lacks_it = read_intent(policy, {"metadata": {}}, _template((), ann, ("main",)), "training", "x")
    assert has_it.container == "side" and not has_it.errors
    assert lacks_it.container is None and lacks_it.errors


def test_a_value_that_is_not_a_string_is_read_not_remembered(policy):
    prefix = policy.settings.prefix
    ann = {f"{prefix}/gpus": ["8"]}  # the API refuses it; the engine must still not crash or remember it
    first = read_intent(policy, {"metadata": {}}, _template((), ann), "training", "x")
    assert first.errors


def test_long_values_are_read_not_remembered(policy):
    """An attacker's pods with 100 KiB intent values, each different, must not fill the policy's memo with them
    (4,096 keys of 100 KiB would be 400 MiB per policy and worker)."""
    prefix = policy.settings.prefix
    before = len(policy.memo)
    for i in range(50):
        ann = {f"{prefix}/gpus": f"{i}" + "9" * 100_000}
        intent = read_intent(policy, {"metadata": {}}, _template((), ann), "training", "x")
        assert intent.errors  # still judged
    assert len(policy.memo) <= before + 1
    assert all(len(str(k)) < 10_000 for k in policy.memo)

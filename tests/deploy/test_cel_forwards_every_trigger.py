"""The rendered ``matchConditions`` forward everything the engine treats as a GPU trigger, for every kind.

The matchConditions are the webhook's first filter: an object they skip is stored unjudged, whatever
the engine would have said. So the property is walked exhaustively, not sampled: for every kind of
the policy's kind table (the built-ins and a ``workloadKinds`` entry of the test's own policy) and
every trigger the engine knows (each GPU resource prefix in limits, requests and init containers, the
intent label, a DRA claim, a DeviceClass-mapped extended resource, each GPU-fraction annotation,
each way past the device grant in a template that tolerates a GPU pool's taints or names a node),
placed in each pod template of the kind in turn: whenever the engine judges the object GPU-relevant,
each webhook whose ``rules`` match the CREATE is called, and the validating webhook is called for the
UPDATE that adds the trigger to a plain object. The control (the same object without the trigger) is
skipped, so the CEL is not merely always true.

API-server semantics (rules, the conditions in order, ``request.resource``/``subResource`` as the
apiserver fills them) are emulated by ``cel_match``, with cel-python standing in for cel-go, and
independently of the renderer. Found this way: KAI GPU-fraction pods were never sent (the CEL knew no
fraction annotation), a TrainingRuntime's templates were never read (the ``spec.template`` shape test
of Jobs matched it first), a TrainJob whose runtime patch carries the class label or a privileged
container was skipped.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from tests.conftest import POLICIES
from tests.deploy.cel_match import CALL, RESOURCES, SKIP, Webhook, unguarded_has
from webhook.engine import Request, report
from webhook.policy import load_policy_texts
from webhook.policy.kinds import CompiledKind, Wild
from webhook.render import render

FRACTION_KEYS = ["gpu-fraction", "gpu-memory", "example.com/gpu-share"]
OWN_KIND = {  # a platform's own CRD, declared in the policy
    "apiVersion": "example.com/v1",
    "kind": "TrainRun",
    "mutate": True,
    "templates": [{"path": "spec.workers[*].template", "replicas": [{"fields": ["spec.workers[*].replicas"]}]}],
    "scale": {"replicas": "spec.size"},
}


def _policy():
    doc = yaml.safe_load((POLICIES / "default.yaml").read_text())
    doc["spec"]["settings"]["gpuFractionAnnotations"] = FRACTION_KEYS
    doc["spec"]["workloadKinds"] = [OWN_KIND]
    return load_policy_texts([("default.yaml", yaml.safe_dump(doc))])


POLICY = _policy()


@pytest.fixture(scope="module")
def webhooks() -> dict[str, Webhook]:
    docs = render(POLICY)
    (mut,) = next(d for d in docs if d["kind"] == "MutatingWebhookConfiguration")["webhooks"]
    (val,) = next(d for d in docs if d["kind"] == "ValidatingWebhookConfiguration")["webhooks"]
    return {"mutating": Webhook(mut), "validating": Webhook(val)}


# --- objects of every kind, built from the kind table's paths ----------------------------------------


def _plain_template() -> dict[str, Any]:
    return {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "main", "image": "busybox"}]}}


def _at(path: tuple, leaf: Any) -> Any:
    """A document holding ``leaf`` at ``path``: one list item or one map entry per wildcard, each
    with the name and count their controllers read."""
    if not path:
        return leaf
    head, rest = path[0], path[1:]
    if head is Wild.LIST:
        return [{"name": "worker", "replicas": 2, **_at(rest, leaf)}]
    if head is Wild.MAP:
        return {"Worker": {"replicas": 2, **_at(rest, leaf)}}
    return {head: _at(rest, leaf)}


def _merge(into: dict, more: dict) -> None:
    for key, value in more.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def build(kind: CompiledKind, triggered: int | None, change=None) -> dict[str, Any]:
    """An object of ``kind`` with a plain pod template at every template path; the one at index
    ``triggered`` (of the kind's templates) gets ``change(template)``."""
    obj: dict[str, Any] = {
        "apiVersion": kind.api_version,
        "kind": kind.kind,
        "metadata": {"name": "x", "namespace": "team-a"},
    }
    for i, rule in enumerate(kind.templates):
        tpl = _plain_template()
        if i == triggered and change is not None:
            change(tpl)
        if rule.resources is not None:  # TrainJob: the node container's resources, the rest in a patch
            res = tpl["spec"]["containers"][0].pop("resources", None)
            if res is not None:
                _merge(obj, _at(rule.resources, res))
            if rule.patches is not None and (
                tpl["metadata"] != _plain_template()["metadata"]
                or len(tpl["spec"]) > 1
                or tpl["spec"]["containers"][0] != {"name": "main", "image": "busybox"}
            ):
                tpl["spec"]["containers"][0]["name"] = rule.container
                job = {"name": rule.patch_job, "template": {"spec": {"template": tpl}}}
                patch = {
                    "manager": "team.example.com/tool",
                    "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [job]}}},
                }
                _merge(obj, _at(rule.patches, [patch]))
            continue
        _merge(obj, _at(rule.path, tpl) if rule.path else tpl)
    return obj


def _c(tpl: dict, group: str = "containers") -> dict:
    if group == "initContainers":
        tpl["spec"]["initContainers"] = [{"name": "init", "image": "busybox"}]
    return tpl["spec"][group][0]


def _resource(name: str, section: str = "limits", group: str = "containers"):
    def change(tpl: dict) -> None:
        _c(tpl, group).setdefault("resources", {}).setdefault(section, {})[name] = "1"
        if section == "requests":  # requests only: the apiserver rejects it for a Pod, not in a CRD's template
            pass

    return change


def _label(tpl: dict) -> None:
    tpl["metadata"]["labels"][POLICY.keys.workload] = "training"


def _annotation(key: str):
    def change(tpl: dict) -> None:
        tpl["metadata"].setdefault("annotations", {})[key] = "0.5"

    return change


def _claim(tpl: dict) -> None:
    tpl["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    _c(tpl).setdefault("resources", {})["claims"] = [{"name": "gpu"}]


BLANKET = [{"operator": "Exists"}]
DEVICE_WAYS = {
    "privileged": {"securityContext": {"privileged": True}},
    "SYS_ADMIN": {"securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}},
    "NVIDIA_VISIBLE_DEVICES": {"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]},
    "NVIDIA_DRIVER_CAPABILITIES": {"env": [{"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "all"}]},
    "envFrom": {"envFrom": [{"configMapRef": {"name": "c"}}]},
    "hostPath /dev": {"volumeMounts": [{"name": "h", "mountPath": "/h"}]},
    "hostPath /proc/1/root": {"volumeMounts": [{"name": "p", "mountPath": "/h"}]},
    "hostPath /sys": {"volumeMounts": [{"name": "s", "mountPath": "/h"}]},
}
VOLUMES = {
    "hostPath /dev": {"name": "h", "hostPath": {"path": "/dev"}},
    "hostPath /proc/1/root": {"name": "p", "hostPath": {"path": "/proc/1/root"}},
    "hostPath /sys": {"name": "s", "hostPath": {"path": "//sys/bus/pci/devices/"}},
}


def _device(way: str, *, node_name: bool = False):
    def change(tpl: dict) -> None:
        _c(tpl).update(copy.deepcopy(DEVICE_WAYS[way]))
        if way in VOLUMES:
            tpl["spec"]["volumes"] = [copy.deepcopy(VOLUMES[way])]
        if node_name:
            tpl["spec"]["nodeName"] = "gpu-node-7"
        else:
            tpl["spec"]["tolerations"] = copy.deepcopy(BLANKET)

    return change


def _resource_name(prefix: str) -> str:
    return prefix + "x" if prefix.endswith(("-", "/", ".")) else prefix


def triggers() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for i, prefix in enumerate(POLICY.gpu_prefixes):
        name = _resource_name(prefix)
        out[f"limit {name}"] = _resource(name)
        if i == 0:  # where in the pod a resource sits is the same test for every prefix
            out[f"request {name}"] = _resource(name, "requests")
            out[f"init limit {name}"] = _resource(name, group="initContainers")
    out["DeviceClass extended resource"] = _resource("deviceclass.resource.kubernetes.io/gpu.nvidia.com")
    out["intent label"] = _label
    out["resource claim"] = _claim
    for key in POLICY.fraction_keys:
        out[f"fraction annotation {key}"] = _annotation(key)
    for way in DEVICE_WAYS:
        out[f"{way}, tolerating every taint"] = _device(way)
    for way in ("privileged", "hostPath /proc/1/root"):  # the node test does not depend on the way
        out[f"{way}, naming a node"] = _device(way, node_name=True)
    return out


TRIGGERS = triggers()
KINDS = {f"{k.api_version} {k.kind}": k for k in POLICY.kinds.values() if k.spec.scope == "Namespaced"}


def _resource_of(kind: CompiledKind) -> tuple[str, str, str]:
    group, _, version = kind.api_version.rpartition("/")
    return RESOURCES.get((kind.api_version, kind.kind)) or (group, version, kind.spec.plural)


def _relevant(obj: dict[str, Any], **kw: Any) -> bool:
    return report(POLICY, Request(obj, namespace="team-a", **kw)).relevant


def test_the_walk_covers_the_kind_table_and_every_kind_of_trigger():
    assert {"v1 Pod", "trainer.kubeflow.org/v1alpha1 TrainingRuntime", "example.com/v1 TrainRun",
            "kubeflow.org/v1 MPIJob", "trainer.kubeflow.org/v1alpha1 TrainJob"} <= set(KINDS)  # fmt: skip
    assert {f"fraction annotation {k}" for k in FRACTION_KEYS} <= set(TRIGGERS)
    assert len(TRIGGERS) >= len(POLICY.gpu_prefixes) + len(FRACTION_KEYS) + len(DEVICE_WAYS) + 5


@pytest.mark.parametrize("name", sorted(KINDS))
def test_every_trigger_in_every_template_of_the_kind_is_forwarded(webhooks, name):
    kind = KINDS[name]
    group, version, resource = _resource_of(kind)
    create = [h for h in webhooks.values() if h.matches_rules(group, resource, "CREATE")]
    assert create, f"{name}: no webhook intercepts {group}/{resource}"
    validating = webhooks["validating"]
    assert validating.matches_rules(group, resource, "UPDATE")
    plain = build(kind, None)
    assert not _relevant(plain), name
    for hook in create:
        assert hook.decide(plain, resource=(group, version, resource)) == SKIP, (name, hook.name)
    judged = 0
    for index in range(len(kind.templates)):
        for trigger, change in TRIGGERS.items():
            obj = build(kind, index, change)
            if obj == plain or not _relevant(obj):
                continue  # the engine reads no such field in this template (TrainJob's fields)
            judged += 1
            for hook in create:
                outcome = hook.evaluate(obj, resource=(group, version, resource))
                assert not outcome.errors, (name, index, trigger, hook.name, outcome.errors)
                assert outcome.decision == CALL, (name, index, trigger, hook.name, outcome.results)
            outcome = validating.evaluate(obj, operation="UPDATE", old=plain, resource=(group, version, resource))
            assert outcome.decision == CALL, (name, index, trigger, "UPDATE", outcome.results)
    if all(t.resources is None for t in kind.templates):
        assert judged == len(TRIGGERS) * len(kind.templates), judged  # each is a trigger in every template
    else:  # TrainJob: GPU resources in resourcesPerNode, a way past the grant in a runtime patch
        assert judged >= 5, judged


@pytest.mark.parametrize("key", FRACTION_KEYS)
def test_a_fraction_annotation_added_to_a_pod_by_update_is_validated(webhooks, key):
    """KAI reads ``gpu-fraction`` from the pod when it schedules it: a gated or pending CPU pod that
    gains the annotation becomes a GPU pod of the training pool, with nothing in its spec changed."""
    kind = POLICY.kinds[("v1", "Pod")]
    old = build(kind, None)
    new = build(kind, 0, _annotation(key))
    assert new["spec"] == old["spec"] and _relevant(new, operation="UPDATE", old_object=old)
    outcome = webhooks["validating"].evaluate(new, operation="UPDATE", old=old)
    assert not outcome.errors and outcome.decision == CALL, outcome.results
    same = copy.deepcopy(new)
    same["metadata"]["resourceVersion"] = "2"
    assert webhooks["validating"].decide(same, operation="UPDATE", old=new) == SKIP  # nothing judged changed


def test_the_conditions_stay_has_guarded(webhooks):
    for hook in webhooks.values():
        for name, expr, _ in hook.conditions:
            assert unguarded_has(expr) == [], (hook.name, name)


# --- scale: the count the gang rules read, changed without the object -------------------------------

SCALED = sorted(name for name, kind in KINDS.items() if kind.scale is not None)


def _scale(replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": {"name": "x", "namespace": "team-a"},
        "spec": {"replicas": replicas},
        "status": {"replicas": 1, "selector": "app=x"},
    }


def test_the_scaled_kinds_are_the_ones_whose_crds_serve_a_scale():
    assert set(SCALED) == {
        "apps/v1 Deployment", "apps/v1 StatefulSet", "apps/v1 ReplicaSet", "kubeflow.org/v1 PyTorchJob",
        "kubeflow.org/v1 PaddleJob", "kubeflow.org/v1 JAXJob", "leaderworkerset.x-k8s.io/v1 LeaderWorkerSet",
        "example.com/v1 TrainRun",
    }  # fmt: skip


@pytest.mark.parametrize("name", SCALED)
def test_a_scale_up_of_every_scaled_kind_reaches_validate(webhooks, name):
    group, version, resource = _resource_of(KINDS[name])
    hook = webhooks["validating"]
    assert hook.matches_rules(group, f"{resource}/scale", "UPDATE")
    assert not webhooks["mutating"].matches_rules(group, f"{resource}/scale", "UPDATE")
    where = {"resource": (group, version, resource), "sub_resource": "scale", "operation": "UPDATE"}
    outcome = hook.evaluate(_scale(8), old=_scale(1), **where)
    assert not outcome.errors and outcome.decision == CALL, outcome.results
    assert hook.decide(_scale(1), old=_scale(8), **where) == SKIP  # a smaller count makes no gang larger
    assert hook.decide(_scale(3), old=_scale(3), **where) == SKIP


# --- host paths that reach the host's devices ------------------------------------------------------

HOST_PATHS = ["/proc/1/root/dev", "/proc/1/root", "/proc/self/root/", "/proc", "//proc//1/root", "/./proc/./1/root",
              "/sys", "/sys/", "/sys/bus/pci/devices", "proc/1/root", "/var/../sys"]  # fmt: skip


@pytest.mark.parametrize("path", HOST_PATHS)
def test_host_paths_reaching_the_host_devices_through_proc_and_sys_are_forwarded(webhooks, path):
    spec = {
        "containers": [{"name": "c", "image": "i", "volumeMounts": [{"name": "h", "mountPath": "/h"}]}],
        "volumes": [{"name": "h", "hostPath": {"path": path}}],
        "tolerations": BLANKET,
    }
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", "namespace": "team-a"}, "spec": spec}
    assert _relevant(obj), path
    for hook in webhooks.values():
        outcome = hook.evaluate(obj)
        assert not outcome.errors and outcome.decision == CALL, (path, hook.name, outcome.results)


def test_this_file_builds_objects_the_engine_reads_where_its_controller_does():
    """The builder's own check: a class label in each pod template of each kind is read by the engine
    (TrainJob has none of its own: its class label is on the TrainJob)."""
    for name, kind in KINDS.items():
        for index, rule in enumerate(kind.templates):
            if rule.resources is not None:
                continue
            obj = build(kind, index, _label)
            assert _relevant(obj), (name, index)

"""Never stricter than the engine: the rendered in-tree policies and the engine judge the same stored objects.

No kube-apiserver runs here. ``tests/intree/apiserver.py`` emulates how it evaluates the rendered
ValidatingAdmissionPolicies (match constraints and binding, matchConditions, lazy variables,
validations, messageExpression, failurePolicy, ``namespaceObject``, ``request.userInfo``) with cel-python,
and ``tests/intree/stored.py`` what it stores (defaulting, ServiceAccount, DefaultTolerationSeconds,
Priority). Every object is judged in both worlds (``tests/intree/differential.py``): webhook down (stored
as written) and engine up (the real engine's ``/mutate`` patch applied, then re-defaulted); UPDATE cases
of the policy test suites as stored against their old object.

Sources: every shipped example object, the real-world corpus (``../shared/realworld``, skipped when
absent), every case of the policy test suites (``policies/tests``, ``examples/dra-policy/tests``), the
raw-request attacks of ``tests/engine/test_reach_attacks.py``, and the scheduler oracle's generated
workloads and the pods their controllers create (``tests/oracle``, hypothesis, ``derandomize``: the same
examples on every run). Policies: the shipped one, the test policies (``tests/engine/policies``,
``examples/dra-policy``) and a variant with per-namespace and per-class actions, exemptions and
``rawRequests: deny``.

The property for every object: the in-tree policies deny nothing the engine admits, and no in-tree
expression errors. ``INTREE_EXAMPLES`` sets the oracle examples per policy (default 25).
"""

from __future__ import annotations

import copy
import functools
import itertools
import os

import pytest
import yaml
from hypothesis import HealthCheck, given, settings

from tests.conftest import CORPUS, POLICIES, ROOT, need_shared
from tests.engine.test_reach_attacks import RAW_ATTACKS
from tests.intree.conftest import NAMES, in_tree, policy_named
from tests.intree.differential import Differential, Figures
from tests.oracle.cluster import read_policy
from tests.oracle.controllers import pods_of
from tests.oracle.workloads import scenarios
from webhook.engine.model.cluster import Cluster
from webhook.policytest.load import discover, load_suites

EXAMPLES = int(os.environ.get("INTREE_EXAMPLES", "25"))
SERVING = {"gpu-admission.io/tier": "serving"}
SANDBOX = {"gpu-admission.io/tier": "sandbox"}
FIGURES: dict[str, Figures] = {}
KEY = "gpu-admission.io/workload"


@functools.cache
def differential(name: str) -> Differential:
    return Differential(policy_named(name), list(in_tree(name)))


def _labels(name: str) -> list[dict[str, str]]:
    """A namespace matching each entitlement of the policy, and an unlabelled one."""
    out: list[dict[str, str]] = [{}]
    for ent in policy_named(name).namespaces:
        if ent.selector.match_labels and dict(ent.selector.match_labels) not in out:
            out.append(dict(ent.selector.match_labels))
    return out


def _objects(path) -> list[dict]:
    out = []
    for doc in yaml.safe_load_all(path.read_text()):
        if isinstance(doc, dict) and isinstance(doc.get("kind"), str) and isinstance(doc.get("metadata"), dict):
            if doc.get("apiVersion", "").startswith("gpu-admission.io/"):
                continue  # policies and test suites, not workloads
            out.append(doc)
    return out


def _examples() -> list[tuple[str, dict]]:
    files = sorted((POLICIES / "tests" / "objects").glob("*.yaml")) + sorted((ROOT / "examples").rglob("*.yaml"))
    return [(str(f.relative_to(ROOT)), o) for f in files for o in _objects(f)]


def _check(name: str, source: str, d: Differential, before: Figures) -> None:
    now = d.figures
    part = Figures(
        compared=now.compared - before.compared,
        engine_denied=now.engine_denied - before.engine_denied,
        in_tree_denied=now.in_tree_denied - before.in_tree_denied,
        both_denied=now.both_denied - before.both_denied,
        by_rule=now.by_rule - before.by_rule,
        disagreements=now.disagreements[len(before.disagreements) :],
        errors=now.errors[len(before.errors) :],
    )
    FIGURES.setdefault(f"{name}/{source}", Figures()).add(part)
    print(f"\n{name}/{source}: {part.summary()}")
    assert not part.errors, "in-tree expressions errored (failurePolicy Fail denies):\n" + "\n".join(part.errors[:5])
    assert not part.disagreements, "in-tree denies what the engine admits:\n" + "\n\n".join(part.disagreements[:3])


def _snapshot(d: Differential) -> Figures:
    f = d.figures
    return Figures(
        f.compared,
        f.engine_denied,
        f.in_tree_denied,
        f.both_denied,
        by_rule=f.by_rule.copy(),
        disagreements=list(f.disagreements),
        errors=list(f.errors),
    )


@pytest.mark.parametrize("name", NAMES)
def test_shipped_examples(name):
    d = differential(name)
    before = _snapshot(d)
    for labels in _labels(name):
        for source, obj in _examples():
            d.create(obj, namespace="team-a", labels=labels, source=source)
    assert d.figures.compared > before.compared
    _check(name, "examples", d, before)


@pytest.mark.parametrize("name", ["default", "providers", "dra-example"])
def test_realworld_corpus(name):
    files = sorted(need_shared(CORPUS).rglob("*.yaml"))
    d = differential(name)
    before = _snapshot(d)
    label_sets = _labels(name) if name == "default" else [{}]
    for labels in label_sets:
        for f in files:
            for obj in _objects(f):
                d.create(obj, namespace="team-a", labels=labels, source=f.name)
    assert d.figures.compared > before.compared
    _check(name, "corpus", d, before)


SUITES = [POLICIES, ROOT / "examples" / "dra-policy"]


@pytest.mark.parametrize("name", NAMES)
def test_policy_test_suites(name):
    files, _ = discover(SUITES)
    d = differential(name)
    before = _snapshot(d)
    for suite in load_suites(files):
        for case in suite.cases:
            namespace = case.case.namespace or (case.obj.get("metadata") or {}).get("namespace") or "default"
            labels = dict(case.namespace_labels or {})
            if case.case.operation == "UPDATE" and case.old is not None:
                d.update(case.obj, case.old, namespace=namespace, labels=labels, source=case.id)
            else:
                d.create(case.obj, namespace=namespace, labels=labels, source=case.id)
    assert d.figures.compared > before.compared
    _check(name, "suites", d, before)


@pytest.mark.parametrize("name", ["default", "variant"])
def test_raw_request_attacks(name):
    d = differential(name)
    before = _snapshot(d)
    for attack, spec in sorted(RAW_ATTACKS.items()):
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "raw"},
            "spec": {
                "containers": [{"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
                **copy.deepcopy(spec),
            },
        }
        for labels in (SERVING, SANDBOX, {}):
            d.create(pod, namespace="team-a", labels=labels, source=f"attack: {attack}")
    _check(name, "attacks", d, before)


ORACLE = {
    "default": POLICIES / "default.yaml",
    "providers": ROOT / "tests" / "engine" / "policies" / "providers.yaml",
    "dra-example": ROOT / "examples" / "dra-policy" / "policy.yaml",
}


@pytest.mark.parametrize("name", sorted(ORACLE))
def test_oracle_workloads(name):
    facts = read_policy(yaml.safe_load(ORACLE[name].read_text()))
    d = differential(name)
    before = _snapshot(d)

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )
    @given(scenarios(facts))
    def run(scenario):
        cluster = Cluster()
        if scenario.known is not None:
            cluster = Cluster(nodes=tuple(n.as_k8s() for n in scenario.nodes if n.name in scenario.known))
        stored = d.create(
            scenario.obj,
            namespace=scenario.namespace,
            labels=scenario.namespace_labels,
            source="oracle",
            cluster=cluster,
        )
        for pod in pods_of(stored, scenario.nodes) if stored is not None else ():
            pod.setdefault("metadata", {})
            d.create(
                pod,
                namespace=scenario.namespace,
                labels=scenario.namespace_labels,
                source="oracle pod",
                cluster=cluster,
            )

    run()
    assert d.figures.compared > before.compared
    _check(name, "oracle", d, before)


def _gang_jobs() -> list[dict]:
    """batch Jobs of every class of the gangs policy (tests/intree/policies): pod counts around 1,
    completions capping parallelism, each backend's keys present or not, a named and a generateName Job,
    a template scheduler that is not the backend's."""
    keys = [
        ({}, {}),
        ({"scheduling.volcano.sh/group-min-member": "3"}, {}),
        ({}, {"kueue.x-k8s.io/queue-name": "q"}),
        ({"kai.scheduler/batch-min-member": "3"}, {"kai.scheduler/queue": "q"}),
    ]
    out = []
    classes = ["volcano-train", "kueue-train", "cosched-train", "kai-train", "lone-train", "loose"]
    for cls, (parallelism, completions), (notes, labels), named, scheduler in itertools.product(
        classes, [(None, None), (1, None), (3, None), (3, 1), (3, 2), (2, 8)], keys, [True, False], [None, "other"]
    ):
        if scheduler and not named:
            continue
        template = {
            "metadata": {"labels": {KEY: cls, **({"scheduling.x-k8s.io/pod-group": "g"} if labels else {})}},
            "spec": {"containers": [{"name": "w", "image": "t:1"}], "restartPolicy": "Never"},
        }
        if scheduler:
            template["spec"]["schedulerName"] = scheduler
        spec: dict = {"template": template}
        if parallelism is not None:
            spec["parallelism"] = parallelism
        if completions is not None:
            spec["completions"] = completions
        meta = {"name": "train"} if named else {"generateName": "train-"}
        meta.update({"annotations": dict(notes), "labels": dict(labels)})
        out.append({"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec})
    return out


def _sweeps() -> list[dict]:
    """Sweeps (the gangs policy's own kind): the pod count from spec.workers, else spec.legacyWorkers, else
    2, capped by spec.maxWorkers (a string never counts); each backend's keys present or not."""
    counts = [{}, {"workers": 1}, {"workers": 4}, {"workers": "4"}, {"legacyWorkers": 1}, {"legacyWorkers": 3},
              {"workers": 4, "maxWorkers": 1}, {"workers": 4, "maxWorkers": 2}, {"workers": 0}]  # fmt: skip
    keys = [
        ({}, {}, {}),
        ({}, {"example.com/gang": "on"}, {"gangSize": 4}),
        ({"example.com/queue": "q"}, {"example.com/gang": "on"}, {}),
        ({"kai.scheduler/batch-min-member": "4"}, {"kueue.x-k8s.io/queue-name": "q"}, {}),
    ]
    out = []
    classes = ["volcano-train", "kueue-train", "cosched-train", "kai-train", "lone-train", "loose"]
    for cls, count, (notes, labels, extra) in itertools.product(classes, counts, keys):
        template = {
            "metadata": {"labels": {KEY: cls}},
            "spec": {"containers": [{"name": "w", "image": "t:1"}], "restartPolicy": "Never"},
        }
        meta = {"name": "sweep", "annotations": dict(notes), "labels": dict(labels)}
        spec = {"template": template, **count, **extra}
        out.append({"apiVersion": "example.com/v1", "kind": "Sweep", "metadata": meta, "spec": spec})
    return out


GANG_PARTS = (
    "create, unlabelled namespace, even jobs", "create, unlabelled namespace, odd jobs",
    "create, lenient namespace, even jobs", "create, lenient namespace, odd jobs", "update",
)  # fmt: skip


@pytest.mark.parametrize("part", GANG_PARTS)
def test_gang_jobs(part):
    """gang-required in-tree: every Job and Sweep CREATE in both worlds, and UPDATEs that drop or add gang keys.

    Five parts of one corpus (each namespace's CREATEs, every other Job each, then the UPDATEs), each asserting
    the whole property on its share (gang-required's in-tree denials on the unlabelled CREATEs, where all of
    them are): the suite's slowest test (the emulated apiserver's CEL, about two minutes), split so that
    parallel workers share it evenly."""
    d = differential("gangs")
    before = _snapshot(d)
    jobs = _gang_jobs() + _sweeps()
    if part.startswith("create"):
        labels = {"gpu-admission.io/tier": "lenient"} if "lenient" in part else {}
        for job in jobs[part.endswith("odd jobs") :: 2]:
            d.create(job, namespace="team-a", labels=labels, source="gang job")
    else:
        for old, new in itertools.product(jobs[:: len(jobs) // 12 or 1], repeat=2):
            same_template = old["spec"]["template"]["metadata"] == new["spec"]["template"]["metadata"]
            if old["kind"] == new["kind"] and same_template:
                d.update(new, old, namespace="team-a", labels={}, source="gang job update")
        for old in jobs:  # an UPDATE that drops the Job's own gang keys (a foreign template scheduler included)
            if old["metadata"]["annotations"] or old["metadata"]["labels"]:
                new = copy.deepcopy(old)
                new["metadata"]["annotations"], new["metadata"]["labels"] = {}, {}
                d.update(new, old, namespace="team-a", labels={}, source="gang job drops its keys")
    assert d.figures.compared > before.compared
    if part.startswith("create, unlabelled"):  # the denials: the lenient namespace only warns, no UPDATE is denied
        assert d.figures.by_rule["gang-required"] > before.by_rule["gang-required"]
    _check("gangs", f"gang jobs ({part})", d, before)

"""The 81 real manifests of ../shared/realworld/corpus, read in place: the engine's invariants on real input.

- nothing crashes; every file is readable (exit 2 would mean unreadable input);
- invalid documents get a clear, located message;
- mutating the output again yields no patch;
- every mutated Pod/Job passes strict OpenAPI validation for 1.30 and 1.37, every Volcano Job its CRD;
- objects without GPU resources or intent keys are byte-for-byte unchanged in ``-o yaml``.

Most corpus objects are raw GPU requests (no intent label), which the webhook validates but does not
translate; so the same objects are also run with intent added for every class of the default policy,
which drives every mutation path over real-world pod specs.
"""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path

import pytest

from tests.conftest import CORPUS, TRAINING_NS, need_shared
from tests.engine.helpers import assert_valid, run, schema_errors
from webhook import yamlpos
from webhook.check.formats import Options, write_yaml
from webhook.check.inputs import read_sources
from webhook.check.runner import Namespaces, Status, check_sources
from webhook.cli import main
from webhook.engine.model.workload import classify, templates


def corpus_files() -> list[Path]:
    return sorted(need_shared(CORPUS).rglob("*.yaml"))


@pytest.fixture(scope="module")
def results(policy):
    sources = read_sources([str(p) for p in corpus_files()])
    return list(check_sources(policy, sources, namespaces=Namespaces("team-a", {"team-a": TRAINING_NS})))


def test_every_corpus_file_is_checked_without_crash(capsys):
    files = [str(p) for p in corpus_files()]
    assert len(files) == 81
    code = main(["check", *files, "--namespace", "team-a", "-o", "json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 2  # plugin-config.yaml is not a Kubernetes object: bad input (docs/ci.md)
    summary = report["summary"]
    assert summary["errors"] == 0, "every corpus file is readable YAML"
    assert (
        summary["documents"]
        == summary["admitted"] + summary["warned"] + summary["denied"] + summary["skipped"] + summary["invalid"]
    )
    assert summary["warned"] >= 20 and summary["skipped"] >= 60


def test_invalid_documents_get_clear_located_errors(results):
    invalid = [r for r in results if r.status is Status.INVALID]
    assert [Path(r.file).name for r in invalid] == ["plugin-config.yaml"]
    assert invalid[0].line == 1 and "not a Kubernetes object" in invalid[0].message


def test_non_gpu_objects_are_skipped_and_gpu_objects_are_judged(results):
    by_name = {(Path(r.file).name, r.label): r for r in results}
    # no GPU asked for, but it tolerates the GPU taint: it can reach every GPU pool, so it is judged (its
    # pods' containers would get NVIDIA_VISIBLE_DEVICES=void; in a cluster kube-system is never intercepted)
    plugin = by_name[("nvidia-device-plugin.yaml", "DaemonSet/nvidia-device-plugin-daemonset")]
    assert plugin.status is Status.ADMITTED and plugin.namespace == "kube-system"
    assert by_name[("nginx-deployment.yaml", "Deployment/nginx-deployment")].status is Status.SKIPPED
    assert by_name[("job-910B3.yaml", "Pod/ascend910b3-job")].status is Status.SKIPPED  # Ascend is not an NVIDIA GPU
    assert by_name[("gpu-pod.yaml", "Pod/gpu-operator-test")].status is Status.WARNED
    mindspore = by_name[("mindspore-gpu.yaml", "Job/mindspore-gpu")]
    assert [v.rule for v in mindspore.decision.violations] == ["raw-gpu-request"]
    assert mindspore.line_of(mindspore.decision.violations[0].path) > mindspore.line


def test_mutated_output_is_idempotent_and_schema_valid(policy, results):
    judged = [r for r in results if r.decision is not None and r.decision.relevant]
    assert judged
    for r in judged:
        obj = r.decision.mutated
        again = run(policy, obj, training=True, namespace=r.namespace)
        assert again.patch == (), f"{r.file}: second pass patched"
        if r.decision.patch:
            before = set(schema_errors(r.obj))
            if before:  # the manifest itself uses fields of a newer release: the patch adds no new error
                assert set(schema_errors(obj)) <= before, r.file
            else:
                assert_valid(obj)
        else:
            assert obj == r.obj  # validated only: nothing changed


def test_yaml_output_keeps_untouched_documents_byte_for_byte(policy, results):
    out = io.StringIO()
    write_yaml(results, out, Options())
    emitted = out.getvalue()
    for r in results:
        if r.status is Status.SKIPPED or (r.decision is not None and not r.decision.patch):
            assert r.text in emitted, f"{r.file}:{r.line} was not reprinted verbatim"
    # and the whole stream still parses to the same number of documents
    docs = [d for d in yamlpos.iter_documents(emitted, with_nodes=False)]
    assert all(not isinstance(d, yamlpos.SyntaxProblem) for d in docs)


def _gpu_objects() -> list[tuple[str, dict]]:
    out = []
    for path in corpus_files():
        for doc in yamlpos.iter_documents(path.read_text(), with_nodes=False):
            if isinstance(doc, yamlpos.SyntaxProblem) or not isinstance(doc.data, dict):
                continue
            kind = classify(doc.data)
            if kind is None or not kind.mutate:
                continue
            if any(
                "resources" in str(t.spec) and ("nvidia.com" in str(t.spec) or "gpu" in str(t.spec))
                for t in templates(doc.data, kind)
            ):
                out.append((f"{path.parent.name}/{path.name}:{doc.line}", doc.data))
    return out


INTENTS = {
    "inference": {"gpu-admission.io/gpu-memory": "8Gi"},
    "batch": {"gpu-admission.io/gpu-memory": "18Gi"},
    "dev": {"gpu-admission.io/gpu-memory": "3Gi"},
    "training": {"gpu-admission.io/gpus": "2"},
}


def _with_intent(obj: dict, workload: str) -> dict:
    obj = copy.deepcopy(obj)
    kind = classify(obj)
    for tpl in templates(obj, kind):
        node = obj
        for part in tpl.path:
            node = node[part]
        meta = node.setdefault("metadata", {}) if tpl.path and not tpl.virtual else obj.setdefault("metadata", {})
        if not isinstance(meta.get("labels"), dict):
            meta["labels"] = {}
        if not isinstance(meta.get("annotations"), dict):
            meta["annotations"] = {}
        meta["labels"]["gpu-admission.io/workload"] = workload
        meta["annotations"].update(INTENTS[workload])
    return obj


@pytest.mark.parametrize("workload", sorted(INTENTS))
def test_corpus_with_intent_mutates_into_valid_idempotent_objects(policy, workload):
    objects = _gpu_objects()
    assert len(objects) >= 15
    mutated_count = 0
    for where, obj in objects:
        original_errors = set(schema_errors(obj))
        d = run(policy, _with_intent(obj, workload), training=True)  # asserts patch == mutated, idempotence
        assert d.relevant, where
        if not d.patch:
            continue
        mutated_count += 1
        new = set(schema_errors(d.mutated)) - original_errors
        assert not new, f"{where} with class {workload}: mutation made it invalid: {new}"
    assert mutated_count >= 10

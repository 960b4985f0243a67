"""A workload kind the platform declares in its policy (``workloadKinds``), through the real server
(gunicorn, TLS) the way the kube-apiserver calls it: mutate, apply the patch, re-invoke, validate."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import jsonpatch
import pytest

from tests.engine.test_kinds import custom_policy_dir, pytorchjob, trainrun
from tests.server import objects
from tests.server.support import ServerProcess, check_response, patch_ops, review, serve_args

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, server_certs, namespaces_file: Path) -> Iterator[ServerProcess]:
    policy = custom_policy_dir(tmp_path_factory.mktemp("kinds-policy"))
    proc = ServerProcess(
        tmp_path_factory.mktemp("kinds"),
        serve_args(server_certs, "--namespace-labels", str(namespaces_file), "--workers", "1", policy=policy),
        ca_files=[server_certs.ca_cert],
    )
    proc.start()
    yield proc
    assert proc.stop() == 0, proc.output()[-3000:]


def _admit(server: ServerProcess, obj: dict) -> tuple[dict, dict]:
    client = server.client()
    try:
        sent = review(obj, namespace=objects.TRAINING_NS)
        status, doc = client.post_review("mutate", sent)
        assert status == 200
        mutated = check_response(doc, sent, "mutate")
        final = jsonpatch.apply_patch(obj, patch_ops(mutated)) if "patch" in mutated else obj
        again = review(final, namespace=objects.TRAINING_NS)
        status, doc = client.post_review("mutate", again)
        assert status == 200 and "patch" not in check_response(doc, again, "mutate")
        sent = review(final, namespace=objects.TRAINING_NS)
        status, doc = client.post_review("validate", sent)
        assert status == 200
        return final, check_response(doc, sent, "validate")
    finally:
        client.close()


def test_a_policy_declared_kind_is_mutated_and_admitted(server: ServerProcess):
    final, validated = _admit(server, trainrun())
    assert validated["allowed"] is True
    worker = final["spec"]["workers"][0]["template"]["spec"]
    assert worker["schedulerName"] == "volcano" and worker["nodeSelector"] == {"workload": "gpu-train"}
    assert final["spec"]["gangSize"] == 3


def test_a_partial_gang_of_the_declared_kind_is_denied_with_403(server: ServerProcess):
    _, validated = _admit(server, trainrun(gang_size=1))
    assert validated["allowed"] is False and validated["status"]["code"] == 403
    assert validated["status"]["message"].startswith("[gang-incomplete] gangSize 1 < 3 replicas")


def test_a_pytorchjob_is_denied_at_apply_when_its_gang_is_partial(server: ServerProcess):
    obj = pytorchjob(runPolicy={"schedulingPolicy": {"minAvailable": 2}})
    _, validated = _admit(server, obj)
    assert validated["allowed"] is False
    assert "spec.runPolicy.schedulingPolicy.minAvailable" in validated["status"]["message"]

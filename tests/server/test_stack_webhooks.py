"""HAMi's webhook between ours and ``/validate``, through the real server (gunicorn, TLS): ``/mutate``,
our patch applied, HAMi's writes applied (the stand-in in tests/engine/stack_webhooks.py, written from
HAMi's source), then ``/validate`` on the pod as the apiserver stores it."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path

import jsonpatch
import pytest

from tests.engine.helpers import container, intent, pod
from tests.engine.stack_webhooks import hami_webhook
from tests.server.support import ServerProcess, check_response, patch_ops, review, serve_args

pytestmark = pytest.mark.server

PROVIDERS = Path(__file__).resolve().parents[1] / "engine" / "policies"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, server_certs, namespaces_file: Path) -> Iterator[ServerProcess]:
    policy = tmp_path_factory.mktemp("providers-policy")
    (policy / "providers.yaml").write_text((PROVIDERS / "providers.yaml").read_text())
    proc = ServerProcess(
        tmp_path_factory.mktemp("stacks"),
        serve_args(server_certs, "--namespaces", str(namespaces_file), "--workers", "1", policy=policy),
        ca_files=[server_certs.ca_cert],
    )
    proc.start()
    yield proc
    assert proc.stop() == 0, proc.output()[-3000:]


def _through(server: ServerProcess, obj: dict, *, attack: str | None = None) -> dict:
    client = server.client()
    try:
        sent = review(obj, namespace="team")
        status, doc = client.post_review("mutate", sent)
        assert status == 200
        ours = check_response(doc, sent, "mutate")
        final = hami_webhook(jsonpatch.apply_patch(obj, patch_ops(ours)) if "patch" in ours else copy.deepcopy(obj))
        if attack is not None:
            final["spec"]["schedulerName"] = attack
        sent = review(final, namespace="team")
        status, doc = client.post_review("validate", sent)
        assert status == 200
        return check_response(doc, sent, "validate")
    finally:
        client.close()


def test_a_hami_pod_is_admitted_as_stored_after_hamis_webhook(server: ServerProcess):
    answer = _through(server, pod(intent("hami", gpu_memory="10Gi"), [container()]))
    assert answer["allowed"] is True, answer.get("status")


def test_a_raw_nvidia_gpu_pod_hami_schedules_is_admitted(server: ServerProcess):
    answer = _through(server, pod(None, [container(limits={"nvidia.com/gpu": "1"})]))
    assert answer["allowed"] is True, answer.get("status")


def test_a_scheduler_hami_never_writes_is_still_denied(server: ServerProcess):
    answer = _through(server, pod(intent("qgpu", gpu_memory="4Gi"), [container()]), attack="hami-scheduler")
    assert answer["allowed"] is False
    assert answer["status"]["message"].startswith("[scheduling-not-allowed] schedulerName 'hami-scheduler'")

"""Another stack's own webhook on the same apiserver: HAMi's, beside ours, in the apiserver's real order.

HAMi's mutating webhook (``vgpu.hami.io``) sets ``schedulerName: hami-scheduler``, env and a
``runtimeClassName`` on every pod holding a HAMi resource. Before the sharing-stack table said so, our
``/validate`` denied those pods ``scheduling-not-allowed`` while ``check`` admitted them. Here a stand-in
that writes what HAMi's sources write (``tests/engine/stack_webhooks.py``) is registered as a real
MutatingWebhookConfiguration next to ours, on a plane of its own whose product runs a policy with a HAMi
pool (``tests/engine/policies/providers.yaml``) and whose nodes advertise HAMi's resources. The apiserver
calls both webhooks (and reinvokes them: both are ``IfNeeded``), validates what they wrote, stores it,
and kube-scheduler's ``hami-scheduler`` stand-in profile binds it to a node of the HAMi pool.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.e2e import install, objects
from tests.e2e.plane import build, controlplane
from tests.e2e.plane.controlplane import Plane
from tests.e2e.standin_webhook import StandIn
from tests.engine.stack_webhooks import hami_webhook

PROVIDERS = ROOT / "tests" / "engine" / "policies" / "providers.yaml"


@dataclass
class HamiCluster:
    plane: Plane
    policy_dir: Path
    nodes: dict[str, str | None]
    standin: StandIn


@pytest.fixture(scope="module")
def hami(plane: Plane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HamiCluster]:
    """A plane of its own: the providers policy, its nodes, our webhooks, HAMi's stand-in webhook."""
    work = tmp_path_factory.mktemp("hami")
    policy_dir = work / "policy"
    policy_dir.mkdir()
    shutil.copy(PROVIDERS, policy_dir / "providers.yaml")
    p = controlplane.start(Path(tempfile.mkdtemp(prefix="gpu-admission-hami-plane-")), build.build())
    server = None
    try:
        install.install_base(p)
        nodes = install.create_nodes(p, policy_dir / "providers.yaml", per_pool=1)
        install.apply(p, [{"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                           "metadata": {"name": "hami-runtime"}, "handler": "nvidia"}])  # fmt: skip
        server = install.start_server(p, policy_dir, work)
        install.install_rendered(p, install.render(policy_dir), server)
        certs = install.make_certs(work / "standin-certs")
        with StandIn(hami_webhook, certs) as standin:
            install.apply(p, [standin.configuration("hami-webhook", "vgpu.hami.io", (certs / "ca.crt").read_bytes())])
            install.wait_for(lambda: _hami_in_force(p), "HAMi's stand-in webhook to take effect")
            install.wait_for(lambda: probe_mutated_on(p), "our webhooks to take effect")
            yield HamiCluster(p, policy_dir, nodes, standin)
    finally:
        if server is not None:
            server.stop()
        p.stop()


def hami_pod() -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": "hami-", "labels": {"gpu-admission.io/workload": "hami"},
                         "annotations": {"gpu-admission.io/gpu-memory": "4Gi"}},
            "spec": {"containers": [{"name": "main", "image": "registry.example/app:1"}]}}  # fmt: skip


def _hami_in_force(p: Plane) -> bool:
    code, stored, _ = objects.create(p, hami_pod(), "default", dry_run=True)
    return code == 0 and stored is not None and stored["spec"].get("schedulerName") == "hami-scheduler"


def probe_mutated_on(p: Plane) -> bool:
    code, stored, _ = objects.create(p, hami_pod(), "default", dry_run=True)
    return code == 0 and stored is not None and bool(stored["spec"].get("nodeSelector"))


def test_a_hami_class_pod_is_stored_as_both_webhooks_leave_it_and_admitted(hami: HamiCluster) -> None:
    p = hami.plane
    ns = install.namespace(p)
    code, stored, err = objects.create(p, hami_pod(), ns)
    assert code == 0, f"our /validate refused what HAMi's webhook wrote: {err}"
    assert stored is not None
    spec = stored["spec"]
    assert spec["schedulerName"] == "hami-scheduler"  # HAMi's
    assert spec["runtimeClassName"] == "hami-runtime"  # HAMi's
    assert spec["nodeSelector"] == {"pool": "hami"}  # ours
    limits = spec["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "1" and limits["nvidia.com/gpumem"] == "4096", limits  # ours, kept by HAMi
    assert {"name": "CUDA_TASK_PRIORITY", "value": "1"} in spec["containers"][0]["env"]  # HAMi's
    assert not [w for w in objects.warnings(err) if "scheduling-not-allowed" in w]
    assert any(r["operation"] == "CREATE" for r in hami.standin.seen)


def test_hamis_scheduler_binds_it_to_a_node_of_the_hami_pool(hami: HamiCluster) -> None:
    p = hami.plane
    ns = install.namespace(p)
    code, stored, err = objects.create(p, hami_pod(), ns)
    assert code == 0 and stored is not None, err
    name = stored["metadata"]["name"]

    def bound() -> str | None:
        return install.get(p, "pod", name, ns)["spec"].get("nodeName")

    node = install.wait_for(bound, "the hami-scheduler stand-in to bind the pod")
    assert hami.nodes[node] == "hami"


def test_a_pod_naming_another_scheduler_is_still_refused(hami: HamiCluster) -> None:
    """HAMi leaves a pod that names its own scheduler alone; ours still judges that scheduler."""
    p = hami.plane
    ns = install.namespace(p)
    pod = hami_pod()
    pod["spec"]["schedulerName"] = "my-scheduler"
    code, _, err = objects.create(p, pod, ns)
    assert code != 0 and "[scheduling-not-allowed]" in err, err

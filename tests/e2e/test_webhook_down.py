"""The webhook stopped, the in-tree policies installed: what the real apiserver denies, places and admits.

The installation is switched as a platform team running ``availability: in-tree`` would have it: the
in-tree ValidatingAdmissionPolicies and MutatingAdmissionPolicies of ``policy render --in-tree
--kube-version 1.36`` applied, and both webhook configurations rendered with ``--availability
in-tree`` (the validating webhook fails open), pointed at a loopback port nothing listens on: the
apiserver meets a refused connection, as with a webhook that is down.

The cases are ``tests/intree/test_webhook_down.py``'s, which the cel-python emulation judges in the unit
tier: the real apiserver must deny each with the same rule, so the emulation is checked against
cel-go on that sample. Then, with the webhook back up and the in-tree policies still installed, every
class pod the webhook places is admitted: the in-tree policies never deny what the engine admits.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator

import pytest

from tests.conftest import DEFAULT_POLICY_DIR
from tests.e2e import install, objects
from tests.e2e.conftest import Product, probe_installed
from tests.e2e.plane.controlplane import Plane, free_port
from tests.intree.test_webhook_down import CASES, KEY, pod


@pytest.fixture(scope="module")
def webhook_down(product: Product, in_tree: list[dict]) -> Iterator[Plane]:
    plane = product.plane
    rendered = install.render(DEFAULT_POLICY_DIR, "--availability", "in-tree")
    hooks = [d for d in rendered if d["kind"] in install.WEBHOOK_CONFIGS]
    ca = (product.server.certs / "ca.crt").read_bytes()
    install.apply(plane, [install.point_at(h, free_port(), ca) for h in hooks])
    try:  # restored even when the switch itself never took effect
        # the MAPs place some class pods while the webhook is down; the probe asks with one they do not place
        install.wait_for(lambda: probe_down(plane), "the webhook to be unreachable and the in-tree policies in force")
        yield plane
    finally:
        install.install_rendered(plane, product.rendered, product.server)
        install.wait_for(lambda: probe_installed(plane), "both webhooks to be back")


def probe_down(plane: Plane) -> bool:
    """A training pod (no MAP places that class) is denied unplaced: the mutating webhook was skipped."""
    p = pod({KEY: "training"})
    p["metadata"]["generateName"] = "probe-"
    del p["metadata"]["name"]
    proc = plane.kubectl("create", "--dry-run=server", "-n", "default", "-f", "-", input=json.dumps(p), check=False)
    return proc.returncode != 0 and "[placement-missing]" in proc.stderr


@pytest.mark.parametrize("case", sorted(CASES))
def test_webhook_down_the_real_apiserver_denies_with_the_rule(webhook_down: Plane, case: str) -> None:
    obj, labels, rule = CASES[case]
    plane = webhook_down
    ns = install.namespace(plane, labels)
    code, _, err = objects.create(plane, copy.deepcopy(obj), ns)
    assert code != 0, f"admitted with the webhook down; the in-tree policies should deny [{rule}]"
    assert f"[{rule}]" in err, err


def test_webhook_down_a_class_pod_is_placed_by_the_mutating_policies(webhook_down: Plane) -> None:
    """On 1.36 the MAPs place an inference pod with no lookup: admitted, with its pool's selector and device."""
    plane = webhook_down
    ns = install.namespace(plane)
    code, stored, err = objects.create(plane, pod({KEY: "inference"}), ns)
    assert code == 0, err
    assert stored is not None
    assert stored["spec"]["nodeSelector"] == {"workload": "gpu-infer"}
    limits = stored["spec"]["containers"][0]["resources"]["limits"]
    assert any(k.startswith("nvidia.com/") for k in limits), limits

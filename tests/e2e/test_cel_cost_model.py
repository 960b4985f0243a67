"""The render's CEL cost model charges what the real apiserver charges.

``webhook.render.intree.runtimecost`` prices every rendered expression as cel-go's interpreter charges it,
and ``policy render`` refuses what passes the apiserver's limits. Its figures are only as good as its
charges, so each expression here is priced by the model for an object it describes exactly (every
element evaluated, every string at the profile's length: the worst case is the actual case), and the
real apiserver evaluates it in a ValidatingAdmissionPolicy of its own: an object the model prices 2 %
under the 1,000,000 per-expression limit is admitted, one it prices 2 % over is denied with the
apiserver's cost error. A charge the model got wrong by more than that moves one side across the limit.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Iterator
from types import MappingProxyType
from typing import Any

import pytest

from tests.e2e import install, objects
from tests.e2e.plane.controlplane import Plane
from webhook.render.intree.runtimecost import DOCUMENTED, PER_CALL_LIMIT, Profile, bound

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PROBE = "cel-cost-probe.gpu-admission.io/deny"
REGEX = "^v+$|" + "z" * 195  # 200 characters: matches costs ⌈0.1·(1 + len s)⌉ · 50


@dataclasses.dataclass(frozen=True)
class Case:
    """An expression over a ConfigMap's ``data`` of ``n`` keys and values, each ``length`` characters."""

    expression: str
    length: int

    def profile(self, n: int) -> Profile:
        return dataclasses.replace(
            DOCUMENTED, maps=MappingProxyType({"data": n}), strings=MappingProxyType({"data": self.length}),
            string=self.length, totals=MappingProxyType({}),
        )  # fmt: skip

    def cost(self, n: int) -> int:
        return bound(self.expression, self.profile(n))

    def data(self, n: int) -> dict[str, str]:
        keys = ["k" + str(i).zfill(self.length - 1) for i in range(n)]
        assert len(set(keys)) == n and all(len(k) == self.length for k in keys)
        return {k: "v" * self.length for k in keys}


CASES = {
    # a fold over a map, an index, startsWith and matches on 200-character strings
    "strings": Case(f"object.data.all(k, k.startsWith('k') && object.data[k].matches('{REGEX}'))", 200),
    # list literals, map() and filter() appends, != on strings, size()
    "lists": Case("size(object.data.map(k, [k, object.data[k]]).filter(p, p[0] != p[1])) == size(object.data)", 10),
}


def entries_priced(case: Case, predicate: Callable[[int], bool]) -> int:
    """The fewest entries whose price satisfies ``predicate`` (the price grows with the entries)."""
    low, high = 1, 1
    while not predicate(case.cost(high)):
        low, high = high, high * 2
    while low < high:
        mid = (low + high) // 2
        if predicate(case.cost(mid)):
            high = mid
        else:
            low = mid + 1
    return high


@pytest.fixture(scope="module")
def probe_policy(plane: Plane) -> Iterator[tuple[str, str]]:
    """A namespace whose labelled ConfigMaps one ValidatingAdmissionPolicy per case judges."""
    label = f"probe-{uuid.uuid4().hex[:8]}"
    docs: list[dict[str, Any]] = []
    for name, case in CASES.items():
        validations = [
            {"expression": f"!has(object.metadata.annotations) || !('{PROBE}' in object.metadata.annotations)",
             "message": "probe"},
            {"expression": case.expression, "message": f"{name} evaluated false"},
        ]  # fmt: skip
        policy = f"{label}-{name}"
        docs += [
            {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
             "metadata": {"name": policy},
             "spec": {"failurePolicy": "Fail", "validations": validations,
                      "matchConstraints": {
                          "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                                             "resources": ["configmaps"]}],
                          "objectSelector": {"matchLabels": {"cel-cost-probe": f"{label}-{name}"}}}}},
            {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
             "metadata": {"name": policy}, "spec": {"policyName": policy, "validationActions": ["Deny"]}},
        ]  # fmt: skip
    ns = install.namespace(plane, prefix="celcost")
    with install.installed(plane, docs):
        for name in CASES:  # the apiserver loads new policies asynchronously: wait until each denies
            probe = configmap(f"{label}-{name}", {}, {PROBE: "1"})
            install.wait_for(lambda p=probe: objects.create(plane, p, ns, dry_run=True)[0] != 0,
                             f"policy {label}-{name} enforced")  # fmt: skip
        yield label, ns


def configmap(label: str, data: dict[str, str], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"generateName": "probe-", "labels": {"cel-cost-probe": label},
                         "annotations": annotations or {}},
            "data": data}  # fmt: skip


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_model_puts_the_limit_where_the_apiserver_does(plane: Plane, probe_policy: tuple[str, str], name: str):
    label, ns = probe_policy
    case = CASES[name]
    under = entries_priced(case, lambda c: c > PER_CALL_LIMIT * 0.98) - 1
    over = entries_priced(case, lambda c: c >= PER_CALL_LIMIT * 1.02)
    assert case.cost(under) <= PER_CALL_LIMIT * 0.98 < PER_CALL_LIMIT * 1.02 <= case.cost(over)

    code, _, err = objects.create(plane, configmap(f"{label}-{name}", case.data(under)), ns, dry_run=True)
    assert code == 0, f"{under} entries, priced {case.cost(under):,}: the apiserver refused: {err[-500:]}"
    code, _, err = objects.create(plane, configmap(f"{label}-{name}", case.data(over)), ns, dry_run=True)
    assert code != 0, f"{over} entries, priced {case.cost(over):,}: the apiserver evaluated it within its limit"
    assert "cost" in err.lower() and "exceed" in err.lower(), err[-500:]

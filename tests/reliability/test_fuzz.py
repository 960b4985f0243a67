"""Fuzzed AdmissionReviews against the running server: never a 5xx, never a dead worker, and every
answer is either a contract-valid AdmissionReview response or a JSON 4xx.

Three generators, each POSTed to ``/mutate`` and ``/validate`` over one kept-alive connection:

* valid-looking reviews of Pods, Jobs and Volcano Jobs whose intent labels/annotations, resources,
  node selectors and tolerations are drawn from the values the engine reads (and near misses);
* hostile ones: a valid-looking review with one corruption (a field replaced by any JSON value of
  the wrong type, a key deleted, a 64 KiB label, nesting 200 to 1500 levels deep, non-ASCII text);
* raw bytes (random, truncated JSON, non-UTF-8) with the JSON content type.

``derandomize=True``: CI runs the same examples every time (a failure reproduces), and the example
counts keep the module well under a minute on 2 cores.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.reliability.load import answering_pids, wait_for_workers, worker_pids
from tests.server import objects
from tests.server.support import ApiserverClient, ServerProcess, check_response, review, serve_args

pytestmark = [pytest.mark.reliability, pytest.mark.server, pytest.mark.slow]

FUZZ = settings(
    max_examples=1000,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)

PREFIX = "gpu-admission.io"
NAMESPACES = ["research", "research", "serving", "serving", "sandbox", "default", "kube-system", ""]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, server_certs, namespaces_file: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(
        tmp_path_factory.mktemp("fuzz"),
        serve_args(
            server_certs,
            "--namespace-labels",
            str(namespaces_file),
            "--workers",
            "2",
            "--threads",
            "4",
        ),
        ca_files=[server_certs.ca_cert],
    ).start()
    pids = wait_for_workers(proc, 2)
    yield proc
    assert worker_pids(proc) == pids, "no worker died (or was replaced) while fuzzed"
    assert proc.stop() == 0
    records = proc.log_records()
    unhandled = [r for r in records if r.get("msg") == "unhandled error"]
    assert not unhandled, f"no request reached the 500 handler: {unhandled[:3]}"
    engine_errors = [r for r in records if r.get("msg", "").startswith("engine error")]
    assert not engine_errors, f"the engine never raised on fuzzed input: {engine_errors[:3]}"


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Iterator[ApiserverClient]:
    c = server.client()
    yield c
    c.close()


# --- strategies ----------------------------------------------------------------------------------

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=20,
)
quantities = st.sampled_from(["1", "2", "8", "0", "-1", "0.5", "4Gi", "40Gi", "500m", "1e3", "abc", "", " 2 "]) | (
    st.integers(min_value=-3, max_value=64)
)
resource_names = st.sampled_from(
    [
        "nvidia.com/gpu",
        "nvidia.com/mig-1g.5gb",
        "nvidia.com/mig-3g.20gb",
        "nvidia.com/gpumem",
        "aliyun.com/gpu-mem",
        "rdma/rdma_shared_device_a",
        "cpu",
        "memory",
    ]
)
intent_values = st.sampled_from(
    [
        "1",
        "2",
        "8",
        "16",
        "0",
        "4Gi",
        "80Gi",
        "mig",
        "exclusive",
        "shared",
        "switch",
        "node:required",
        "true",
        "false",
        "train-llm",
        "H100-80GB",
        "infer-a100",
        "torch",
        "x" * 130,
    ]
) | st.text(max_size=12)
intent_annotations = st.dictionaries(
    st.sampled_from(
        [
            f"{PREFIX}/{k}"
            for k in (
                "gpus",
                "gpu-memory",
                "isolation",
                "gpu-model",
                "pool",
                "rdma",
                "gang",
                "gang-size",
                "topology",
                "container",
            )
        ]
        + ["k8s.v1.cni.cncf.io/networks", "scheduling.k8s.io/group-name"]
    ),
    intent_values,
    max_size=5,
)
labels = st.dictionaries(
    st.sampled_from([f"{PREFIX}/workload", "app", "gpu-admission.io/raw-gpus"]),
    st.sampled_from(["inference", "training", "batch", "dev", "none", "bogus", "allowed"]) | st.text(max_size=8),
    max_size=3,
)
containers = st.lists(
    st.fixed_dictionaries(
        {
            "name": st.sampled_from(["main", "torch", "sidecar"]) | st.text(min_size=1, max_size=8),
            "image": st.text(max_size=20),
        },
        optional={
            "resources": st.fixed_dictionaries(
                {},
                optional={
                    "limits": st.dictionaries(resource_names, quantities, max_size=3),
                    "requests": st.dictionaries(resource_names, quantities, max_size=3),
                },
            ),
            "env": st.lists(
                st.fixed_dictionaries({"name": st.text(max_size=8), "value": st.text(max_size=8)}), max_size=2
            ),
            "securityContext": st.fixed_dictionaries({}, optional={"privileged": st.booleans()}),
            "volumeMounts": st.lists(
                st.fixed_dictionaries(
                    {"name": st.text(max_size=5), "mountPath": st.sampled_from(["/dev/shm", "/data"])}
                ),
                max_size=2,
            ),
        },
    ),
    min_size=1,
    max_size=3,
)
pod_specs = st.fixed_dictionaries(
    {"containers": containers},
    optional={
        "initContainers": containers,
        "nodeSelector": st.dictionaries(
            st.sampled_from(["workload", "nvidia.com/gpu.product", "zone"]),
            st.sampled_from(["gpu-train", "gpu-infer", "gpu-dev", "NVIDIA-H100-80GB-HBM3"]),
            max_size=2,
        ),
        "tolerations": st.lists(
            st.fixed_dictionaries(
                {
                    "key": st.sampled_from(["nvidia.com/gpu", "workload"]),
                    "operator": st.sampled_from(["Exists", "Equal"]),
                },
                optional={"value": st.sampled_from(["gpu-train", "x"]), "effect": st.sampled_from(["NoSchedule", ""])},
            ),
            max_size=2,
        ),
        "schedulerName": st.sampled_from(["default-scheduler", "volcano", ""]),
        "priorityClassName": st.sampled_from(["gpu-training", "system-node-critical"]),
        "nodeName": st.sampled_from(["gpu-node-1"]),
        "priority": st.integers(min_value=0, max_value=10**6),
    },
)
metadata = st.fixed_dictionaries(
    {"name": st.sampled_from(["w", "train-llm-worker-0"]) | st.text(max_size=10)},
    optional={"labels": labels, "annotations": intent_annotations},
)


@st.composite
def workloads(draw: st.DrawFn) -> dict[str, Any]:
    meta, spec = draw(metadata), draw(pod_specs)
    template = {"metadata": draw(metadata), "spec": spec}
    kind = draw(st.sampled_from(["Pod", "Job", "VolcanoJob", "Deployment"]))
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
    if kind == "Job":
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": meta,
            "spec": {"parallelism": draw(st.integers(0, 64) | st.integers(10**6, 10**12)), "template": template},
        }
    if kind == "Deployment":
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta,
            "spec": {"replicas": draw(st.integers(0, 8)), "template": template},
        }
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "minAvailable": draw(st.integers(0, 16)),
            # counts from the object must never size an allocation: include absurd ones
            "tasks": [
                {
                    "name": "worker",
                    "replicas": draw(st.integers(0, 16) | st.integers(10**6, 10**12)),
                    "template": template,
                }
            ],
        },
    }


REALISTIC = (
    objects.inference_pod,
    objects.training_vcjob,
    lambda: objects.qwen_job(8),
    objects.raw_gpu_pod,
    objects.node_name_pod,
)


@st.composite
def realistic(draw: st.DrawFn) -> dict[str, Any]:
    """The suite's realistic objects with drawn intent values: most of these reach the mutation code."""
    obj = draw(st.sampled_from(REALISTIC))()
    meta = obj["metadata"]
    if draw(st.booleans()):
        meta.setdefault("annotations", {}).update(draw(intent_annotations))
    if draw(st.booleans()):
        meta.setdefault("labels", {})[f"{PREFIX}/workload"] = draw(
            st.sampled_from(["inference", "training", "batch", "dev"])
        )
    return obj


@st.composite
def reviews(draw: st.DrawFn) -> dict[str, Any]:
    obj = draw(st.one_of(workloads(), realistic()))
    operation = draw(st.sampled_from(["CREATE"] * 6 + ["UPDATE", "UPDATE", "DELETE", "CONNECT"]))
    old = draw(workloads()) if operation == "UPDATE" and draw(st.booleans()) else None
    return review(
        obj, namespace=draw(st.sampled_from(NAMESPACES)), operation=operation, old=old, dry_run=draw(st.booleans())
    )


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


def _nest(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


@st.composite
def hostile_reviews(draw: st.DrawFn) -> dict[str, Any]:
    doc = draw(reviews())
    paths = _paths(doc)
    path = draw(st.sampled_from(paths[1:]))
    parent: Any = doc
    for part in path[:-1]:
        parent = parent[part]
    action = draw(st.sampled_from(["replace", "delete", "huge", "deep", "unicode"]))
    if action == "replace":
        parent[path[-1]] = draw(json_values)
    elif action == "delete":
        del parent[path[-1]]
    elif action == "huge":
        parent[path[-1]] = {"huge-label": "x" * 65536, "k" * 300: "v"}
    elif action == "deep":
        parent[path[-1]] = _nest(draw(st.integers(min_value=200, max_value=1500)))
    else:
        parent[path[-1]] = draw(
            st.text(
                alphabet=st.characters(min_codepoint=0x80, max_codepoint=0x10FFFF, blacklist_categories=("Cs",)),
                max_size=30,
            )
        )
    return doc


# --- the checks ----------------------------------------------------------------------------------


def _post(client: ApiserverClient, endpoint: str, body: bytes, sent: Any, *, events: bool = True) -> int:
    """POST one body; check the answer; ``events``: tally outcomes in hypothesis' statistics."""
    note = event if events else (lambda _: None)
    status, resp, data = client.request("POST", f"/{endpoint}?timeout=10s", body)
    assert status < 500, data[:500]
    assert resp.getheader("Content-Type") == "application/json"
    doc = orjson.loads(data)
    if status == 200:
        assert isinstance(sent, dict), "only an AdmissionReview gets a 200"
        response = check_response(doc, sent, endpoint)
        note(f"{endpoint}: " + ("patched" if "patch" in response else "allowed" if response["allowed"] else "denied"))
    else:
        note(f"{endpoint}: {status}")
    if status != 200:
        assert 400 <= status < 500
        assert doc["code"] == status and isinstance(doc["error"], str) and isinstance(doc["message"], str)
    return status


def _encode(doc: Any, ascii_only: bool) -> bytes:
    # stdlib json: integers beyond 64 bits and both escapings of non-ASCII text reach the server
    return json.dumps(doc, ensure_ascii=ascii_only).encode()


@FUZZ
@given(doc=reviews(), ascii_only=st.booleans())
def test_valid_looking_reviews(client: ApiserverClient, doc: dict[str, Any], ascii_only: bool):
    body = _encode(doc, ascii_only)
    for endpoint in ("mutate", "validate"):
        status = _post(client, endpoint, body, doc)
        assert status in (200, 400), "a well-formed review is answered (400 only for out-of-range numbers)"


@FUZZ
@given(doc=hostile_reviews(), ascii_only=st.booleans())
def test_hostile_reviews(client: ApiserverClient, doc: dict[str, Any], ascii_only: bool):
    body = _encode(doc, ascii_only)
    for endpoint in ("mutate", "validate"):
        _post(client, endpoint, body, doc)


@FUZZ
@given(body=st.binary(max_size=2048) | st.builds(lambda d, n: _encode(d, True)[:n], reviews(), st.integers(0, 400)))
def test_random_bytes(client: ApiserverClient, body: bytes):
    try:
        sent: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        sent = None
    for endpoint in ("mutate", "validate"):
        _post(client, endpoint, body, sent)


def test_still_healthy_on_every_worker(server: ServerProcess):
    assert answering_pids(server, 40) == set(worker_pids(server)), "both original workers answer"


@pytest.mark.parametrize("operation", [["CREATE"], {"op": "CREATE"}, 1, None])
def test_an_operation_of_the_wrong_type_is_a_400(client: ApiserverClient, operation: Any):
    """Found by ``test_hostile_reviews``: a list here used to reach ``in frozenset`` and answer 500."""
    doc = review(objects.inference_pod(), namespace="serving")
    doc["request"]["operation"] = operation
    for endpoint in ("mutate", "validate"):
        assert _post(client, endpoint, orjson.dumps(doc), doc, events=False) == 400


@pytest.mark.parametrize("field", ["operation", "apiVersion", "kind"])
def test_a_deeply_nested_value_in_a_quoted_field_is_a_400(client: ApiserverClient, field: str):
    """Found by ``test_hostile_reviews``: the 400 message quotes the bad value, and ``repr`` of a list
    nested 1000 deep (orjson accepts 1024 levels) raised RecursionError, which answered 500."""
    deep = "[" * 1000 + '"x"' + "]" * 1000
    doc = {"apiVersion": '"admission.k8s.io/v1"', "kind": '"AdmissionReview"', "operation": '"CREATE"'}
    doc[field] = deep
    body = (
        f'{{"apiVersion":{doc["apiVersion"]},"kind":{doc["kind"]},'
        f'"request":{{"uid":"u-1","operation":{doc["operation"]},"object":{{}}}}}}'
    ).encode()
    for endpoint in ("mutate", "validate"):
        assert _post(client, endpoint, body, None, events=False) == 400

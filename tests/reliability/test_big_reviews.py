"""The worst 3 MiB reviews cost a real worker a bounded amount of memory.

A review of a Pod with a million empty containers raised a worker's peak RSS by ~600 MiB (the
Deployment's limit is 512Mi: an OOM kill is a dead worker). Now a body with more JSON objects and
arrays than any real workload (``MAX_STRUCTURES``) is refused before it is parsed, what is parsed
is judged under the engine's size caps, and big reviews are handled one at a time per worker. The
test reads the worker's ``VmHWM`` (peak resident set) from /proc before and after: a memory bound,
not a time bound.
"""

from __future__ import annotations

import orjson
import pytest

from tests.reliability.load import serving_pid
from tests.server.support import ServerProcess, review, running, serve_args
from webhook.server.review import MAX_BODY_BYTES

pytestmark = pytest.mark.reliability

GPU_META = {"name": "p", "labels": {"gpu-admission.io/workload": "inference"}}


def _peak_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


def _largest(make) -> bytes:
    """The biggest body of ``make(n)`` that fits the 3 MiB limit."""
    lo, hi = 1, 2_000_000
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if len(orjson.dumps(review(make(mid), namespace="ml"))) <= MAX_BODY_BYTES:
            lo = mid
        else:
            hi = mid - 1
    return orjson.dumps(review(make(lo), namespace="ml"))


def test_the_worst_3_mib_reviews_keep_a_worker_well_under_its_memory_limit(tmp_path, server_certs):
    server = ServerProcess(
        tmp_path,
        serve_args(server_certs, "--workers", "1", "--threads", "4", "--namespace-labels", "none"),
        ca_files=[server_certs.ca_cert],
    )
    empty_containers = _largest(
        lambda n: {"apiVersion": "v1", "kind": "Pod", "metadata": GPU_META, "spec": {"containers": [{}] * n}}
    )
    small_strings = _largest(  # the costliest body that stays under the structure count: short strings
        lambda n: {"apiVersion": "v1", "kind": "Pod", "metadata": GPU_META, "spec": {"x": ["ab"] * n}}
    )
    with running(server):
        client = server.client(timeout=60)
        assert client.get_json("/healthz")[0] == 200
        worker = serving_pid(server, client)
        assert worker is not None
        before = _peak_kib(worker)
        status, _, data = client.request("POST", "/validate?timeout=10s", empty_containers)
        if status == 200:  # (main before the fix judged it, at ~600 MiB)
            client.close()
            client = server.client(timeout=60)
        else:
            assert status == 400 and "JSON objects and arrays" in orjson.loads(data)["message"]
        status, _, data = client.request("POST", "/validate?timeout=10s", small_strings)
        assert status == 200 and isinstance(orjson.loads(data)["response"]["allowed"], bool)  # judged
        grown = (_peak_kib(worker) - before) / 1024
        client.close()
    print(f"\nworker peak RSS {before / 1024:.0f} MiB -> +{grown:.0f} MiB after the worst 3 MiB reviews")
    assert grown < 150, f"a worker's peak grew by {grown:.0f} MiB for one 3 MiB review"

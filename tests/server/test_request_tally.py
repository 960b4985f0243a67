"""Request metrics written in batches count exactly what writing each review at once would."""

from __future__ import annotations

import random
import threading
from collections import OrderedDict

import pytest
from prometheus_client import REGISTRY

from webhook.engine.model.workload import classify
from webhook.server import metrics
from webhook.server.metrics import LATENCY_BUCKETS, RequestTally


def _value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def _buckets(endpoint: str) -> list[float]:
    bounds = [*(str(b) for b in LATENCY_BUCKETS), "+Inf"]
    return [_value("gpu_admission_request_duration_seconds_bucket", endpoint=endpoint, le=b) for b in bounds]


def test_batched_counts_equal_one_write_per_review_under_concurrency():
    tally = RequestTally()
    tally.defer()
    rng = random.Random(7)
    per_thread = [[rng.choice([0.00005, 0.0001, 0.0003, 0.002, 0.3, 7.0]) for _ in range(2000)] for _ in range(8)]
    before = _buckets("tally-test")
    count_before = _value("gpu_admission_requests_total", endpoint="tally-test", decision="patched", kind="Pod",
                          dry_run="false")
    sum_before = _value("gpu_admission_request_duration_seconds_sum", endpoint="tally-test")

    def work(values: list[float]) -> None:
        for seconds in values:
            tally.record("tally-test", "patched", "Pod", False, seconds)

    threads = [threading.Thread(target=work, args=(v,)) for v in per_thread]
    for t in threads:
        t.start()
    for _ in range(20):  # publishing while reviews are being recorded must not lose any
        tally.publish()
    for t in threads:
        t.join()
    tally.defer(False)  # publishes the rest

    values = [v for vs in per_thread for v in vs]
    count = _value("gpu_admission_requests_total", endpoint="tally-test", decision="patched", kind="Pod",
                   dry_run="false")
    assert count - count_before == len(values)
    # cumulative buckets as prometheus_client's observe() would have produced them
    expected = [sum(1 for v in values if v <= bound) for bound in (*LATENCY_BUCKETS, float("inf"))]
    assert [a - b for a, b in zip(_buckets("tally-test"), before, strict=True)] == expected
    total = _value("gpu_admission_request_duration_seconds_sum", endpoint="tally-test") - sum_before
    assert total == pytest.approx(sum(values))


def test_without_defer_each_review_is_written_at_once():
    tally = RequestTally()
    labels = {"endpoint": "tally-direct", "decision": "allowed", "kind": "Job", "dry_run": "true"}
    before = _value("gpu_admission_requests_total", **labels)
    tally.record("tally-direct", "allowed", "Job", True, 0.0002)
    assert _value("gpu_admission_requests_total", **labels) == before + 1


@pytest.mark.parametrize(
    "obj",
    [
        {"apiVersion": "v1", "kind": "Pod"},
        {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job"},
        {"apiVersion": "batch/v1", "kind": "Job"},
        {"apiVersion": "apps/v1", "kind": "Deployment"},
        {"apiVersion": "v1", "kind": "ConfigMap"},
        {"apiVersion": ["v1"], "kind": "Pod"},  # unhashable: never a lookup key
        {"kind": "Pod"},
        OrderedDict(apiVersion="v1", kind="Pod"),  # a dict subclass takes the engine's own path
        None,
        "Pod",
    ],
)
def test_kind_label_agrees_with_the_engine(obj):
    kind = classify(obj)
    assert metrics.kind_label(obj) == (kind.name if kind is not None else "other")

"""In-process engine latency (target: ``report`` (patch and verdict) of a typical training pod <= 0.3 ms p50).

Run: ``pytest bench/test_engine_latency.py --benchmark-enable --benchmark-columns=min,median,mean,ops``
"""

from __future__ import annotations

import pytest

from bench.workloads import INFERENCE_POD, TRAINING_JOB_POD, TRAINING_NAMESPACE
from webhook.engine import Request, report
from webhook.policy import load_policy


@pytest.fixture(scope="module")
def policy():
    return load_policy("policies")


def test_inference_pod(benchmark, policy):
    decision = benchmark(report, policy, Request(INFERENCE_POD, namespace="serving"))
    assert decision.patch and decision.allowed


def test_training_pod_8_gpus(benchmark, policy):
    decision = benchmark(
        report, policy, Request(TRAINING_JOB_POD, namespace="llm", namespace_labels=TRAINING_NAMESPACE)
    )
    assert decision.patch and decision.allowed, decision.message


def test_non_gpu_pod(benchmark, policy):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
           "spec": {"containers": [{"name": "nginx", "image": "nginx", "resources": {"limits": {"cpu": "1"}}}]}}
    decision = benchmark(report, policy, Request(pod))
    assert not decision.relevant


def _pytorchjob_8_workers() -> dict:
    """A PyTorchJob with one master and 7 workers x 8 GPUs (8 pods), intent on the job's own metadata."""
    def template() -> dict:
        return {"spec": {"containers": [{"name": "pytorch", "image": "registry.example/train:1",
                                         "resources": {"limits": {"cpu": "32", "memory": "256Gi"}}}]}}

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "llm-pretrain",
                     "labels": {"gpu-admission.io/workload": "training"},
                     "annotations": {"gpu-admission.io/gpus": "8"}},
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template()},
                                         "Worker": {"replicas": 7, "template": template()}}},
    }


def test_pytorchjob_8_workers(benchmark, policy):
    job = _pytorchjob_8_workers()
    decision = benchmark(report, policy, Request(job, namespace="llm", namespace_labels=TRAINING_NAMESPACE))
    assert decision.patch and decision.allowed, decision.message

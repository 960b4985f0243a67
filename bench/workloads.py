"""Realistic objects for the benchmarks: what the apiserver sends on a typical day."""

from __future__ import annotations

INFERENCE_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "vllm-7b-5d9f8",
        "namespace": "serving",
        "labels": {"app": "vllm-7b", "pod-template-hash": "5d9f8", "gpu-admission.io/workload": "inference"},
        "annotations": {"gpu-admission.io/gpu-memory": "8Gi", "prometheus.io/scrape": "true"},
    },
    "spec": {
        "schedulerName": "default-scheduler",
        "priority": 0,
        "containers": [
            {
                "name": "vllm",
                "image": "vllm/vllm-openai:v0.6.3",
                "args": ["--model", "/models/llama-7b", "--gpu-memory-utilization", "0.9"],
                "ports": [{"containerPort": 8000, "name": "http"}],
                "env": [{"name": "HF_HOME", "value": "/cache"}, {"name": "VLLM_PORT", "value": "8000"}],
                "resources": {
                    "limits": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
                    "requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
                },
                "volumeMounts": [{"name": "models", "mountPath": "/models"}],
                "readinessProbe": {"httpGet": {"path": "/health", "port": 8000}},
            }
        ],
        "volumes": [{"name": "models", "persistentVolumeClaim": {"claimName": "models"}}],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    },
}

TRAINING_JOB_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "train-llm-worker-3",
        "namespace": "llm",
        "labels": {"app": "train-llm", "gpu-admission.io/workload": "training"},
        "annotations": {
            "gpu-admission.io/gpus": "8",
            "gpu-admission.io/gang": "train-llm",
            "gpu-admission.io/gang-size": "8",
        },
    },
    "spec": {
        "schedulerName": "default-scheduler",
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "torch",
                "image": "registry/shop/torch:2.4-roce",
                "command": ["torchrun", "--nnodes=8", "--nproc-per-node=8", "train.py"],
                "env": [{"name": "MASTER_ADDR", "value": "train-llm-worker-0"}],
                "resources": {"limits": {"cpu": "64", "memory": "512Gi"}, "requests": {"cpu": "64", "memory": "512Gi"}},
            }
        ],
    },
}

TRAINING_NAMESPACE = {"gpu-admission.io/tier": "training"}

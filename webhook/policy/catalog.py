"""Built-in catalogs: GPU models (memory, GFD product label, MIG profiles) and DRA device classes.

Facts from NVIDIA's MIG user guide and mig-parted (see docs/policy.md for sources). A policy may
override any entry or add models under ``spec.gpuModels``. Profile names keep NVIDIA's spelling
(``1g.10gb+me``); the device plugin's resource name replaces ``+`` with ``.`` (``mig-1g.10gb.me``).
"""

from __future__ import annotations

GIB = 1024**3

# model -> (memory GiB, nvidia.com/gpu.product value (SXM variant), ((profile, max instances), ...))
BUILTIN_GPU_MODELS: dict[str, dict[str, object]] = {
    "A30": {
        "memory": "24Gi",
        "product": "NVIDIA-A30",
        "mig": [["1g.6gb", 4], ["1g.6gb+me", 1], ["2g.12gb", 2], ["2g.12gb+me", 1], ["4g.24gb", 1]],
    },
    "A100-40GB": {
        "memory": "40Gi",
        "product": "NVIDIA-A100-SXM4-40GB",
        "mig": [
            ["1g.5gb", 7],
            ["1g.5gb+me", 1],
            ["1g.10gb", 4],
            ["2g.10gb", 3],
            ["3g.20gb", 2],
            ["4g.20gb", 1],
            ["7g.40gb", 1],
        ],
    },
    "A100-80GB": {
        "memory": "80Gi",
        "product": "NVIDIA-A100-SXM4-80GB",
        "mig": [
            ["1g.10gb", 7],
            ["1g.10gb+me", 1],
            ["1g.20gb", 4],
            ["2g.20gb", 3],
            ["3g.40gb", 2],
            ["4g.40gb", 1],
            ["7g.80gb", 1],
        ],
    },
    "H100-80GB": {
        "memory": "80Gi",
        "product": "NVIDIA-H100-80GB-HBM3",
        "mig": [
            ["1g.10gb", 7],
            ["1g.10gb+me", 1],
            ["1g.20gb", 4],
            ["2g.20gb", 3],
            ["3g.40gb", 2],
            ["4g.40gb", 1],
            ["7g.80gb", 1],
        ],
    },
    "H100-94GB": {
        "memory": "94Gi",
        "product": "NVIDIA-H100-NVL",
        "mig": [
            ["1g.12gb", 7],
            ["1g.12gb+me", 1],
            ["1g.24gb", 4],
            ["2g.24gb", 3],
            ["3g.47gb", 2],
            ["4g.47gb", 1],
            ["7g.94gb", 1],
        ],
    },
    "H200-141GB": {
        "memory": "141Gi",
        "product": "NVIDIA-H200",
        "mig": [
            ["1g.18gb", 7],
            ["1g.18gb+me", 1],
            ["1g.35gb", 4],
            ["2g.35gb", 3],
            ["3g.71gb", 2],
            ["4g.71gb", 1],
            ["7g.141gb", 1],
        ],
    },
    "GH200-96GB": {
        "memory": "96Gi",
        "product": "NVIDIA-GH200-480GB",
        "mig": [
            ["1g.12gb", 7],
            ["1g.12gb+me", 1],
            ["1g.24gb", 4],
            ["2g.24gb", 3],
            ["3g.48gb", 2],
            ["4g.48gb", 1],
            ["7g.96gb", 1],
        ],
    },
    "B200": {
        "memory": "180Gi",
        "product": "NVIDIA-B200",
        "mig": [
            ["1g.23gb", 7],
            ["1g.23gb+me", 1],
            ["1g.45gb", 4],
            ["2g.45gb", 3],
            ["3g.90gb", 2],
            ["4g.90gb", 1],
            ["7g.180gb", 1],
        ],
    },
    # Cards without MIG that platforms commonly pool for sharing or development.
    "T4": {"memory": "16Gi", "product": "Tesla-T4", "mig": []},
    "L4": {"memory": "24Gi", "product": "NVIDIA-L4", "mig": []},
    "A10": {"memory": "24Gi", "product": "NVIDIA-A10", "mig": []},
    "L40S": {"memory": "48Gi", "product": "NVIDIA-L40S", "mig": []},
}


# --- DRA device classes ------------------------------------------------------------------------------
#
# What a DeviceClass hands out, for the classes the GPU DRA drivers ship (their Helm charts'
# deviceclass templates; see docs/policy.md "Dynamic Resource Allocation"). A policy may override an
# entry or add classes under ``spec.deviceClasses``. ``kind``: ``whole`` (a card), ``mig`` (a MIG
# device), ``shared`` (a share of a card sized by capacity), ``other`` (a known device that is not a
# GPU, e.g. an IMEX channel: recognised, never counted). A name starting with ``*.`` matches every
# class ending in the rest; an exact name wins over a pattern. A per-profile MIG class
# (``mig-1g-12gb.gpu.nvidia.com``) takes its profile from the name.
BUILTIN_DEVICE_CLASSES: dict[str, dict[str, object]] = {
    "gpu.nvidia.com": {"kind": "whole", "driver": "gpu.nvidia.com", "extendedResourceName": "nvidia.com/gpu"},
    "mig.nvidia.com": {"kind": "mig", "driver": "gpu.nvidia.com"},
    "vfio.gpu.nvidia.com": {"kind": "whole", "driver": "gpu.nvidia.com"},
    "*.gpu.nvidia.com": {"kind": "mig", "driver": "gpu.nvidia.com"},
    "compute-domain-daemon.nvidia.com": {"kind": "other", "driver": "compute-domain.nvidia.com"},
    "compute-domain-default-channel.nvidia.com": {"kind": "other", "driver": "compute-domain.nvidia.com"},
    "gpu.amd.com": {"kind": "whole", "driver": "gpu.amd.com"},
    "hami-core-gpu.project-hami.io": {"kind": "shared", "driver": "hami-core-gpu.project-hami.io"},
}

# DRA drivers whose devices are GPUs: a DeviceClass the catalogue does not name is recognised by the
# driver its CEL selector requires (``device.driver == '<driver>'``). NVIDIA's driver tells whole cards
# from MIG devices by the ``type`` attribute.
BUILTIN_DRA_DRIVERS: dict[str, str] = {
    "gpu.nvidia.com": "whole",
    "gpu.amd.com": "whole",
    "hami-core-gpu.project-hami.io": "shared",
    "compute-domain.nvidia.com": "other",
}


# --- DRA device taints (KEP-5055) ----------------------------------------------------------------------
#
# The taints NVIDIA's DRA driver puts on unhealthy devices (k8s-dra-driver-gpu
# cmd/gpu-kubelet-plugin/device_health.go, healthEventToTaint): an XID error (NoSchedule; None for an
# XID the health monitor deems non-fatal), a lost GPU (NoSchedule), a device it cannot monitor (None,
# informational). A claim that tolerates a NoSchedule/NoExecute one may be given a broken card; a
# policy adds its own (reservations, maintenance) under ``spec.deviceTaints``.
BUILTIN_DEVICE_TAINTS: dict[str, dict[str, str]] = {
    "gpu.nvidia.com/xid": {"effect": "NoSchedule", "description": "an XID error on the GPU (NVIDIA DRA driver)"},
    "gpu.nvidia.com/gpu-lost": {"effect": "NoSchedule", "description": "the GPU fell off the bus (NVIDIA DRA driver)"},
    "gpu.nvidia.com/unmonitored": {
        "effect": "None",
        "description": "the driver cannot monitor the GPU's health (informational)",
    },
}

"""Built-in catalogs: GPU models (memory as nodes report it, GFD product label, MIG profiles and
mig-parted layouts) and DRA device classes.

The GPU models are shipped data (``gpu_models.yaml``), each number with its source: nominal sizes
are not what nodes advertise, and a pod sized by them stays Pending. A policy may
override any entry or add models under ``spec.gpuModels``. Profile names keep NVIDIA's spelling
(``1g.10gb+me``); the device plugin's resource name replaces ``+`` with ``.`` (``mig-1g.10gb.me``).
"""

from __future__ import annotations

from webhook.policy.shipped import load_shipped

GIB = 1024**3


def _load_models() -> dict[str, dict[str, object]]:
    """The shipped catalog (``gpu_models.yaml``): every number there names its source."""
    return dict(load_shipped("gpu_models.yaml")["models"])


# model -> {memory, usableMemory, product, mig: [[profile, max, usable memory], ...], layouts, sources}
BUILTIN_GPU_MODELS: dict[str, dict[str, object]] = _load_models()


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

"""Upstream facts the Kubernetes 1.36 DRA tests are written against, each with where it was read.

Kept here, in the repository, so the tests never depend on ``../shared``: field names, markers and taint
keys copied from the upstream sources (read with git at the commits named), not from memory.
"""

from __future__ import annotations

# kubernetes/api 10b39a39 (2026-07-24) resource/v1/types.go, the constants block:
#   "ExtendedResourceClaimAnnotation is the annotation applied on the generated special ResourceClaim.
#    Its single valid value is "true". This is used only inside the scheduler."
EXTENDED_RESOURCE_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
EXTENDED_RESOURCE_CLAIM_VALUE = "true"
# the binder (part of kube-scheduler) writes that claim (KEP-5004 README; kubernetes test/e2e
# dra.sh: generateName "<pod>-extended-resources-"); the scheduler's identity in request.userInfo:
SCHEDULER_USERNAME = "system:kube-scheduler"
IMPLICIT_EXTENDED_PREFIX = "deviceclass.resource.kubernetes.io/"  # same file, ResourceDeviceClassPrefix

# resource/v1/types.go, DeviceClassSpec: ExtendedResourceName *string `json:"extendedResourceName,omitempty"`
DEVICE_CLASS_EXTENDED_FIELD = "extendedResourceName"

# resource/v1/types.go, ExactDeviceRequest and DeviceSubRequest (firstAvailable[]):
#   Tolerations []DeviceToleration `json:"tolerations,omitempty"` (max 16, DRADeviceTaints)
# DeviceToleration: key ("Empty means match all taint keys. If the key is empty, operator must be
# Exists"), operator (Exists | Equal, default Equal), value, effect ("Empty means match all taint
# effects. When specified, allowed values are NoSchedule and NoExecute"), tolerationSeconds.
# DeviceTaint: key, value, effect (None | NoSchedule | NoExecute; "None: the taint is purely informational").
DEVICE_TOLERATION_FIELDS = ("key", "operator", "value", "effect", "tolerationSeconds")
DEVICE_TAINT_EFFECTS = ("None", "NoSchedule", "NoExecute")

# NVIDIA/k8s-dra-driver-gpu 22407113 (2026-05-15) cmd/gpu-kubelet-plugin/device_health.go,
# healthEventToTaint (DriverName = "gpu.nvidia.com"):
NVIDIA_TAINTS = {
    "gpu.nvidia.com/xid": "NoSchedule",  # None only for an XID the monitor deems non-fatal
    "gpu.nvidia.com/gpu-lost": "NoSchedule",
    "gpu.nvidia.com/unmonitored": "None",
}

# resource/v1/types.go, DeviceCapacity{value, requestPolicy}; CapacityRequestPolicy{default,
# validValues (ascending, <= 10), validRange}; CapacityRequestPolicyRange{min, max, step}:
#   "If the requested amount is less than Min, it is rounded up to the Min value."
#   "If Step is set ... it will be rounded up to the next value equal to Min + (n * Step)."
#   "If the requested or rounded amount exceeds Max (if set) ... the device cannot be allocated."
#   validValues: "the smallest valid value that is greater than or equal to the request"; above all: not allocatable.
# Device.allowMultipleAllocations ("The Device must have allowMultipleAllocations set to true in order
# to set a requestPolicy"); ExactDeviceRequest.capacity.requests (CapacityRequirements).
REQUEST_POLICY_FIELDS = ("default", "validValues", "validRange")
# ResourceClaim.spec: "The spec is immutable."; ResourceClaimTemplate.spec: "This field is immutable."
# (ResourceClaimTemplateSpec.metadata "may contain labels and annotations that will be copied into the
# ResourceClaim"): so an UPDATE can add the marker only to a claim's own metadata.
RANGE_FIELDS = ("min", "max", "step")

# NVIDIA/k8s-dra-driver-gpu: ComputeDomain (api/nvidia.com/resource/v1beta1, group resource.nvidia.com):
# spec.numNodes (deprecated), spec.channel.resourceClaimTemplate.name (the RCT its controller creates),
# spec.channel.allocationMode (Single | All); channel DeviceClass compute-domain-default-channel.nvidia.com.
COMPUTE_DOMAIN_API = "resource.nvidia.com/v1beta1"

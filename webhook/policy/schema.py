"""The JSON Schema of the policy format, generated from the pydantic model, and its field reference.

Editors validate and complete policy files with it (``# yaml-language-server: $schema=./schema.json``
on the first line of ``policies/default.yaml``); ``docs/policy.md`` embeds the field tables rendered
from the same source. Pydantic gives structure, types, enums, bounds and defaults. What the model
expresses in validator functions (name patterns, quantities, the ``[name, max]`` MIG pair form, the
rule ids) and the per-field prose are added here, so one table feeds the schema and the docs, and a
test keeps ``policies/schema.json`` and ``docs/policy.md`` in step with the model.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import yaml

from webhook.policy import model as m
from webhook.policy.stacks import stacks

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"

# Patterns the model checks in validator functions; reused so that the schema cannot drift from them.
DNS_LABEL = m._DNS_LABEL.pattern
LABEL_KEY = m._LABEL_KEY.pattern
MIG_PROFILE = m._MIG_PROFILE.pattern
RESOURCE_NAME = m._RESOURCE_NAME.pattern
KUBE_VERSION = m.KUBE_VERSION_PATTERN
QUANTITY = r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$"

# model -> {"": what the object is, alias: (description, example as a YAML snippet)}.
# The example is parsed into the schema's ``examples`` and shown verbatim in docs/policy.md.
FIELDS: dict[str, dict[str, Any]] = {
    "PolicyDocument": {
        "": "One YAML document of the policy directory; all documents of all files are merged.",
        "apiVersion": ("always `gpu-admission.io/v1`", "apiVersion: gpu-admission.io/v1"),
        "kind": ("always `GPUPolicy`", "kind: GPUPolicy"),
        "metadata": ("name (shown in logs and metrics) and free-form labels/annotations", "metadata: {name: default}"),
        "spec": ("the policy itself", "spec: {pools: {}, classes: {}}"),
    },
    "Metadata": {
        "": "Identifies a policy document; has no effect on decisions.",
        "name": ("document name, reported by lint and in server logs", "name: default"),
        "annotations": ("free-form notes", "annotations: {owner: platform-team}"),
        "labels": ("free-form labels", "labels: {env: prod}"),
    },
    "PolicySpec": {
        "": "The merged content of every policy document. Names are unique across files.",
        "settings": ("global settings; at most one file may set them", "settings: {wasteFraction: 0.5}"),
        "gpuModels": (
            "GPU models added to (or overriding) the built-in catalog, by name",
            "gpuModels: {L40S-48GB: {memory: 48Gi, product: NVIDIA-L40S}}",
        ),
        "deviceClasses": (
            "DRA DeviceClasses added to (or overriding) the built-in catalogue, by name; `*.suffix` matches "
            "every class ending in `.suffix`",
            "deviceClasses: {gpu.example.com: {kind: whole, driver: gpu.example.com}}",
        ),
        "deviceTaints": (
            "DRA device taints beyond the built-in NVIDIA health taints (`gpu.nvidia.com/xid`, `gpu-lost`, "
            "`unmonitored`), by key: what a claim tolerating each gets",
            "deviceTaints: {example.com/reserved: {effect: NoSchedule}}",
        ),
        "pools": ("node pools by name (DNS label)", "pools: {infer-a100: {gpuModel: A100-40GB, gpusPerNode: 8}}"),
        "classes": ("workload classes by name (DNS label)", "classes: {inference: {pools: [infer-a100]}}"),
        "namespaces": (
            "entitlements: which namespaces may use which classes; first matching rule wins",
            "namespaces: [{selector: {}, classes: [inference]}]",
        ),
        "rules": ("rule settings by rule id", "rules: {raw-gpu-request: {action: warn}}"),
        "priorityClasses": (
            "PriorityClasses `gpu-admission policy render` creates, by name (the ones classes name)",
            "priorityClasses: {gpu-training: {value: 50000}}",
        ),
        "exceptions": (
            "named, expiring permissions for subjects to break rules; reported as audit entries (see Exceptions)",
            "exceptions: [{name: dcgm-diag, rules: [privileged-gpu], namespaces: {}, "
            "subjects: [{kind: User, name: ci-bot}], expires: '2027-01-31', reason: diagnostics, owner: platform}]",
        ),
        "workloadKinds": (
            "the platform's own workload CRDs, described like the built-in kinds",
            "workloadKinds: [{apiVersion: example.com/v1, kind: TrainRun, mutate: true, "
            "templates: [{path: 'spec.workers[*].template'}]}]",
        ),
    },
    "PolicyException": {
        "": "Lets the subjects break the rules in the selected namespaces until `expires` (docs: Exceptions).",
        "name": ("unique name; audit entries, metrics and grants name it", "name: dcgm-diag"),
        "rules": (
            "rule ids it covers (not engine-error, placement-missing, malformed-object)",
            "rules: [privileged-gpu]",
        ),
        "namespaces": ("label selector of the namespaces it applies in; `{}` = every one", "namespaces: {}"),
        "kinds": (
            "object kinds it applies to (for pods of a controller: the controller's kind)",
            "kinds: [Deployment]",
        ),
        "names": ("object names it applies to (for pods of a controller: the controller's name)", "names: [dcgm]"),
        "subjects": (
            "who may use it, as RBAC subjects: `User`, `Group`, `ServiceAccount` (with `namespace`)",
            "subjects: [{kind: ServiceAccount, namespace: ci, name: deployer}]",
        ),
        "expires": ("the day (UTC) it stops applying; lint warns a week ahead", "expires: '2027-01-31'"),
        "reason": ("why it exists, for the record", "reason: DCGM diagnostics run privileged"),
        "owner": ("who answers for it", "owner: platform-team"),
    },
    "Subject": {
        "": "An RBAC-style subject; a ServiceAccount matches `system:serviceaccount:<namespace>:<name>`.",
        "kind": ("`User`, `Group` or `ServiceAccount`", "kind: ServiceAccount"),
        "name": ("user, group or service account name", "name: deployer"),
        "namespace": ("the service account's namespace (ServiceAccount only)", "namespace: ci"),
    },
    "PriorityClassSpec": {
        "": "A PriorityClass the classes name; without it the API server rejects their pods.",
        "value": ("scheduling priority, higher first (at most 1000000000)", "value: 50000"),
        "preemptionPolicy": (
            "`PreemptLowerPriority` (default) or `Never`: wait for room instead of evicting others",
            "preemptionPolicy: Never",
        ),
        "description": ("shown by `kubectl get priorityclass`", "description: gang-scheduled GPU training"),
    },
    "WorkloadKindSpec": {
        "": "One workload kind: where its pod templates are, how many pods it runs, which keys each gang "
        "backend reads. The built-in kinds are the same data, shipped.",
        "apiVersion": ("group/version of the CRD", "apiVersion: example.com/v1"),
        "kind": ("kind of the CRD", "kind: TrainRun"),
        "name": ("display name in messages and the explanation (default: kind)", "name: TrainRun"),
        "resource": ("plural resource name the webhook configurations intercept", "resource: trainruns"),
        "mutate": (
            "patched at CREATE like a Job (true), or validated as its pods will be (false)",
            "mutate: true",
        ),
        "scope": ("`Namespaced`, or `Cluster` (checked offline only)", "scope: Namespaced"),
        "templates": ("its pod templates", "templates: [{path: 'spec.workers[*].template'}]"),
        "gang": ("how its gang is named, sized and selected", "gang: {selector: example.com/run-name}"),
        "backends": (
            "per gang backend, the keys its integration reads; a backend not listed cannot gang this kind",
            "backends: {kueue: [{path: 'metadata.labels[kueue.x-k8s.io/queue-name]', value: queue, minPods: 1}]}",
        ),
        "topology": (
            "annotations its controller turns into packing",
            "topology: [{path: 'metadata.annotations[example.com/exclusive-topology]'}]",
        ),
        "tasks": (
            "a task list read as Volcano reads it (dependsOn, per-task and job minAvailable)",
            "tasks: spec.tasks",
        ),
        "batchJob": (
            "where a batch Job's metadata and spec are ('' for a Job); Kueue's job-min-parallelism is read there",
            "batchJob: spec.jobTemplate",
        ),
        "perNode": ("its controller runs one pod per node it selects: never pinned to a pool", "perNode: true"),
        "networkTopology": ("Volcano networkTopology field of the object", "networkTopology: spec.networkTopology"),
        "validateFields": ("check Volcano Job field names (unknown-field)", "validateFields: false"),
        "schedulers": (
            "schedulers its own controller or webhook sets on it (always allowed by scheduling-not-allowed)",
            "schedulers: [volcano]",
        ),
        "sample": (
            "a sample object: lint warns about template paths that match nothing in it",
            "sample: {spec: {workers: [{template: {spec: {containers: []}}}]}}",
        ),
        "scale": (
            "its CRD's scale subresource (`kubectl scale`, HPA): the validating webhook judges "
            "`<resource>/scale` as the object with that field set (the webhook reads the object, so give "
            "its ServiceAccount `get` on the resource)",
            "scale: {replicas: spec.replicas}",
        ),
    },
    "ScaleKind": {
        "": "Where an `autoscaling/v1` Scale's `spec.replicas` lands in the object (the CRD's "
        "`subresources.scale.specReplicasPath`).",
        "replicas": ("one field path, no wildcards", "replicas: spec.workers.replicas"),
    },
    "TemplateKind": {
        "": "Where one pod template (or a list or map of them) is, and how many pods it runs per gang.",
        "path": ("field path of the PodTemplateSpec, with [*] and * wildcards", "path: 'spec.workers[*].template'"),
        "replicas": (
            "pods per gang: the product of these factors",
            "replicas: [{fields: ['spec.workers[*].replicas']}]",
        ),
        "role": ("field holding the template's role name", "role: 'spec.workers[*].name'"),
        "name": ("a fixed role name", "name: head"),
        "gang": ("its pods join the gang", "gang: true"),
        "resources": (
            "a ResourceRequirements field instead of a pod template: the one container's resources, "
            "judged and (for a mutated kind) rewritten in place",
            "resources: spec.trainer.resourcesPerNode",
        ),
        "container": ("name of the container those resources belong to", "container: node"),
        "env": ("with resources: that container's env list on the object", "env: spec.trainer.env"),
        "runtimePatches": (
            "with resources: the runtime patches that carry the rest of the pod template (Trainer TrainJob)",
            "runtimePatches: {path: spec.runtimePatches, job: node}",
        ),
    },
    "RuntimePatchKind": {
        "": "Kubeflow Trainer-style runtime patches: a list keyed by manager, each patching the pod template "
        "of named replicated jobs (labels, annotations, nodeSelector, affinity, tolerations, volumes, …).",
        "path": ("the list of patches on the object", "path: spec.runtimePatches"),
        "job": ("the replicated job whose pods carry the devices", "job: node"),
        "manager": ("the webhook's own entry (`{prefix}`: the intent prefix)", "manager: '{prefix}/webhook'"),
    },
    "Count": {
        "": "One factor of a template's pod count.",
        "fields": ("first integer found wins", "fields: ['spec.workers[*].replicas']"),
        "default": ("when no field is set", "default: 1"),
        "atMost": ("capped by this field", "atMost: spec.completions"),
        "minus": ("subtracted when minusWhen is present", "minus: 1"),
        "minusWhen": ("field whose presence makes minus apply", "minusWhen: spec.leaderTemplate"),
    },
    "GangKind": {
        "": "How the kind's gang is named, sized and selected.",
        "name": ("`object` (metadata.name) or `intent` (the gang annotation)", "name: object"),
        "size": (
            "`replicas` (Σ template pods), `intent` (gang-size) or `nodes` (one pod per node of its pool)",
            "size: replicas",
        ),
        "carrier": (
            "`kind`: the gang is spelled in `backends`; `template`: the controller creates plain Pods from its "
            "template, so the gang is the backend's pod-group keys on the template (apps/v1 controllers)",
            "carrier: kind",
        ),
        "selector": (
            "label the controller puts on every pod with the gang's name (topology selects the gang by it)",
            "selector: example.com/run-name",
        ),
        "writeSelector": ("the webhook writes the selector label itself", "writeSelector: false"),
        "groups": ("one gang per group: the number of groups", "groups: spec.replicas"),
    },
    "GangKey": {
        "": "A key a gang backend reads on this kind, with what the webhook writes (when absent) and checks.",
        "path": ("field path on the object (or in each template)", "path: spec.runPolicy.minAvailable"),
        "template": ("path relative to each pod template of the gang", "template: false"),
        "value": (
            "`scheduler`, `size`, `name`, `queue`, `priorityClass` or `replicas` (checked only)",
            "value: size",
        ),
        "literal": ("a fixed value instead", "literal: 'true'"),
        "minPods": ("written only for gangs of at least this many pods", "minPods: 2"),
        "needsName": ("written only when the gang has a name", "needsName: false"),
        "write": ("false: only checked", "write: true"),
        "check": (
            "`below` or `differs`: a present value below (other than) the derived one is gang-incomplete",
            "check: below",
        ),
        "sizeName": ("what the size is called in messages", "sizeName: replicas"),
    },
    "TopologyKey": {
        "": "An annotation the kind's controller turns into packing; it gets the level's node label key.",
        "path": ("where the node label key goes", "path: 'metadata.annotations[example.com/exclusive-topology]'"),
        "requiredOnly": ("only for `:required` topology", "requiredOnly: false"),
    },
    "Settings": {
        "": "Settings that apply to the whole policy.",
        "prefix": (
            "prefix of the intent keys (`<prefix>/workload`, `<prefix>/gpu-memory`, …)",
            "prefix: gpu-admission.io",
        ),
        "wasteFraction": (
            "whole-gpu-waste warns when gpu-memory is at most this fraction of an exclusive card",
            "wasteFraction: 0.5",
        ),
        "failure": (
            "what `/mutate` does when the engine raises on an object: `allow` (admitted without a patch, "
            "logged, counted) or `deny`; `/validate` denies such an object either way (`engine-error`), so "
            "`allow` is not fail-open: it only lets the denial come from `/validate`",
            "failure: allow",
        ),
        "enforcement": (
            "what a rule's `deny` does, policy-wide, without editing a rule: `enforce` (denied), `warn` "
            "(admitted with an admission warning `[rule, would deny]` and an audit annotation) or `audit` "
            "(admitted; audit annotation, log line and `gpu_admission_would_deny_total` only). The observe-first "
            "rollout (docs/install.md): nothing the webhook answers denies under `warn`/`audit`, engine errors "
            "included; `warn`/`audit`/`off` rules and exceptions keep their own action; re-render after a change",
            "enforcement: enforce",
        ),
        "mutation": (
            "`apply`: `/mutate` places class pods and raw requests; `off`: no patch, and neither the mutating "
            "webhook nor MutatingAdmissionPolicies are rendered. Under an observe enforcement a CREATE is then "
            "judged as the patch would have left it (what enforce with mutation would deny); under `enforce` an "
            "unplaced class pod is denied (`placement-missing`)",
            "mutation: apply",
        ),
        "rawRequests": (
            "raw GPU requests (GPU resources, no workload label): `pin` sets the nodeSelector and "
            "tolerations of the first entitled pool offering their devices; `deny` leaves them as written "
            "and pool-spoofing denies those that can reach a pool outside the entitlement",
            "rawRequests: pin",
        ),
        "privilegedGPUPools": (
            "which pools make a CPU-only pod subject to privileged-gpu when it can reach them: `sliced` "
            "(MIG or shared cards) or `all` GPU pools",
            "privilegedGPUPools: sliced",
        ),
        "platformGroup": (
            "the group whose members may set, change or remove the namespace labels that entitlements, "
            "exemptions and per-namespace actions select on (`policy render` emits the "
            "ValidatingAdmissionPolicy that enforces it; `system:masters` may too)",
            "platformGroup: gpu-admission:platform",
        ),
        "controllers": (
            "usernames of the controllers that create objects from pod templates; an exception grant is "
            "honoured only on objects they create (default: kube-controller-manager's service accounts)",
            "controllers: [system:serviceaccount:volcano-system:volcano-controllers]",
        ),
        "gpuResourcePrefixes": (
            "extended resource names (prefix match) that count as GPUs; every sharing stack's resources count too",
            "gpuResourcePrefixes: [nvidia.com/gpu, nvidia.com/mig-, aliyun.com/gpu]",
        ),
        "gpuFractionAnnotations": (
            "pod annotations a scheduler reads as a share of one GPU (default KAI's `gpu-fraction`, "
            "`gpu-memory`): such a pod holds a shared GPU (placement, privileged-gpu), with no GPU resource",
            "gpuFractionAnnotations: [gpu-fraction, gpu-memory]",
        ),
        "inTree": (
            "how `policy render` renders the in-tree guarantees (SPEC §12) for this cluster; the flags "
            "`--kube-version`, `--mutating`/`--no-mutating` and `--availability` override it",
            "inTree: {kubeVersion: \"1.36\", mutating: true, availability: in-tree}",
        ),
    },
    "InTreeSettings": {
        "": "The in-tree render: what the cluster serves and which failure policies the webhooks run with.",
        "kubeVersion": (
            "the cluster's Kubernetes version, quoted (`\"1.36\"`): from 1.36 `policy render --in-tree` also "
            "emits MutatingAdmissionPolicies; default 1.30",
            "kubeVersion: \"1.36\"",
        ),
        "mutating": (
            "emit the MutatingAdmissionPolicies where the cluster serves them; `false`: validating only",
            "mutating: true",
        ),
        "availability": (
            "`webhook`: the validating webhook fails closed; `in-tree`: it fails open, for clusters with "
            "the in-tree policies installed (the webhook configurations carry the mode)",
            "availability: in-tree",
        ),
    },
    "DeviceClass": {
        "": "What a DRA DeviceClass hands out; claims on it are counted and sized through this entry.",
        "kind": (
            "`whole` (a card), `mig` (a MIG device), `shared` (a share sized by capacity), `other` (a known "
            "device that is not a GPU, such as an IMEX channel: never counted, never claim-unresolved)",
            "kind: whole",
        ),
        "driver": ("the DRA driver serving the class (informational; MIG selectors use its attribute domain)",
                   "driver: gpu.nvidia.com"),
        "profile": ("mig: the MIG profile of every device of the class", "profile: 1g.10gb"),
        "memory": ("memory of each device, when the class fixes it", "memory: 24Gi"),
        "extendedResourceName": (
            "the extended resource the class serves (as its `spec.extendedResourceName`): pods asking for it "
            "hold this class's devices",
            "extendedResourceName: example.com/gpu",
        ),
    },
    "DeviceTaintSpec": {
        "": "A device taint (DRA, KEP-5055) as the webhook judges claims that tolerate it.",
        "effect": (
            "`None` (informational: tolerating it by key is fine), `NoSchedule` or `NoExecute` (devices kept out "
            "of service: only namespaces whose class or pool allows the key may tolerate it)",
            "effect: NoSchedule",
        ),
        "description": ("what the taint means (free text)", "description: cards held for the on-call team"),
    },
    "DraConfig": {
        "": "The pool serves GPUs through DRA: intent becomes a claim on the platform's template, not "
        "extended resources.",
        "deviceClasses": (
            "isolation → the DeviceClass the platform's templates use; isolations not listed keep extended "
            "resources",
            "deviceClasses: {mig: mig.nvidia.com, exclusive: gpu.nvidia.com}",
        ),
        "templates": (
            "naming rules of the platform's ResourceClaimTemplates",
            "templates: {mig: 'gpu-admission-mig-{profile}'}",
        ),
        "memorySizes": (
            "shared: the memory slices offered; intent is rounded up to the next one (default: powers of two "
            "GiB below the card, and the whole card)",
            "memorySizes: [4Gi, 8Gi, 12Gi, 24Gi]",
        ),
        "claimName": ("name of the pod resource claim the webhook adds", "claimName: gpu"),
        "serves": (
            "further DeviceClasses the pool's nodes serve (`*.suffix` matches every class ending in it), "
            "for pods that write their own claims: a claim reaches only the pools serving its class",
            "serves: [gpu.nvidia.com]",
        ),
    },
    "DraTemplates": {
        "": "Names of the platform's ResourceClaimTemplates; the placeholder is filled in per size.",
        "exclusive": ("whole GPUs; `{count}` is the number of GPUs", "exclusive: 'gpu-admission-gpu-{count}'"),
        "mig": (
            "MIG; `{profile}` is the profile with `.`/`+` as `-` (`1g-5gb`)",
            "mig: 'gpu-admission-mig-{profile}'",
        ),
        "shared": (
            "memory slices; `{memory}` is the size in lower case (`4gi`)",
            "shared: 'gpu-admission-mem-{memory}'",
        ),
    },
    "GPUModel": {
        "": "A GPU model of the catalog: memory as nodes report it, the GFD product label, its MIG profiles "
        "and mig-parted layouts.",
        "memory": ("nominal memory of one card, the size in the product name (Kubernetes quantity)", "memory: 80Gi"),
        "usableMemory": (
            "memory of one card as nodes report it (GFD `nvidia.com/gpu.memory`, MiB): requests must fit it, "
            "and each stack's unit is counted from it; default: `memory`",
            "usableMemory: 81559Mi",
        ),
        "product": (
            "GFD `nvidia.com/gpu.product` value; the single MIG strategy selects `<product>-MIG-<profile>`",
            "product: NVIDIA-A100-SXM4-80GB",
        ),
        "mig": (
            "MIG profiles, as `{name, max, memory}` objects or `[name, max]` / `[name, max, memory]` lists; "
            "empty: no MIG",
            "mig: [[1g.10gb, 7, 9984Mi], [3g.40gb, 2, 40448Mi], [7g.80gb, 1, 81152Mi]]",
        ),
        "layouts": (
            "mig-parted configs (values of the `nvidia.com/mig.config` node label): profile -> instances per GPU",
            "layouts: {all-balanced: {1g.10gb: 2, 2g.20gb: 1, 3g.40gb: 1}}",
        ),
        "memorySource": ("where `usableMemory` comes from (documentation only)", "memorySource: nvidia-smi"),
        "migSource": ("where the profiles' memory comes from (documentation only)", "migSource: nvidia-smi mig -lgip"),
    },
    "MigProfile": {
        "": "One MIG profile of a GPU model.",
        "name": ("NVIDIA's profile name; the number before `gb` is nominal", "name: 1g.10gb"),
        "max": ("instances of the profile per GPU", "max: 7"),
        "memory": (
            "usable memory of the GPU instance as `nvidia-smi mig -lgip` lists it; default: the name's number in GiB",
            "memory: 9984Mi",
        ),
    },
    "Pool": {
        "": "A set of identical GPU nodes and the stack that serves them.",
        "description": ("free text, shown by `check --explain`", "description: A100 inference nodes"),
        "gpuModel": ("catalog model of the pool's cards", "gpuModel: A100-40GB"),
        "gpusPerNode": ("cards per node; caps GPUs per pod", "gpusPerNode: 8"),
        "nodes": ("node count; lets gang-unschedulable deny gangs that can never fit", "nodes: 16"),
        "nodeSelector": (
            "labels the pool's nodes carry; merged into every pod placed here",
            "nodeSelector: {workload: gpu-infer}",
        ),
        "tolerations": (
            "tolerations for the pool's taints; merged into every pod placed here",
            "tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]",
        ),
        "isolation": ("what the pool serves: `exclusive`, `mig`, `shared`", "isolation: [mig, exclusive]"),
        "mig": ("MIG partitioning; required when isolation lists `mig`", "mig: {strategy: mixed}"),
        "sharing": (
            "GPU sharing stack; required when isolation lists `shared`",
            "sharing: {provider: hami, cores: 30}",
        ),
        "rdma": (
            "RDMA networking injected into pods of classes that want it",
            "rdma: {networks: [rdma-net-a@net1], resource: {name: rdma/rdma_shared_device_a}}",
        ),
        "topology": (
            "packing level -> node label key (used by class/intent topology)",
            "topology: {node: kubernetes.io/hostname, switch: network.topology.nvidia.com/leaf}",
        ),
        "dra": (
            "serve the pool's GPUs through DRA: claims on the platform's ResourceClaimTemplates instead of "
            "extended resources (`policy render` emits the templates)",
            "dra: {deviceClasses: {mig: mig.nvidia.com}}",
        ),
        "adoptAs": (
            "class given to raw GPU requests (no workload label) whose nodeSelector selects this pool",
            "adoptAs: training",
        ),
        "taints": (
            "taints every node of the pool carries, as the scheduler's TaintToleration filter reads them; "
            "default: one taint per toleration (an `Exists` toleration stands for any value, one without "
            "effect for `NoSchedule`)",
            "taints: [{key: nvidia.com/gpu, effect: NoSchedule}]",
        ),
        "offers": (
            "extended resources the nodes advertise beyond what the pool's stack implies (reachability "
            "judges a pod that asks for a GPU or RDMA resource no pool offers as reaching none)",
            "offers: [nvidia.com/gpu]",
        ),
        "allowedDeviceTaints": (
            "DRA device taint keys the pool's tenants may tolerate in their claims (default none; `*` also a "
            "blanket toleration): device-taint-tolerated denies the others",
            "allowedDeviceTaints: [example.com/reserved]",
        ),
        "nvlinkDomainNodes": (
            "nodes one multi-node NVLink domain (clique) spans, e.g. 18 on a GB200 NVL72 rack: a gang "
            "claiming a ComputeDomain channel must fit in one (compute-domain-invalid)",
            "nvlinkDomainNodes: 18",
        ),
    },
    "Taint": {
        "": "A Kubernetes node taint.",
        "key": ("taint key", "key: nvidia.com/gpu"),
        "value": ("taint value; omitted: none", "value: gpu-train"),
        "effect": ("`NoSchedule`, `PreferNoSchedule` (never filters) or `NoExecute`", "effect: NoSchedule"),
    },
    "Toleration": {
        "": "A Kubernetes toleration.",
        "key": ("taint key", "key: nvidia.com/gpu"),
        "operator": ("`Exists` or `Equal`", "operator: Exists"),
        "value": ("taint value (with `Equal`)", "value: gpu-train"),
        "effect": ("`NoSchedule`, `PreferNoSchedule` or `NoExecute`", "effect: NoSchedule"),
        "tolerationSeconds": (
            "for `NoExecute`: how long the pod stays after the taint appears",
            "tolerationSeconds: 300",
        ),
    },
    "MigConfig": {
        "": "How the pool's cards are partitioned (its geometry): translation, `mig-profile-unavailable`, the gang "
        "capacity check, the waste report and DRA templates use only what is there.",
        "strategy": (
            "`mixed`: pods ask `nvidia.com/mig-<profile>`; `single`: `nvidia.com/gpu` + product node selector",
            "strategy: mixed",
        ),
        "layout": (
            "the mig-parted config the nodes run (their `nvidia.com/mig.config` label); one of the model's `layouts`",
            "layout: all-balanced",
        ),
        "profiles": (
            "profiles the nodes are partitioned into, a list (up to each profile's max) or profile: instances per "
            "GPU; not with `layout`; default (neither): every profile of the model",
            "profiles: {1g.5gb: 2, 2g.10gb: 1, 3g.20gb: 1}",
        ),
    },
    "SharingConfig": {
        "": "The GPU sharing stack of a pool.",
        "provider": (
            "the sharing stack, one of the shipped table's (`sharing_stacks.yaml`): "
            + ", ".join(f"`{s.id}` ({s.title})" for s in stacks().by_id.values()),
            "provider: aliyun-cgpu",
        ),
        "renamed": (
            "the device plugin advertises the stack's renamed resource instead of `nvidia.com/gpu` "
            "(time-slicing's renameByDefault: `nvidia.com/gpu.shared`); only for stacks that have one",
            "renamed: true",
        ),
        "cores": (
            "percent of a card's compute per slice, written to the stack's cores resource "
            "(hami: `nvidia.com/gpucores`); only for stacks that have one",
            "cores: 30",
        ),
    },
    "RdmaConfig": {
        "": "RDMA networking of a pool (Multus + an RDMA device plugin).",
        "networks": (
            "Multus networks: `name`, `ns/name` or `ns/name@ifname`",
            "networks: [rdma-net-a@net1, rdma-net-b@net2]",
        ),
        "resource": (
            "RDMA device resource added to the GPU container",
            "resource: {name: rdma/rdma_shared_device_a, count: 1}",
        ),
        "capabilities": ("capabilities added to the GPU container", "capabilities: [IPC_LOCK]"),
        "shmSize": ("size of the memory-backed `/dev/shm`; `null` to skip", "shmSize: 64Gi"),
        "env": (
            "environment (NCCL) added to the GPU container; never overrides the user's",
            "env: {NCCL_IB_HCA: mlx5}",
        ),
    },
    "RdmaResource": {
        "": "An extended resource of an RDMA device plugin.",
        "name": ("resource name", "name: rdma/rdma_shared_device_a"),
        "count": ("how many per pod (shared plugin: 1)", "count: 1"),
    },
    "WorkloadClass": {
        "": "What a workload class gets: pools, isolation, limits, gang, RDMA, topology, scheduling.",
        "description": ("free text, listed in error messages and docs", "description: online inference"),
        "pools": (
            "candidate pools in order of preference; the first that fits is taken",
            "pools: [infer-a100, infer-l4]",
        ),
        "isolation": ("default and allowed isolations", "isolation: {default: mig, allowed: [mig, exclusive]}"),
        "maxGPUs": (
            "maximum GPU devices per pod, counted over the whole pod as Kubernetes accounts it (containers, native "
            "sidecars, the largest init container, DRA claims); a shared slice counts as one device",
            "maxGPUs: 8",
        ),
        "maxGPUMemory": (
            "maximum gpu-memory per device, and maximum GPU memory per pod: the GPU container's gpu-memory plus "
            "what every other container's devices hold (MIG profiles, shared-memory units, whole cards)",
            "maxGPUMemory: 24Gi",
        ),
        "defaultGPUMemory": ("gpu-memory used when the intent sets none", "defaultGPUMemory: 5Gi"),
        "gang": ("gang scheduling", "gang: {backend: volcano, required: true}"),
        "rdma": ("whether pods of the class get the pool's RDMA by default", "rdma: true"),
        "topology": (
            "packing level `node|switch|rack|zone|none`, optionally `:required`",
            "topology: switch",
        ),
        "priorityClassName": ("set on pods that name none", "priorityClassName: gpu-training"),
        "schedulerName": ("set on pods that name none (or `default-scheduler`)", "schedulerName: volcano"),
        "allowedPriorityClasses": (
            "priority classes a user may set on pods of this class besides `priorityClassName`; anything "
            "else is scheduling-not-allowed (`system-node-critical`/`system-cluster-critical` always are)",
            "allowedPriorityClasses: [gpu-batch-low]",
        ),
        "allowedSchedulers": (
            "schedulers a user may name besides the class's `schedulerName`, its gang backend's (`volcano`) "
            "and `default-scheduler` (which is not allowed when the class sets `schedulerName`)",
            "allowedSchedulers: [kai-scheduler]",
        ),
        "qos": ("`Guaranteed`: warn (inference-not-guaranteed) when pods are not Guaranteed QoS", "qos: Guaranteed"),
        "kueueQueue": (
            "Kueue LocalQueue for the kueue gang backend (a namespace rule may override)",
            "kueueQueue: team-queue",
        ),
        "allowedDeviceTaints": (
            "DRA device taint keys this class's pods may tolerate in their claims (with those of its pool; "
            "`*` also a blanket toleration)",
            "allowedDeviceTaints: [example.com/reserved]",
        ),
    },
    "IsolationPolicy": {
        "": "Isolation of a class: the default and what an intent may ask for.",
        "default": ("isolation when the intent names none", "default: mig"),
        "allowed": ("isolations the intent may ask for; default: only the default", "allowed: [mig, exclusive]"),
    },
    "GangPolicy": {
        "": "Gang scheduling of a class's multi-pod workloads.",
        "backend": ("`none`, `volcano`, `kueue`, `coscheduling` or `kai` (NVIDIA KAI scheduler)", "backend: volcano"),
        "required": ("multi-pod workloads must form a gang (rule gang-required)", "required: true"),
        "allOrNothing": (
            "deny partial gangs: minAvailable below the replicas (rule gang-incomplete)",
            "allOrNothing: true",
        ),
        "schedulerName": (
            "scheduler of the gang backend; default `volcano` for volcano, `kai-scheduler` for kai",
            "schedulerName: volcano",
        ),
        "queue": (
            "the backend's queue (Volcano Queue, KAI queue, Kueue LocalQueue; `kueueQueue` wins for kueue), "
            "written where each kind's integration reads it (docs/policy.md, workload kinds)",
            "queue: research",
        ),
    },
    "Entitlement": {
        "": "A namespace rule: namespaces whose labels match get these classes (and pools).",
        "name": ("shown in `check --explain` and lint", "name: training-teams"),
        "selector": (
            "namespace label selector; `{}` matches every namespace",
            "selector: {matchLabels: {gpu-admission.io/tier: training}}",
        ),
        "classes": ("classes the namespaces may use", "classes: [training, inference]"),
        "pools": ("restricts the classes' pools; default: all of them", "pools: [train-h100]"),
        "kueueQueue": ("Kueue LocalQueue for these namespaces (overrides the class's)", "kueueQueue: research"),
        "queue": (
            "the gang backend's queue for these namespaces (overrides the class's `gang.queue`)",
            "queue: research",
        ),
        "allowedPriorityClasses": (
            "priority classes raw GPU requests (no workload class) of these namespaces may set; none "
            "listed: none (the cluster's default priority applies), anything else is scheduling-not-allowed",
            "allowedPriorityClasses: [research-low]",
        ),
        "allowedSchedulers": (
            "schedulers besides `default-scheduler` raw GPU requests of these namespaces may name; none "
            "listed: only the default scheduler (and `volcano` on a Volcano Job, which Volcano sets itself)",
            "allowedSchedulers: [kai-scheduler]",
        ),
        "defaultIsolation": (
            "class -> the isolation these namespaces' pods of that class get when they name none, instead of "
            "the class's default (one the class allows): `shared` where the rule's `pools` serve no MIG",
            "defaultIsolation: {inference: shared}",
        ),
    },
    "LabelSelector": {
        "": "A Kubernetes label selector (all terms must match).",
        "matchLabels": ("labels that must be equal", "matchLabels: {team: ml}"),
        "matchExpressions": (
            "set-based requirements",
            "matchExpressions: [{key: team, operator: In, values: [ml, research]}]",
        ),
    },
    "SelectorRequirement": {
        "": "One set-based requirement of a label selector.",
        "key": ("label key", "key: team"),
        "operator": ("`In`, `NotIn`, `Exists` or `DoesNotExist`", "operator: In"),
        "values": ("values for `In`/`NotIn`", "values: [ml, research]"),
    },
    "RuleSettings": {
        "": "The action of one rule: global, per namespace selector, per class, and exemptions.",
        "action": ("action for everyone else: `deny`, `warn`, `audit` or `off`", "action: warn"),
        "classes": ("action per class", "classes: {dev: audit}"),
        "namespaces": (
            "action per namespace selector; the first matching entry wins over classes and action",
            "namespaces: [{selector: {matchLabels: {env: sandbox}}, action: audit}]",
        ),
        "exempt": (
            "namespace selectors for which the rule is off",
            "exempt: [{matchLabels: {gpu-admission.io/raw-gpus: allowed}}]",
        ),
    },
    "NamespaceAction": {
        "": "A rule action for the namespaces a selector matches.",
        "selector": ("namespace label selector", "selector: {matchLabels: {env: sandbox}}"),
        "action": ("`deny`, `warn`, `audit` or `off`", "action: audit"),
    },
}

# Models in the order the field reference presents them, with where they sit in a policy document.
ORDER: tuple[tuple[str, str], ...] = (
    ("PolicyDocument", "(document)"),
    ("Metadata", "metadata"),
    ("PolicySpec", "spec"),
    ("Settings", "spec.settings"),
    ("InTreeSettings", "spec.settings.inTree"),
    ("GPUModel", "spec.gpuModels.<model>"),
    ("MigProfile", "spec.gpuModels.<model>.mig[]"),
    ("Pool", "spec.pools.<pool>"),
    ("Toleration", "spec.pools.<pool>.tolerations[]"),
    ("Taint", "spec.pools.<pool>.taints[]"),
    ("MigConfig", "spec.pools.<pool>.mig"),
    ("SharingConfig", "spec.pools.<pool>.sharing"),
    ("RdmaConfig", "spec.pools.<pool>.rdma"),
    ("RdmaResource", "spec.pools.<pool>.rdma.resource"),
    ("DraConfig", "spec.pools.<pool>.dra"),
    ("DraTemplates", "spec.pools.<pool>.dra.templates"),
    ("DeviceClass", "spec.deviceClasses.<class>"),
    ("DeviceTaintSpec", "spec.deviceTaints.<key>"),
    ("WorkloadClass", "spec.classes.<class>"),
    ("IsolationPolicy", "spec.classes.<class>.isolation"),
    ("GangPolicy", "spec.classes.<class>.gang"),
    ("Entitlement", "spec.namespaces[]"),
    ("LabelSelector", "spec.namespaces[].selector, spec.rules.<id>.exempt[], …"),
    ("SelectorRequirement", "….matchExpressions[]"),
    ("RuleSettings", "spec.rules.<rule-id>"),
    ("NamespaceAction", "spec.rules.<rule-id>.namespaces[]"),
    ("PolicyException", "spec.exceptions[]"),
    ("Subject", "spec.exceptions[].subjects[]"),
    ("PriorityClassSpec", "spec.priorityClasses.<name>"),
    ("WorkloadKindSpec", "spec.workloadKinds[]"),
    ("TemplateKind", "spec.workloadKinds[].templates[]"),
    ("RuntimePatchKind", "spec.workloadKinds[].templates[].runtimePatches"),
    ("Count", "spec.workloadKinds[].templates[].replicas[]"),
    ("GangKind", "spec.workloadKinds[].gang"),
    ("GangKey", "spec.workloadKinds[].backends.<backend>[]"),
    ("TopologyKey", "spec.workloadKinds[].topology[]"),
    ("ScaleKind", "spec.workloadKinds[].scale"),
)

_QUANTITY_FIELDS = {("GPUModel", "memory"), ("GPUModel", "usableMemory"), ("MigProfile", "memory"),
                    ("WorkloadClass", "maxGPUMemory"),
                    ("WorkloadClass", "defaultGPUMemory"), ("RdmaConfig", "shmSize"),
                    ("DeviceClass", "memory")}  # fmt: skip


def _example(snippet: str) -> Any:
    data = yaml.safe_load(snippet)
    return next(iter(data.values()))


def _quantity_branches(prop: dict[str, Any]) -> None:
    for branch in prop.get("anyOf", [prop]):
        if branch.get("type") == "string":
            branch["pattern"] = QUANTITY


def policy_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one policy document, as committed in ``policies/schema.json``."""
    from webhook.policy.rule_catalog import catalog

    RULES = catalog()

    raw = m.PolicyDocument.model_json_schema(by_alias=True)
    defs: dict[str, Any] = raw.pop("$defs")
    defs["PolicyDocument"] = raw
    for name, schema in defs.items():
        docs = FIELDS.get(name)
        if docs is None:  # enums: their values are the documentation
            continue
        schema.pop("title", None)
        schema["description"] = docs[""]
        for alias, prop in schema.get("properties", {}).items():
            prop.pop("title", None)
            if alias not in docs:  # a field added to the model but not to FIELDS: tests/workflow says so
                continue
            description, example = docs[alias]
            prop["description"] = description
            prop["examples"] = [_example(example)]
            if (name, alias) in _QUANTITY_FIELDS:
                _quantity_branches(prop)
    action = defs["Action"]
    defs["Action"] = {
        "description": action.get("description", ""),
        "anyOf": [
            {"type": "string", "enum": action["enum"]},
            {"const": False, "description": "an unquoted `off` as YAML 1.1 parsers read it"},
        ],
    }
    for section in ("pools", "classes", "priorityClasses"):
        defs["PolicySpec"]["properties"][section]["propertyNames"] = {"pattern": DNS_LABEL, "maxLength": 63}
    defs["PolicySpec"]["properties"]["rules"]["propertyNames"] = {"enum": sorted(RULES)}
    from webhook.policy.loader import NOT_EXCEPTABLE

    defs["PolicyException"]["properties"]["rules"]["items"] = {"enum": sorted(set(RULES) - set(NOT_EXCEPTABLE))}
    defs["PolicyException"]["properties"]["name"].update(pattern=DNS_LABEL, maxLength=63)
    for model, alias in (("Pool", "nodeSelector"), ("LabelSelector", "matchLabels")):
        defs[model]["properties"][alias]["propertyNames"] = {"pattern": LABEL_KEY}
    defs["Pool"]["properties"]["topology"]["additionalProperties"] = {"type": "string", "pattern": LABEL_KEY}
    defs["SelectorRequirement"]["properties"]["key"]["pattern"] = LABEL_KEY
    defs["MigProfile"]["properties"]["name"]["pattern"] = MIG_PROFILE
    defs["RdmaResource"]["properties"]["name"]["pattern"] = RESOURCE_NAME
    # pydantic drops a pattern behind a BeforeValidator; the editor should flag "1.3x" as the loader does.
    for branch in defs["InTreeSettings"]["properties"]["kubeVersion"]["anyOf"]:
        if branch.get("type") == "string":
            branch["pattern"] = KUBE_VERSION
    defs["GPUModel"]["properties"]["mig"]["items"] = {
        "anyOf": [
            {"$ref": "#/$defs/MigProfile"},
            {
                "type": "array",
                "description": "[profile name, max instances] or [profile name, max instances, usable memory]",
                "prefixItems": [
                    {"type": "string", "pattern": MIG_PROFILE},
                    {"type": "integer", "minimum": 1, "maximum": 8},
                    {"type": ["string", "integer"]},
                ],
                "items": False,
                "minItems": 2,
            },
        ]
    }
    document = defs.pop("PolicyDocument")
    head = {"$schema": SCHEMA_DIALECT, "title": "GPUPolicy", "description": document.pop("description")}
    document.pop("title", None)
    return {**head, **document, "$defs": dict(sorted(defs.items()))}


def render_schema() -> str:
    """The committed text: stable key order, two-space indent, trailing newline (diff-friendly)."""
    return json.dumps(policy_schema(), indent=2, ensure_ascii=False) + "\n"


def suite_schema() -> dict[str, Any]:
    """JSON Schema of a ``PolicyTest`` suite (``policy schema --kind PolicyTest``), for editors."""
    from webhook.policy.suite import Suite

    raw = Suite.model_json_schema(by_alias=True)
    return {"$schema": SCHEMA_DIALECT, "title": "PolicyTest", **{k: v for k, v in raw.items() if k != "title"}}


# --- field reference (docs/policy.md) ---------------------------------------------------------------


def _type_of(prop: dict[str, Any]) -> str:
    if "$ref" in prop:
        return _ref_name(prop["$ref"])
    if "const" in prop:
        return f"`{prop['const']}`"
    if "enum" in prop:
        return " \\| ".join(f"`{v}`" for v in prop["enum"])
    if "anyOf" in prop:
        branches = [p for p in prop["anyOf"] if p.get("type") != "null"]
        if any(p.get("pattern") == QUANTITY for p in branches):
            return "quantity (`4Gi`, `4096Mi`, `20G`)"
        return " or ".join(dict.fromkeys(_type_of(p) for p in branches))
    kind = prop.get("type")
    if kind == "array" and "prefixItems" in prop:
        return "`[name, max]` pair"
    if kind == "array":
        return f"list of {_type_of(prop.get('items', {}))}"
    if kind == "object":
        return f"map {_key_of(prop.get('propertyNames', {}))} → {_value_of(prop.get('additionalProperties'))}"
    if kind == "string" and prop.get("pattern") == LABEL_KEY:
        return "label key"
    return str(kind or "any")


def _key_of(keys: dict[str, Any]) -> str:
    if "enum" in keys:
        return "rule id" if len(keys["enum"]) > 4 else _type_of(keys)
    if "$ref" in keys:
        return _type_of(keys)
    return {LABEL_KEY: "label key", DNS_LABEL: "name (DNS label)"}.get(keys.get("pattern", ""), "name")


def _value_of(value: Any) -> str:
    return _type_of(value) if isinstance(value, dict) else "value"


def _ref_name(ref: str) -> str:
    name = ref.rsplit("/", 1)[-1]
    enum = m.__dict__.get(name)
    if enum is not None and isinstance(enum, type) and issubclass(enum, str) and hasattr(enum, "__members__"):
        return " \\| ".join(f"`{v.value}`" for v in enum.__members__.values())
    if name == "Action":
        return "`deny` \\| `warn` \\| `audit` \\| `off`"
    return f"[{name}](#{name.lower()})"


def _default_of(prop: dict[str, Any], required: bool) -> str:
    if required:
        return "**required**"
    if "default" not in prop:
        return "—"
    value = prop["default"]
    if value in (None, "", [], {}):
        return "—" if value is None else f"`{json.dumps(value)}`"
    if isinstance(value, dict):
        return "its defaults"
    return f"`{value if isinstance(value, str) else json.dumps(value)}`"


def field_reference() -> str:
    """Markdown tables of every field of every model, in document order (embedded in docs/policy.md)."""
    schema = policy_schema()
    defs = copy.deepcopy(schema["$defs"])
    defs["PolicyDocument"] = {k: v for k, v in schema.items() if k != "$defs"}
    out: list[str] = []
    for name, where in ORDER:
        model = defs[name]
        required = set(model.get("required", ()))
        out.append(f"### {name}")
        out.append("")
        out.append(f"`{where}` — {model['description']}")
        out.append("")
        out.append("| field | type | default | description | example |")
        out.append("|---|---|---|---|---|")
        for alias, prop in model["properties"].items():
            example = FIELDS[name].get(alias, ("", "(undocumented)"))[1].replace("|", "\\|")
            out.append(
                f"| `{alias}` | {_type_of(prop)} | {_default_of(prop, alias in required)} | "
                f"{prop.get('description', '').replace('|', chr(92) + '|')} | `{example}` |"
            )
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def rule_catalogue() -> str:
    """Markdown table of every rule id, its default action and what it catches (from the rule catalogue)."""
    from webhook.policy.rule_catalog import catalog

    RULES = catalog()

    lines = ["| rule id | default | catches |", "|---|---|---|"]
    for rule in sorted(RULES.values(), key=lambda r: r.id):
        lines.append(f"| `{rule.id}` | {rule.default.value} | {rule.catches.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


# --- docs/policy.md: regenerate the generated blocks in place -----------------------------------------

GENERATED = {"field-reference": field_reference, "rule-catalogue": rule_catalogue}


def _block(name: str) -> tuple[str, str]:
    return (
        f"<!-- BEGIN GENERATED {name}: do not edit; gpu-admission policy schema --update-docs -->\n",
        f"<!-- END GENERATED {name} -->",
    )


def render_doc(text: str) -> str:
    """``text`` with every generated block (field tables, rule catalogue) replaced by its current content."""
    for name, render in GENERATED.items():
        begin, end = _block(name)
        start = text.find(begin)
        stop = text.find(end, start)
        if start < 0 or stop < 0:
            raise ValueError(f"the document has no generated block {name!r} ({begin.strip()} … {end})")
        text = text[: start + len(begin)] + "\n" + render() + "\n" + text[stop:]
    return text

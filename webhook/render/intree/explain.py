"""Rule by rule: what holds while the webhook is down, partly, or not at all, and why.

The table is data (:data:`WHY`): for every rule of the engine's registry, what its in-tree part
covers or why it has none. ``policy render --explain`` prints it for a policy (with each rule's
action there and the checks actually rendered), and ``docs/policy.md`` carries the same table; a test
keeps both complete. It then lists the policy's exceptions (:func:`exceptions`): the in-tree policies
do not honour them (an exception is judged by the requester and a signed grant, which CEL cannot
verify), so while the webhook is down an excepted finding is enforced with its rule's action.
"""

from __future__ import annotations

from dataclasses import dataclass

from webhook.engine.rules.registry import RULES
from webhook.policy.compiled import Policy
from webhook.render.intree.cel import rule_actions
from webhook.render.intree.checks import Check, all_checks

HOLDS, PARTLY, NO = "holds", "partly", "webhook only"

# rule -> (in-tree part, what only the webhook judges and why)
WHY: dict[str, tuple[str, str]] = {
    "placement-missing": (
        "a class pod (Job, Volcano Job, mutated kind) created unplaced for every pool its class may resolve to: "
        "a pool label missing from its nodeSelector, a pool toleration missing, or (device-plugin pools) no GPU "
        'resource in any container\'s limits: denied "webhook unavailable, retry"',
        "the exact device resources and profile (they need the resolution), DRA claims; classes with a pool that "
        "sets no labels",
    ),
    "class-not-allowed": (
        "a template's class that the namespace's entitlement (first matching namespace rule) does not grant",
        "a pool annotation outside the class or entitlement; a namespace the webhook does not know yet",
    ),
    "pool-spoofing": (
        "a nodeSelector carrying a non-entitled pool's labels; a toleration spelled as only non-entitled pools' "
        "own; a raw GPU request (no class, or the opt-out label) that tolerates a non-entitled pool's taints (a "
        "blanket Exists included) with a nodeSelector that does not exclude it",
        "node affinity (every operator, matchFields), nodeName, Gt/Lt tolerations, DRA claims and GPU fractions, "
        "node-by-node judgement from Node objects: the full scheduler model costs more CEL than the budget allows",
    ),
    "privileged-gpu": (
        "in a pod holding device-plugin GPUs or declaring a class: privileged, SYS_ADMIN/ALL, a hostPath at or "
        "under /dev, NVIDIA_VISIBLE_DEVICES/NVIDIA_DRIVER_CAPABILITIES set to a literal other than none/void; "
        "a Pod UPDATE (tolerations, or a gated pod's nodeSelector) that makes a pod which reached no GPU pool "
        "reach a non-entitled one with a container not voiding its devices (re-create the pod)",
        "pods that only reach a pool of sliced cards (reachability), envFrom and valueFrom, paths with '..', a "
        "capability longer than 64 characters, DRA adminAccess (needs the claim template)",
    ),
    "node-name-set": (
        "spec.nodeName on a template that declares a class or holds a GPU resource (on UPDATE only when newly set)",
        "pods holding GPUs only through DRA claims or GPU fractions",
    ),
    "scheduling-not-allowed": (
        "a priorityClassName the template's class does not allow; system-*-critical on a GPU pod; a schedulerName "
        "no class, gang backend or kind of the policy names",
        "raw requests' entitlement lists, a class that requires its own scheduler, the object-level fields of "
        "operator kinds",
    ),
    "gpu-count-exceeded": (
        "whole GPUs and MIG devices in limits above the class's maxGPUs, as Kubernetes accounts them: regular "
        "containers and native sidecars together, each ordinary init container alone (Pods, Jobs, mutated kinds, "
        "as stored)",
        "the pool's GPUs per node, sidecars declared before an init container, DRA claims, shared slices, "
        "controllers' templates (judged after the mutation rewrites them)",
    ),
    "intent-invalid": (
        "an unknown class; gpus, gang-size, isolation, rdma, topology, pool or gpu-model values that no reading "
        "makes valid",
        "gpu-memory quantities, keys on a workload's own metadata, typos of keys, container names, values valid "
        "alone but not for the class",
    ),
    "gang-required": (
        "a batch Job (a mutated kind with one template at a literal path and literal pod-count fields) of a "
        "gang-required class stored with more than one pod (parallelism capped by completions) and no gang: a "
        "class without a backend, a backend with no integration for the kind, or a missing key the backend reads "
        "and the webhook writes (a size, a literal, a needed gang name, Kueue's queue)",
        "Volcano Jobs, operator kinds and TrainJobs (wildcard or virtual templates), bare pods' gang-size, "
        "controllers (judged as their pods will be), scheduler names; on UPDATE a Job already of the class",
    ),
    "gang-incomplete": (
        "a Volcano Job task of an all-or-nothing class whose minAvailable is below its replicas",
        "the Job-level minAvailable (dependsOn waves), gang-size against the pods a kind creates, the gang keys of "
        "the other kinds and backends (kind table)",
    ),
    "gang-unschedulable": ("", "pool capacity against the gang, backends' partial admission: cross-object facts"),
    "claim-unresolved": ("", "needs the ResourceClaimTemplates, ResourceClaims and DeviceClasses: other objects"),
    "intent-unknown-key": ("", "a warning with a did-you-mean; not rendered: the webhook's warning is enough"),
    "device-taint-tolerated": ("", "claim templates and the entitlement's allowed device taints: other objects"),
    "scheduler-claim-forged": ("", "judged on ResourceClaims by the webhook only; not rendered yet"),
    "claim-capacity-unsatisfiable": ("", "needs the devices' ResourceSlices: other objects"),
    "compute-domain-invalid": ("", "needs the ComputeDomains and the gang's other pods: other objects"),
    "compute-domain-num-nodes": ("", "needs the ComputeDomain object: another object"),
    "extended-resource": (
        "",
        "quantity arithmetic over every GPU/RDMA resource (CEL quantity library); not rendered yet",
    ),
    "mig-profile-unavailable": ("", "the resolved pool's MIG catalogue: needs the resolution"),
    "gpu-kind-mixed": ("", "device families per pool stack: needs the resolution"),
    "gpu-memory-exceeded": ("", "memory of the resolved profile or card and of claims: needs the resolution"),
    "whole-gpu-waste": ("", "a warning about the resolved card's memory: needs the resolution"),
    "raw-gpu-request": ("", "a warning only; the in-tree pool-spoofing part judges what raw requests can reach"),
    "inference-not-guaranteed": ("", "a warning about QoS after the mutation adds resources"),
    "rdma-unavailable": ("", "the resolved pool's RDMA: needs the resolution"),
    "unknown-field": ("", "the kind's schema as the engine reads it"),
    "malformed-object": ("", "shape errors the apiserver's own validation mostly rejects first"),
    "workload-invalid": ("", "each gang backend's own checks of its keys; not rendered yet"),
}


@dataclass(frozen=True)
class Row:
    rule: str
    status: str
    actions: str
    part: str
    rest: str


def _renders(policy: Policy, check: Check) -> bool:
    if check.over == "object":
        return any(check.test(policy, "object", cls) is not None for cls in policy.classes)  # type: ignore[call-arg]
    return check.test(policy, "t") is not None


def rows(policy: Policy | None = None) -> list[Row]:
    checks = all_checks()
    out = []
    for rule_id in sorted(RULES):
        part, rest = WHY.get(rule_id, ("", "not described"))
        has = [c for c in checks if c.rule == rule_id]
        status = PARTLY if has else NO
        actions = (
            ", ".join(sorted(rule_actions(policy, rule_id))) if policy is not None else RULES[rule_id].default.value
        )
        if policy is not None and policy.settings.enforcement != "enforce":
            actions = actions.replace("deny", f"deny (enforcement {policy.settings.enforcement}: would deny)")
        if policy is not None and has and not any(_renders(policy, c) for c in has):
            status, rest = NO, f"nothing to render for this policy; {rest}"
        if policy is not None and actions == "off":
            status = "off"
        out.append(Row(rule_id, status, actions, part or "-", rest))
    return out


def enforcement(policy: Policy) -> str:
    """The policy-wide mode for ``--explain``: what a deny does, in the webhook and in-tree, and what is
    placed; read before the table, since it changes every row whose action is deny."""
    mode = policy.settings.enforcement
    if mode == "enforce":
        lines = ["enforcement: enforce (settings.enforcement): a rule's deny is a denial, in the webhook and in-tree"]
    else:
        binding = "Warn, Audit" if mode == "warn" else "Audit"
        shown = "an admission warning and an audit annotation" if mode == "warn" else "an audit annotation only"
        lines = [
            f"enforcement: {mode} (settings.enforcement): nothing is denied; every finding a rule would deny is "
            f"admitted with {shown}, marked 'would deny', counted in gpu_admission_would_deny_total; the in-tree "
            f"deny policy binds [{binding}] and the validating webhook fails open (Ignore); the namespace label "
            "guard still denies"
        ]
    if policy.settings.mutation == "off":
        lines.append(
            "mutation: off (settings.mutation): /mutate returns no patch; neither the mutating webhook nor "
            "MutatingAdmissionPolicies are rendered"
            + (
                "; an unplaced class pod is denied (placement-missing)"
                if mode == "enforce"
                else "; a CREATE is judged as the patch would have left it (no placement-missing in-tree either)"
            )
        )
    else:
        lines.append("mutation: apply (settings.mutation): /mutate places class pods and raw requests")
    return "\n".join(lines) + "\n"


NOT_HONOURED = (
    "the in-tree policies do not honour exceptions (CEL can verify neither the requester of a controller's pods "
    "nor a grant's signature); since they run while the webhook is up too, a rule an exception names is off "
    "in-tree in the exception's namespaces, for everyone there, and only the webhook judges it"
)


def exceptions(policy: Policy) -> str:
    """The policy's exceptions for ``--explain``: rules, namespaces, kinds and names, subjects, expiry,
    owner, reason; and which of their rules the in-tree policies enforce regardless (they do not honour
    exceptions)."""
    if not policy.spec.exceptions:
        return "exceptions: none\n"
    from webhook.lint.checks import describe

    rendered = {r.rule for r in rows(policy) if r.status == PARTLY}
    out = [f"exceptions ({len(policy.spec.exceptions)}; {NOT_HONOURED}):"]
    for exc in policy.spec.exceptions:
        out.append(f"{exc.name} [expires {exc.expires.isoformat()}; owner {exc.owner}]")
        out.append(f"  rules: {', '.join(exc.rules)}")
        out.append(f"  namespaces: {describe(exc.namespaces) or 'every namespace'}")
        if exc.kinds:
            out.append(f"  kinds: {', '.join(exc.kinds)}")
        if exc.names:
            out.append(f"  names: {', '.join(exc.names)}")
        out.append(f"  subjects: {', '.join(s.ref for s in exc.subjects)}")
        out.append(f"  reason: {exc.reason}")
        off = sorted(set(exc.rules) & rendered)
        out.append(
            "  in-tree: "
            + (
                f"{', '.join(off)} not enforced in these namespaces (for anyone) while the webhook is down"
                if off
                else "none of its rules has an in-tree part"
            )
        )
    return "\n".join(out) + "\n"


def table(policy: Policy | None = None, *, markdown: bool = False) -> str:
    data = rows(policy)
    if markdown:
        lines = [
            "| rule | while the webhook is down | what the in-tree policies hold | what needs the webhook, and why |",
            "|---|---|---|---|",
        ]
        lines += [f"| `{r.rule}` | {r.status} | {r.part} | {r.rest} |" for r in data]
        return "\n".join(lines) + "\n"
    out = []
    for r in data:
        out.append(f"{r.rule} [{r.status}; action {r.actions}]")
        if r.part != "-":
            out.append(f"  holds in-tree: {r.part}")
        out.append(f"  needs the webhook: {r.rest}")
    return "\n".join(out) + "\n"

"""The engine's entries: (policy, :class:`~webhook.engine.model.request.Request`) -> Decision. Pure: no
I/O, no globals.

One entry per question, as controller-runtime keeps its Defaulter and Validator apart: ``mutate`` (the
patch, for ``/mutate``), ``validate`` (the verdict, for ``/validate``), ``report`` (verdict, patch, waste
and placements, for ``check``, ``audit`` and ``policy test``) and ``explain`` (``report`` with the
step-by-step trace). Admission, ``check``, ``audit``, ``policy test``, the in-tree render and the
benchmarks all call them; nothing else decides.

Order of work:
1. find the pod templates of the object and read each one's intent (or adopt a raw request);
2. resolve class -> pool -> backend names, recording why pools were skipped;
3. build the mutation as explicit JSON Patch operations (CREATE of Pods/Jobs/Volcano Jobs; for
   controllers the same mutation is built in memory only, since their pods will be mutated);
4. run every rule on the object *as it will be* and let the policy decide each finding's action;
5. on UPDATE, drop what was already true of the old object: a rule reports what the update
   introduces or worsens (a bound pod's own nodeName is not news), once, here, for every rule; except
   when the UPDATE removes a pod's last scheduling gate, which makes the pod schedulable: judged whole.

"As it will be": a CREATE after our mutation (offline) or as the apiserver stores it (``/validate``);
an UPDATE of a mutated kind exactly as stored, since nothing re-mutates it (a suspended Job's edited
template is judged without the pool our mutation would have put back); a controller as its pods
will be after mutation, at CREATE and UPDATE alike.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import date
from typing import Any

from webhook.actions import Enforcement
from webhook.engine import claim_object, mutations, unknown_namespace
from webhook.engine.deadline import check as past_deadline
from webhook.engine.intent_keys import unknown_keys
from webhook.engine.model import exceptions as excepting
from webhook.engine.model import gang as gang_model
from webhook.engine.model import node_truth
from webhook.engine.model.claims import ClaimResolver
from webhook.engine.model.cluster import Cluster
from webhook.engine.model.context import Context, Finding, TemplateState
from webhook.engine.model.decision import WOULD_DENY, Action, Decision, Placement, Violation, WasteReport
from webhook.engine.model.device_reach import exposed_pools, may_reach_a_pool
from webhook.engine.model.devices import HAMI, MIG, SHARED, WHOLE
from webhook.engine.model.intent import OPT_OUT, Intent, read_class, read_intent
from webhook.engine.model.pod_content import content_digest
from webhook.engine.model.pool_stack import families_on
from webhook.engine.model.request import Request, Stage
from webhook.engine.model.resolution import Failure, Resolution, resolve
from webhook.engine.model.scheduling import ungates
from webhook.engine.model.workload import Template, classify, dotted, projected, templates
from webhook.engine.model.written_count import with_written_count
from webhook.engine.patch import PatchBuilder
from webhook.engine.rules import RULES, effective_action, violation
from webhook.engine.rules.registry import POD, Rule
from webhook.engine.rules.registry import facts as rule_facts
from webhook.engine.shape import shape_errors
from webhook.policy.compiled import Policy
from webhook.policy.kinds import CompiledKind
from webhook.policy.model import Isolation
from webhook.quantity import format_bytes

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


@dataclass(frozen=True, slots=True)
class _Plan:
    """What an entry computes; internal, so that no caller picks a combination of modes."""

    verdict: bool  # run the rules (``/mutate`` needs only the patch: the apiserver asks /validate next)
    details: bool  # waste and placements, the reports ``check`` and ``policy test`` print
    trace: bool  # the step-by-step explanation (it costs like a rule)


_MUTATE = _Plan(verdict=False, details=False, trace=False)
_VALIDATE = _Plan(verdict=True, details=False, trace=False)
_REPORT = _Plan(verdict=True, details=True, trace=False)
_EXPLAIN = _Plan(verdict=True, details=True, trace=True)


def mutate(policy: Policy, request: Request) -> Decision:
    """The patch for ``/mutate``: the JSON Patch of a CREATE of a kind the webhook mutates (and, with
    grant keys, the grants of pod templates); no verdict, since the apiserver asks ``/validate`` about
    the final object next."""
    return _decide(policy, request, _MUTATE)


def validate(policy: Policy, request: Request) -> Decision:
    """The verdict for ``/validate`` (and for the in-tree render's probes): every rule, nothing else."""
    return _decide(policy, request, _VALIDATE)


def report(policy: Policy, request: Request) -> Decision:
    """The verdict, the patch and what ``check``, ``audit`` and ``policy test`` print besides: the
    waste report and the pools each template can land on."""
    return _decide(policy, request, _REPORT)


def explain(policy: Policy, request: Request) -> Decision:
    """``report`` with the step-by-step explanation (``check --explain``, ``policy test``)."""
    return _decide(policy, request, _EXPLAIN)


def _decide(policy: Policy, request: Request, plan: _Plan) -> Decision:
    """Decide one object. A ResourceClaim or ResourceClaimTemplate is judged on its own
    (:mod:`webhook.engine.claim_object`); an UPDATE's old object is judged the same way and every
    violation already true of it (same rule, path and message) is left out, so an update is held to
    account for what it introduces or worsens, not for what the stored object already was."""
    # one unpacking (every review pays for this line), in the order of Request's fields
    (
        obj, operation, namespace, namespace_labels, old_object, stage,
        cluster, deadline, requester, today, grant_keys,
    ) = request  # fmt: skip
    as_received = stage is Stage.STORED
    unmutated = policy.settings.mutation == "off"  # nothing places the object: no entry returns a patch
    if unmutated and operation == "CREATE":
        # under enforce the object is judged as it will be stored, unplaced (placement-missing, as the
        # cluster will see it, offline too); an observe mode judges it as our patch would have left it,
        # so its records say what enforce would deny with mutation on, not "unplaced" for every class pod
        as_received = policy.settings.enforcement is Enforcement.ENFORCE
    validate, details, explain = plan.verdict, plan.details, plan.trace
    # a pod whose last scheduling gate goes is judged whole: its gated old object excuses nothing
    ungated = operation == "UPDATE" and ungates(obj, old_object)
    if claim_object.is_claim_object(obj):
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        claim_ns = str(namespace or meta.get("namespace") or "default")
        claim_labels = dict(namespace_labels) if namespace_labels is not None else {}
        claim_labels.setdefault(NAMESPACE_NAME_LABEL, claim_ns)
        return claim_object.decide(
            policy,
            obj,
            operation=operation,
            namespace=claim_ns,
            namespace_labels=claim_labels,
            old_object=old_object,
            requester=requester,
            cluster=cluster,
            trace=[] if explain else None,
        )
    kind = classify(obj, policy)
    meta = obj.get("metadata") if isinstance(obj, dict) and isinstance(obj.get("metadata"), dict) else {}
    name = str(meta.get("name") or meta.get("generateName") or "")
    display_kind = obj.get("kind", "?") if isinstance(obj, dict) else "?"
    if kind is None:
        return Decision(kind=str(display_kind), name=name, operation=operation, relevant=False)
    ns = namespace or meta.get("namespace") or "default"
    labels = dict(namespace_labels) if namespace_labels is not None else {}
    labels.setdefault(NAMESPACE_NAME_LABEL, ns)
    trace: list[str] | None = [] if explain else None

    malformed = shape_errors(obj, kind)
    if malformed:
        if not _mentions_gpu(policy, obj):
            return Decision(kind=str(display_kind), name=name, operation=operation, relevant=False)
        action = effective_action(policy, "malformed-object", labels, None)
        violations = (
            ()
            if action is Action.OFF
            else tuple(violation(policy, "malformed-object", action, path, message) for path, message in malformed)
        )
        return Decision(
            kind=str(display_kind),
            name=name,
            operation=operation,
            violations=violations,
            explanation=tuple(f"malformed: {m}" for _, m in malformed) if explain else (),
            mutated=obj,
            # judged by its namespace's labels (the rule's per-namespace action): look it up if it can be
            namespace_unknown=bool(cluster.unknown_namespaces) and ns in cluster.unknown_namespaces,
        )

    past_deadline(deadline, "shape check")
    states = _read_templates(policy, obj, kind, ClaimResolver(policy, cluster, str(ns)))
    past_deadline(deadline, "reading templates")
    stranded = () if kind.mutate else _stranded_intent(policy, meta, kind, states)
    device_only = False  # a CPU-only object that can reach a GPU pool: only its containers' device env is ours
    stranded += unknown_keys(policy, obj, states)  # a typo'd or misplaced key: judged, never skipped
    for s in states:  # relevant when a template declares intent or asks for GPUs
        if s.intent is not None or s.resources.has_gpu:
            break
    else:
        if (
            not stranded
            and (states or not _labelled(policy, meta))  # a labelled workload with no template is judged
            and not _reaches_sliced_devices(policy, states, cluster)
        ):
            if not _reaches_gpu_pools(policy, states, cluster):
                return Decision(kind=str(display_kind), name=name, operation=operation, relevant=False)
            device_only = True
    if cluster.unknown_namespaces and ns in cluster.unknown_namespaces:  # never the catch-all entitlement
        return unknown_namespace.decide(
            policy,
            obj,
            kind=str(display_kind),
            name=name,
            operation=operation,
            namespace=str(ns),
            states=states,
            validate=validate,
            explain=explain,
        )

    entitled = policy.entitlement_index(labels)
    ctx = Context(
        policy=policy,
        obj=obj,
        kind=kind.name,
        workload=kind,
        operation=operation,
        namespace=str(ns),
        namespace_labels=labels,
        entitlement=None if entitled is None else policy.namespaces[entitled],
        entitlement_key=entitled,
        old_object=old_object,
        states=states,
        trace=trace,
        cluster=cluster,
        requester=requester,
    )
    if trace is not None:
        ent = ctx.entitlement
        trace.append(
            f"namespace {ns}: "
            + (
                f"entitlement {ent.name or '(unnamed)'} -> classes {', '.join(ent.classes)}"
                if ent
                else "no entitlement"
            )
        )
    ctx.findings.extend(stranded)
    _resolve_all(ctx)
    ctx.resolved()
    for state in states:  # where privileged-gpu is off (the GPU operator's agents), no device env either
        state.device_env = effective_action(policy, "privileged-gpu", labels, state.class_name) is not Action.OFF
    past_deadline(deadline, "resolution")
    ctx.gang = None if device_only else gang_model.derive(ctx)
    if trace is not None and ctx.gang is not None:
        g = ctx.gang
        trace.append(f"gang: backend {g.backend.value}, {g.size} pod(s)" + (f", name {g.name}" if g.name else ""))

    view = None
    if policy.spec.exceptions and today is not None:
        view = _object_view(obj, str(display_kind), str(ns), meta, states, kind.root_template)
    patch = PatchBuilder(obj)
    if device_only:
        if not (kind.mutate and (operation == "UPDATE" or as_received)):
            mutations.device_env_only(ctx, patch)
        ctx.stored = as_received and operation == "CREATE"
    elif kind.mutate and (operation == "UPDATE" or (as_received and operation == "CREATE")):
        ctx.stored = as_received and operation == "CREATE"  # placement-missing: /validate of a CREATE
        mutations.check(ctx)  # judged as stored: see the docstring
    else:
        mutations.mutate(ctx, patch)
    ctx.env_fixed = operation == "UPDATE" and kind.root_template
    ctx.mutated = patch.doc
    past_deadline(deadline, "mutation")
    if view is not None:
        view = _with_contents(view, patch.doc, states, operation, old_object)
    emits_patch = operation == "CREATE" and kind.mutate and not unmutated
    grant_ops: tuple[dict[str, Any], ...] = ()
    if view is not None and grant_keys is not None and not validate and not view.is_pod and not unmutated:
        grant_ops = _grant_ops(ctx, view, patch if emits_patch else PatchBuilder(obj), requester, today, grant_keys)
    violations: tuple[Violation, ...] = ()
    if validate:
        if view is not None:
            ctx.excepted = excepting.holding(
                policy,
                view,
                labels,
                requester=requester,
                today=today,
                keys=grant_keys,
                judged_as_stored=as_received,
            )
            if trace is not None:
                trace.extend(ctx.excepted.trace)
        for state in states:
            if not patch.ops:  # nothing changed (every /validate of an object we mutated): same view
                state.after_tpl, state.after = state.tpl, state.resources
                continue
            state.after_tpl = _template_at(patch.doc, state.tpl)
            state.after = state.inspect(state.after_tpl)
        violations = _run_rules(ctx, deadline, only=DEVICE_ONLY_RULES if device_only else None)
        if violations and operation == "UPDATE" and isinstance(old_object, dict) and not ungated:
            before = _decide(
                policy,
                request._replace(obj=old_object, old_object=None, operation="UPDATE", namespace=str(ns)),
                _VALIDATE,
            )
            kept = before.violations
            if view is not None and view.content_changed:  # what the old pod held through a grant is not kept
                regranted = excepting.granted_rules(policy, old_object, labels, today=today, keys=grant_keys)
                kept = tuple(v for v in kept if v.rule not in regranted)
            violations = _introduced(violations, kept, trace)
    if trace is not None:
        trace.append(
            f"patch: {len(patch.ops)} operation(s)"
            + (
                ""
                if emits_patch
                else " (not returned: the policy's settings.mutation is off)"
                if unmutated and operation == "CREATE" and kind.mutate
                else f" (not returned: {operation} of {display_kind} is validated only)"
            )
        )
    return Decision(
        kind=str(display_kind),
        name=name,
        operation=operation,
        patch=tuple(patch.ops) if emits_patch else grant_ops,
        violations=violations,
        explanation=tuple(trace or ()),
        mutated=patch.doc if emits_patch else obj,
        relevant=True,
        waste=_waste(ctx) if details else None,
        placements=_placements(states) if details else (),
        carried_grants=ctx.excepted.carried,
    )


def _labelled(policy: Policy, meta: dict[str, Any]) -> bool:
    """The object's own metadata carries the workload label (a Volcano Job with ``tasks: []`` has no
    template to read it from, and is still a workload the user opted in: workload-invalid says why
    it will not run, rather than ``check`` skipping it)."""
    labels = meta.get("labels")
    return isinstance(labels, dict) and policy.keys.workload in labels


def _introduced(
    now: tuple[Violation, ...], before: tuple[Violation, ...], trace: list[str] | None
) -> tuple[Violation, ...]:
    """The violations of an UPDATE that were not already violations of the old object.

    Keyed by rule, field path and message: a finding that got worse says so in its message (a
    larger count, another pool) and stays; one that is word for word what the stored object already
    had is not the update's doing. Done once here rather than in each rule, so a new rule gets it."""
    if not before:
        return now
    known = {(v.rule, v.path, v.message, v.exception) for v in before}  # excepted before is not excepted now
    kept = tuple(v for v in now if (v.rule, v.path, v.message, v.exception) not in known)
    if trace is not None and len(kept) != len(now):
        trace.append(f"update: {len(now) - len(kept)} violation(s) already true of oldObject, not reported")
    return kept


def _placements(states: list[TemplateState]) -> tuple[Placement, ...]:
    return tuple(
        Placement(
            template=s.tpl.dotted(),
            class_name=s.resolution.cls_name,
            pool=s.resolution.pool.name,
            isolation=s.resolution.isolation.value,
            resources=dict(s.resolution.resources),
            device=s.resolution.device_name,
            adopted_from=s.intent.adopted_from if s.intent is not None else None,
        )
        for s in states
        if s.resolution is not None
    )


def _reaches_sliced_devices(policy: Policy, states: list[TemplateState], cluster: Cluster) -> bool:
    """A CPU-only template is GPU-relevant when a container has a way past the device grant and the
    template can be scheduled onto a pool of shared or sliced cards (``privileged-gpu``; what
    ``privilegedGPUPools`` covers). Templates without a trigger never pay for the reach computation."""
    for s in states:
        if s.trigger:
            exposed = exposed_pools(policy)
            if exposed and s.received_reach(cluster) & exposed:
                return True
    return False


def _reaches_gpu_pools(policy: Policy, states: list[TemplateState], cluster: Cluster) -> bool:
    """Any other CPU-only template that can be scheduled onto a GPU pool is judged for its device
    environment only (``device_only``): its containers get ``NVIDIA_VISIBLE_DEVICES=void`` (the image's
    own value would open the node's GPUs), and ``privileged-gpu`` judges a value written there. No
    other rule is about a pod without GPUs. Templates that tolerate no taint, name no node and have
    no trigger never pay for the reach computation (``may_reach_a_pool``)."""
    for s in states:  # noqa: SIM110 (a loop: no generator on every review)
        if (s.trigger or may_reach_a_pool(policy, s.tpl.spec)) and s.received_reach(cluster):
            return True
    return False


def _mentions_gpu(policy: Policy, obj: Any) -> bool:
    """Tolerant relevance test for objects too malformed to read: any intent key or GPU resource name."""
    stack = [obj]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if isinstance(key, str) and (
                    key == policy.keys.workload or key == "resourceClaims" or policy.is_gpu_resource(key)
                ):
                    return True
                stack.append(value)
        elif isinstance(node, list):
            stack.extend(node)
    return False


_NO_METADATA: dict[str, Any] = {"metadata": {}}


def _read_templates(
    policy: Policy, obj: dict[str, Any], kind: CompiledKind, claims: ClaimResolver
) -> list[TemplateState]:
    # the object's own metadata is a fallback only where the webhook mutates the object: other
    # controllers copy nothing but the template to their pods (see _stranded_intent)
    source = obj if kind.mutate else _NO_METADATA
    out: list[TemplateState] = []
    for tpl in templates(obj, kind):
        state = TemplateState(
            tpl=tpl, intent=None, policy=policy, targeted_pools=_targeted_pools(policy, tpl), claims=claims
        )
        found = read_class(policy, source, tpl)
        if found is not None and found[0] != OPT_OUT:
            state.intent = read_intent(policy, source, tpl, found[0], found[1])
        elif found is None and state.resources.has_gpu:
            state.intent = _adopt(policy, obj, tpl, state.resources, state.targeted_pools)
        out.append(state)
    return out


def _stranded_intent(
    policy: Policy, meta: dict[str, Any], kind: CompiledKind, states: list[TemplateState]
) -> tuple[Finding, ...]:
    """Intent keys on the own metadata of a kind that is only validated: its controller copies only
    the template to the pods, so the key would silently do nothing. Each is an ``intent-invalid``
    finding that names where to move it."""
    keys = policy.keys
    found: list[Finding] = []
    where = states[0].tpl.dotted("metadata") if states else "the pod template's metadata"
    for section, wanted in (("labels", (keys.workload,)), ("annotations", sorted(keys.annotations))):
        values = meta.get(section)
        if not isinstance(values, dict):
            continue
        for key in wanted:
            if key in values and not all(
                isinstance(s.tpl.metadata.get(section), dict) and key in s.tpl.metadata[section] for s in states
            ):
                found.append(
                    Finding(
                        "intent-invalid",
                        dotted(("metadata", section, key)),
                        f"{key} on the {kind.name}'s own metadata never reaches its pods (the controller "
                        f"copies only the pod template); move it to {where}.{section}",
                        None,
                    )
                )
    return tuple(found)


def _targeted_pools(policy: Policy, tpl: Template) -> tuple[str, ...]:
    selector = tpl.spec.get("nodeSelector")
    if not isinstance(selector, dict) or not selector:
        return ()
    return policy.recall(  # a function of the policy and the selector
        ("targeted", tuple(selector.items())),
        lambda: tuple(
            name
            for name, pool in policy.pools.items()
            if pool.spec.node_selector and all(selector.get(k) == v for k, v in pool.spec.node_selector.items())
        ),
    )


def _adopt(
    policy: Policy, obj: dict[str, Any], tpl: Template, resources: Any, targeted: tuple[str, ...]
) -> Intent | None:
    """A raw GPU request whose nodeSelector selects a pool with ``adoptAs`` joins that class as written."""
    for name in targeted:
        pool = policy.pools[name]
        if pool.spec.adopt_as is None:
            continue
        families = families_on(pool, resources.gpu_families)  # nvidia.com/gpu on a HAMi pool is a slice
        isolation = (
            Isolation.MIG
            if MIG in families
            else Isolation.SHARED
            if families & {SHARED, HAMI}
            else (Isolation.EXCLUSIVE)
        )
        intent = Intent(
            class_name=pool.spec.adopt_as,
            class_path=tpl.dotted("spec", "nodeSelector"),
            adopted_from=name,
            gpus=max(1, resources.effective_devices()) if WHOLE in families else 1,
            isolation=isolation,
            pool=name,
        )
        return intent
    return None


def _resolve_all(ctx: Context) -> None:
    policy = ctx.policy
    for state in ctx.states:
        intent = state.intent
        if intent is None:
            continue
        # the GPU count the object already writes is its intent (judged, never silently rewritten)
        intent = state.intent = with_written_count(policy, state.tpl, state.resources, intent, ctx.entitlement)
        for path, message in intent.errors:
            ctx.findings.append(Finding("intent-invalid", path, message, intent.class_name))
        if ctx.trace is None:  # the explanation is built only when asked for (it costs like a rule)
            pass
        elif intent.adopted_from is not None:
            ctx.explain(
                f"{_where(state)}: raw request adopted as class {intent.class_name} "
                f"(nodeSelector selects pool {intent.adopted_from}, adoptAs: {intent.class_name})"
            )
        else:
            ctx.explain(f"{_where(state)}: class {intent.class_name} ({intent.class_path})")
        selector = state.tpl.spec.get("nodeSelector")
        result = _resolve(policy, intent, ctx, selector if isinstance(selector, dict) else {})
        if isinstance(result, Resolution) and (ctx.cluster.nodes or ctx.cluster.pool_mig is not None):
            # the nodes are the truth: a profile none of them advertises would stay Pending
            result = node_truth.on_nodes(
                ctx.cluster, result, intent.path_of(policy.keys.gpu_memory, intent.class_path)
            )
            if isinstance(result, Resolution) and ctx.trace is not None and "the pool's nodes advertise" in result.why:
                ctx.explain(f"{_where(state)}: {result.why}")
        if isinstance(result, Failure):
            state.failure = result
            ctx.findings.append(Finding(result.rule, result.path, result.message, intent.class_name))
            if ctx.trace is not None:
                ctx.explain(f"{_where(state)}: not resolved: [{result.rule}] {result.message}")
        else:
            state.resolution = result


def _resolve(policy: Policy, intent: Intent, ctx: Context, selector: dict[str, str]) -> Resolution | Failure:
    """``resolve``, remembered per policy: its answer is a function of the intent (a frozen value, its own
    key), the entitlement, the namespace name and the user's nodeSelector, and a cluster asks the same few
    questions over and over (every pod of a Deployment, every task of a job). With ``--explain`` it
    runs every time, since the trace records each step."""
    if ctx.trace is not None:
        return resolve(policy, intent, ctx.entitlement, ctx.namespace, selector, ctx.trace)
    key = ("resolve", intent, ctx.entitlement_key, ctx.namespace, tuple(selector.items()))
    return policy.recall(key, lambda: resolve(policy, intent, ctx.entitlement, ctx.namespace, selector, None))


def _where(state: TemplateState) -> str:
    return f"task {state.tpl.task}" if state.tpl.task is not None else (state.tpl.dotted() or "pod")


def _template_at(doc: dict[str, Any], tpl: Template) -> Template:
    if tpl.virtual:  # built from the object's fields (TrainJob): read them again from the mutated object
        if tpl.rule is None:
            return tpl
        meta, spec = projected(doc, tpl.rule)
        return Template(
            tpl.path, meta, spec, tpl.replicas, tpl.task, tpl.gang, True, tpl.bindings, tpl.resources_at, tpl.rule
        )
    node: Any = doc
    for part in tpl.path:
        node = node[part] if isinstance(node, dict | list) else {}
    node = node if isinstance(node, dict) else {}
    meta = node.get("metadata") if isinstance(node.get("metadata"), dict) else {}
    spec = node.get("spec") if isinstance(node.get("spec"), dict) else {}
    return Template(tpl.path, meta, spec, tpl.replicas, tpl.task, tpl.gang, tpl.virtual, tpl.bindings, tpl.resources_at)


DEVICE_ONLY_RULES = frozenset({"privileged-gpu"})
"""The rules about a CPU-only pod that can reach a GPU pool and has no way past the grant a sliced pool
would show (``device_only``): what its containers may see of the node's GPUs, nothing else."""


def _applicable(known: frozenset[str] | None, only: frozenset[str] | None) -> tuple[Rule, ...]:
    """The pod rules to call, in registry order, when ``known`` facts hold (None: every rule, for the
    trace) and, with ``only``, among those. A function of a handful of facts: the policy remembers it,
    so a review no longer tests every rule's subjects and needs."""
    return tuple(
        rule
        for rule in RULES.values()
        if POD in rule.subjects
        and (only is None or rule.id in only)
        and (known is None or not rule.needs or rule.needs <= known)
    )


def _run_rules(
    ctx: Context, deadline: float | None = None, only: frozenset[str] | None = None
) -> tuple[Violation, ...]:
    policy = ctx.policy
    out: list[Violation] = []
    seen: set[tuple[str, str, str]] = set()
    known = rule_facts(ctx) if ctx.trace is None else None  # --explain runs (and reports) every rule
    excepted, notes = ctx.excepted.by_rule, ctx.excepted.notes
    for rule in policy.recall(("rules", known, only), lambda: _applicable(known, only)):
        if deadline is not None:  # (no call at all without one: this loop is on the hot path)
            past_deadline(deadline, f"rule {rule.id}")
        found = False
        for finding in rule.check(ctx):
            found = True
            key = (finding.rule, finding.path, finding.message)
            if key in seen:
                continue
            seen.add(key)
            action = effective_action(policy, finding.rule, ctx.namespace_labels, finding.class_name)
            if action is Action.OFF:
                if ctx.trace is not None:
                    ctx.trace.append(f"rule {finding.rule}: off: {finding.message}")
                continue
            exception = excepted.get(finding.rule)
            message = finding.message
            if exception is not None:
                action = Action.AUDIT  # admitted, on the record: the audit entry names the exception
            elif finding.rule in notes:
                message = f"{message} [{notes[finding.rule]}]"
            found_as = violation(policy, finding.rule, action, finding.path, message, exception)
            if ctx.trace is not None:
                via = f" (exception {exception})" if exception else ""
                mode = f" [{WOULD_DENY}: enforcement {policy.settings.enforcement}]" if found_as.would_deny else ""
                ctx.trace.append(f"rule {finding.rule}: {found_as.action.value}{via}: {finding.message}{mode}")
            out.append(found_as)
        if ctx.trace is not None and not found:
            ctx.trace.append(f"rule {rule.id}: pass")
    return tuple(out)


def _object_view(
    obj: dict[str, Any],
    kind: str,
    namespace: str,
    meta: dict[str, Any],
    states: list[TemplateState],
    is_pod: bool,
) -> excepting.ObjectView:
    """The object as exceptions see it; virtual templates (built from fields) carry no grant. Its name is
    ``metadata.name`` only: a grant binds the name the object will have, which generateName does not say."""
    nodes = tuple(
        (s.tpl.path, obj if is_pod else {"metadata": s.tpl.metadata, "spec": s.tpl.spec})
        for s in states
        if not s.tpl.virtual
    )
    group = excepting.api_group(str(obj.get("apiVersion") or ""))
    return excepting.ObjectView(kind, str(meta.get("name") or ""), namespace, meta, nodes, is_pod, group)


def _with_contents(
    view: excepting.ObjectView,
    doc: dict[str, Any],
    states: list[TemplateState],
    operation: str,
    old_object: Any,
) -> excepting.ObjectView:
    """``view`` with what each template's pods will run (after our mutation: a Deployment's pods are mutated
    at their own CREATE as its template is here) and, for a pod UPDATE, whether the update changes it."""
    if view.is_pod:
        changed = (
            operation == "UPDATE" and isinstance(old_object, dict) and content_digest(old_object) != content_digest(doc)
        )
        return replace(view, runs=(doc,), content_changed=changed)
    return replace(view, runs=tuple({"spec": _template_at(doc, s.tpl).spec} for s in states if not s.tpl.virtual))


def _grant_ops(
    ctx: Context,
    view: excepting.ObjectView,
    patch: PatchBuilder,
    requester: excepting.Requester | None,
    today: date | None,
    keys: excepting.GrantKeys,
) -> tuple[dict[str, Any], ...]:
    """JSON Patch operations that leave each pod template with exactly the grants it must carry, judged on
    the template as it will be stored (after our own mutation, when we mutate the object)."""
    key = excepting.grant_annotation(ctx.policy)
    first = len(patch.ops)
    if patch.ops:  # our mutation changed the object: the digest is of the mutated templates
        nodes = tuple(
            (s.tpl.path, {"metadata": t.metadata, "spec": t.spec})
            for s in ctx.states
            if not s.tpl.virtual
            for t in (_template_at(patch.doc, s.tpl),)
        )
        view = replace(view, templates=nodes)
    wanted = excepting.grant_values(
        ctx.policy, view, ctx.namespace_labels, requester=requester, today=today, keys=keys
    )
    for path, value in wanted:
        at = (*path, "metadata", "annotations", key)
        current = patch.get(at)
        if value is None and current is not None:
            patch.remove(at)
        elif value is not None and value != current:
            patch.set(at, value, overwrite=True)
        if ctx.trace is not None and value != current:
            ctx.explain(f"exception grant at {dotted(path) or 'pod'}: {'written' if value else 'removed'}")
    return tuple(patch.ops[first:])


def _waste(ctx: Context) -> WasteReport | None:
    primary = ctx.primary
    if primary is None or primary.resolution is None:
        return None
    res = primary.resolution
    devices = primary.judged.effective_devices() or 1
    # the pods this object creates: a bare pod is one pod even in a gang of N (its gang-size counts the
    # other pods' objects too, each of which reports its own device: N x N if counted here)
    pods = ctx.gang.size if ctx.gang is not None and not ctx.workload.root_template else 1
    device, device_bytes = res.device_name, res.device_bytes
    for claim in primary.judged.claims:  # a slice the devices' request policy rounds up holds more
        for request in claim.requests:
            if claim.platform and request.requested_memory is not None and (request.memory or 0) > device_bytes:
                device_bytes = int(request.memory or 0)
                device = f"{device}, rounded up to {format_bytes(device_bytes)} by the devices' request policy"
    return WasteReport(
        device=device,
        requested_bytes=int(res.memory) if res.memory is not None else None,
        device_bytes=device_bytes,
        devices=devices,
        pods=max(1, pods),
        shared=res.shared_card,
    )

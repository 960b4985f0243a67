"""In-tree guarantees: what the kube-apiserver enforces itself while the webhook is down.

``policy render --in-tree`` emits self-contained ValidatingAdmissionPolicies and bindings (labelled
``gpu-admission.io/in-tree: "true"``, no ``paramKind``: the policy's data is rendered into the CEL), and
on clusters that serve them (``--kube-version 1.36`` and later, or ``settings.inTree.kubeVersion``; not
with ``settings.inTree.mutating: false``, ``--no-mutating`` or ``settings.mutation: off``)
MutatingAdmissionPolicies that place the common class pod. They go to their own file
(``manifests/in-tree/``), never silently into an existing install. Modules:

* :mod:`.checks` — the catalogue: one entry per conservative part of a rule; rule groups
  :mod:`.intent`, :mod:`.entitlement`, :mod:`.placement`, :mod:`.devices`, :mod:`.scheduling`;
* :mod:`.vap` — policies and bindings from the catalogue; :mod:`.mutating` — the MAPs;
* :mod:`.runtimecost` — what each expression can cost, as cel-go charges it; the refusal of a policy too large;
* :mod:`.explain` — rule by rule, what holds while the webhook is down, partly, or not at all.
"""

from __future__ import annotations

from webhook.policy.compiled import Policy
from webhook.render.core import K8sObject, RenderOptions


def render(policy: Policy, options: RenderOptions) -> list[K8sObject]:
    """The in-tree objects; raises :class:`~webhook.render.intree.runtimecost.TooLarge` rather than emit a
    policy the apiserver would reject or could not evaluate within its budget."""
    from webhook.render.intree import mutating, runtimecost, vap

    objects = vap.render(policy, options)
    # settings.mutation: off places nothing, in the webhook or in-tree
    if options.mutating and policy.settings.mutation == "apply" and options.kube_version >= mutating.SERVED_FROM:
        objects += mutating.render(policy, options)
    runtimecost.check(objects)
    return objects

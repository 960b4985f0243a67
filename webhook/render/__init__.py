"""``gpu-admission policy render``: the cluster objects a policy depends on, generated from it.

A policy names PriorityClasses, intent keys under its prefix and GPU resource names; the API server
must know the same names (the Priority admission plugin, the webhooks' ``rules`` and
``matchConditions``). Writing those objects by hand lets them drift from the policy silently, so they
are rendered from it: pure functions (compiled policy, options) -> Kubernetes objects, no I/O.

Adding an object kind is one module with a ``render(policy, options) -> list[dict]`` function and one
entry in :data:`webhook.render.core.RENDERERS`. The webhook configurations have finer extension points
of their own (:mod:`webhook.render.webhooks`: the intercepted resources table and the named CEL
match conditions).
"""

from webhook.render.core import RENDERERS, RenderOptions, render

__all__ = ["RENDERERS", "RenderOptions", "render"]

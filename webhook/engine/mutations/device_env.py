"""``NVIDIA_VISIBLE_DEVICES=void`` on every container without a GPU grant in a pod that can reach a GPU pool.

CUDA base images set ``NVIDIA_VISIBLE_DEVICES=all`` in their own ``ENV``, and the NVIDIA container
toolkit, with its stock settings, honours that variable in unprivileged containers: a CPU pod that
tolerates a GPU pool's taints, a GPU-less sidecar or an init container in a MIG pod would see every
GPU of its node, and the pod spec shows nothing. HAMi's webhook writes the same value for the same
reason. A pod-spec ``env`` entry wins over the image's, so writing ``void`` closes it; the device
plugin's ``Allocate`` answer sets the variable for the containers it gives devices, which are left
alone (``webhook.engine.model.device_reach.container_granted``).

Runs for every pod template the webhook mutates (class pods, raw requests, CPU-only pods), after the
steps that write GPU resources, so the class's GPU container counts as granted. A user's own entry is
kept whatever its value: ``none``/``void`` is what this step would write, anything else is
``privileged-gpu``'s to judge. Nothing is written where ``privileged-gpu`` is off (an exempt
namespace for the GPU operator's own agents, which need the devices). Idempotent: a container that
has the entry is never given another.
"""

from __future__ import annotations

from webhook.engine.model.context import Context, TemplateState
from webhook.engine.model.device_reach import VISIBLE_DEVICES, VOID, without_visible_devices
from webhook.engine.patch import PatchBuilder


def apply(ctx: Context, state: TemplateState, patch: PatchBuilder) -> None:
    if state.tpl.virtual or not state.device_env:
        return
    spec = patch.get(state.tpl.spec_path)
    if not isinstance(spec, dict) or not ctx.reaches_gpu_pool(state):
        return
    target = state.target() if state.resolution is not None else None
    written = []
    for group, index, c in without_visible_devices(ctx.policy, spec, fraction=bool(state.resources.fractions)):
        if (group, index) == target:
            continue  # the class's GPU container: its grant is the resolution's
        patch.append((*state.tpl.spec_path, group, index, "env"), {"name": VISIBLE_DEVICES, "value": VOID})
        written.append(c.get("name"))
    if written and ctx.trace is not None:
        ctx.explain(f"device env: {VISIBLE_DEVICES}={VOID} on {', '.join(repr(n) for n in written)} (no GPU grant)")

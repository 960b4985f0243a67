"""RDMA: Multus networks, the RDMA device, IPC_LOCK, a memory-backed /dev/shm, NCCL env.

Everything is merged, never overwritten: the networks annotation keeps the user's entries and format
(comma list or JSON list; Multus tells them apart by ``[``/``{``/``"``), env vars the user set win,
and an existing /dev/shm mount is left alone.
"""

from __future__ import annotations

import json
from typing import Any

from webhook.engine.model.context import Context, Finding, TemplateState
from webhook.engine.model.workload import dotted
from webhook.engine.patch import PatchBuilder

NETWORKS = "k8s.v1.cni.cncf.io/networks"
SHM_PATH = "/dev/shm"


def _ref(entry: str) -> tuple[str, str, str]:
    ref, _, ifname = entry.strip().partition("@")
    ns, _, name = ref.rpartition("/")
    return ns, name, ifname


def _has(existing: list[tuple[str, str, str]], wanted: tuple[str, str, str]) -> bool:
    ns, name, ifname = wanted
    return any(
        e[1] == name and (not ns or e[0] in ("", ns)) and (not ifname or e[2] == ifname) for e in existing
    )


MAX_NETWORKS_DEPTH = 16
"""A network selection list is ``[{"name", "namespace", "interface", "ips", "cni-args": {...}}]``:
three or four levels. Deeper JSON is refused before parsing (a thousand levels make ``json.loads``
raise RecursionError, and every later walk of the value with it)."""


def _too_deep(text: str) -> bool:
    """Whether brackets outside JSON strings nest deeper than MAX_NETWORKS_DEPTH (one linear scan)."""
    depth = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > MAX_NETWORKS_DEPTH:
                return True
        elif ch in "]}":
            depth -= 1
    return False


def merge_networks(current: Any, wanted: tuple[str, ...]) -> tuple[str | None, str | None]:
    """Return (new annotation value or None if unchanged, error or None)."""
    if current is None or (isinstance(current, str) and not current.strip()):
        return ",".join(wanted), None
    if current == ",".join(wanted):  # already ours (every /validate of a mutated object)
        return None, None
    if not isinstance(current, str):
        return None, f"{NETWORKS} must be a string"
    if any(c in current for c in '[{"'):
        if _too_deep(current):
            return None, (
                f"{NETWORKS} is JSON nested more than {MAX_NETWORKS_DEPTH} levels deep; a network selection "
                'is a list of flat objects such as [{"name": "roce-net"}]'
            )
        try:
            items = json.loads(current)
        except ValueError as exc:
            return None, f"{NETWORKS} looks like JSON but does not parse ({exc.msg} at {exc.pos})"
        if isinstance(items, dict):
            items = [items]
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            return None, f"{NETWORKS} must be a JSON list of network selection objects"
        have = [
            (str(i.get("namespace") or ""), str(i.get("name") or ""), str(i.get("interface") or ""))
            for i in items
        ]
        added = False
        for entry in wanted:
            ref = _ref(entry)
            if not _has(have, ref):
                item = {"name": ref[1]}
                if ref[0]:
                    item["namespace"] = ref[0]
                if ref[2]:
                    item["interface"] = ref[2]
                items.append(item)
                have.append(ref)
                added = True
        return (json.dumps(items, separators=(",", ":")) if added else None), None
    have = [_ref(e) for e in current.split(",") if e.strip()]
    missing = [e for e in wanted if not _has(have, _ref(e))]
    if not missing:
        return None, None
    return current.rstrip().rstrip(",") + "," + ",".join(missing), None


def _networks(ctx: Context, state: TemplateState, networks: tuple[str, ...], current: Any) -> str | None:
    """The networks annotation with the pool's networks merged in (None: already there), reporting
    one that cannot be merged as ``intent-invalid``."""
    value, error = merge_networks(current, networks)
    if error:
        path = (*state.tpl.meta_path, "annotations", NETWORKS)
        ctx.findings.append(Finding("intent-invalid", dotted(path), error, state.class_name))
    return value


def check(ctx: Context, state: TemplateState) -> None:
    """Without mutating (an object judged as received): what ``apply`` would report."""
    res = state.resolution
    if res is None or not res.rdma or res.pool.spec.rdma is None or not res.pool.spec.rdma.networks:
        return
    annotations = state.tpl.metadata.get("annotations")
    current = annotations.get(NETWORKS) if isinstance(annotations, dict) else None
    _networks(ctx, state, res.pool.spec.rdma.networks, current)


def apply(ctx: Context, state: TemplateState, patch: PatchBuilder) -> None:
    res = state.resolution
    if res is None or not res.rdma:
        return
    rdma = res.pool.spec.rdma
    assert rdma is not None
    tpl = state.tpl
    ops_before = len(patch.ops)
    if rdma.networks:
        path = (*tpl.meta_path, "annotations", NETWORKS)
        value = _networks(ctx, state, rdma.networks, patch.get(path))
        if value is not None:
            patch.set(path, value, overwrite=True)
    target = state.target()
    if target is None:
        return
    cpath = (*tpl.spec_path, target[0], target[1])
    # Reads come from the container as it stands now (after the resources step); each part below
    # reads its own field before writing it, and no part writes a field another one reads.
    container = patch.get(cpath)
    container = container if isinstance(container, dict) else {}
    if rdma.resource is not None:
        name, count = rdma.resource.name, str(rdma.resource.count)
        resources = container.get("resources") if isinstance(container.get("resources"), dict) else {}
        limits = resources.get("limits") if isinstance(resources.get("limits"), dict) else {}
        if limits.get(name) is None:
            patch.set((*cpath, "resources", "limits", name), count)
            requests = resources.get("requests")
            if isinstance(requests, dict) and name in requests:
                patch.set((*cpath, "resources", "requests", name), count, overwrite=True)
    if rdma.capabilities:
        context = container.get("securityContext")
        caps = context.get("capabilities") if isinstance(context, dict) else None
        have = caps.get("add") if isinstance(caps, dict) else None
        have = list(have) if isinstance(have, list) else []
        missing_caps = []
        for cap in rdma.capabilities:
            if cap not in have and cap not in missing_caps:
                missing_caps.append(cap)
        patch.extend((*cpath, "securityContext", "capabilities", "add"), missing_caps)
    if res.pool.rdma_shm is not None:
        mounts = container.get("volumeMounts")
        if not any(isinstance(m, dict) and m.get("mountPath") == SHM_PATH for m in mounts or []):
            volumes = patch.get((*tpl.spec_path, "volumes"))
            names = {v.get("name") for v in volumes or [] if isinstance(v, dict)}
            name = "dshm" if "dshm" not in names else "gpu-admission-dshm"
            if name not in names:
                patch.append(
                    (*tpl.spec_path, "volumes"),
                    {"name": name, "emptyDir": {"medium": "Memory", "sizeLimit": str(rdma.shm_size)}},
                )
            patch.append((*cpath, "volumeMounts"), {"name": name, "mountPath": SHM_PATH})
    if rdma.env:
        env = container.get("env")
        have_env = {e.get("name") for e in env or [] if isinstance(e, dict)}
        patch.extend(
            (*cpath, "env"), [{"name": key, "value": rdma.env[key]} for key in sorted(rdma.env) if key not in have_env]
        )
    if ctx.trace is None:
        return  # the summary below is for --explain only; building it costs as much as a patch op
    parts = [f"networks {','.join(rdma.networks)}"] if rdma.networks else []
    if rdma.resource is not None:
        parts.append(f"{rdma.resource.name}: {rdma.resource.count}")
    parts += list(rdma.capabilities)
    if rdma.shm_size is not None:
        parts.append(f"/dev/shm {rdma.shm_size}")
    if rdma.env:
        parts.append(f"{len(rdma.env)} NCCL env")
    ctx.explain(f"rdma: pool {res.pool.name}: {', '.join(parts)} ({len(patch.ops) - ops_before} operation(s))")

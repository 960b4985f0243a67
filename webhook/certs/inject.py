"""Put the CA into ``caBundle`` of every webhook of the two configurations, through the Kubernetes API.

Why a GET then a strategic-merge PATCH naming each webhook:

* ``webhooks`` has ``patchMergeKey=name``, so a strategic merge touches only ``clientConfig.caBundle``
  of the named entries: rules, selectors, ``matchConditions`` and ``failurePolicy`` (owned by whoever
  applied the manifests) are left alone. A JSON merge patch would replace the whole list and an
  index-based JSON patch breaks when the order changes.
* The GET learns the webhook names (no need to keep them in sync with the manifests) and the current
  bundle, which ``--keep-previous`` extends instead of replacing: during a CA rotation the API server
  must trust old and new CA until every replica serves the new certificate.
* ``kubernetes`` is imported lazily: ``gpu-admission check`` in CI never pays for it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from cryptography import x509

from webhook.certs import bundle

Kind = Literal["mutating", "validating"]
FIELD_MANAGER = "gpu-admission-certs"
PATCH_CONTENT_TYPE = "application/strategic-merge-patch+json"
REQUEST_TIMEOUT = 15.0  # seconds; a CLI should fail, not hang, on an unreachable API server


class InjectError(RuntimeError):
    """The API refused or the configuration cannot take a bundle; the message says which and why."""


@dataclass(slots=True)
class PatchPlan:
    """What ``inject`` will send (or sent) for one webhook configuration."""

    kind: Kind
    name: str
    patch: dict[str, Any]
    webhooks: list[str]
    bundle_sizes: dict[str, int] = field(default_factory=dict)  # webhook -> certificates in its bundle
    changed: bool = True  # False: every webhook already carries exactly this bundle
    applied: bool = False


def plan(
    kind: Kind,
    config: dict[str, Any],
    ca: Iterable[x509.Certificate],
    *,
    keep_previous: bool,
    now: datetime | None = None,
) -> PatchPlan:
    """The strategic-merge patch for one configuration object (as returned by a GET)."""
    name = str((config.get("metadata") or {}).get("name", ""))
    hooks = [w for w in config.get("webhooks") or [] if isinstance(w, dict) and w.get("name")]
    if not hooks:
        raise InjectError(f"{kind}webhookconfiguration {name!r} has no webhooks to inject into")
    ca = list(ca)
    entries: list[dict[str, Any]] = []
    sizes: dict[str, int] = {}
    changed = False
    for hook in hooks:
        current = (hook.get("clientConfig") or {}).get("caBundle")
        try:
            previous = bundle.parse(current)
        except bundle.BundleError:
            previous = []  # garbage in the old bundle must not block fixing it
        merged = bundle.merge(ca, previous, keep_previous=keep_previous, now=now)
        value = bundle.to_b64(merged)
        changed = changed or value != current
        sizes[hook["name"]] = len(merged)
        entries.append({"name": hook["name"], "clientConfig": {"caBundle": value}})
    return PatchPlan(kind, name, {"webhooks": entries}, [e["name"] for e in entries], sizes, changed)


def inject(
    ca_pem: bytes,
    targets: Iterable[tuple[Kind, str]],
    *,
    keep_previous: bool = False,
    dry_run: bool = False,
    api_client: Any = None,
    now: datetime | None = None,
    current: dict[tuple[Kind, str], dict[str, Any]] | None = None,
) -> list[PatchPlan]:
    """GET each configuration, compute the patch, and PATCH it unless ``dry_run`` or nothing changes.

    ``current`` holds the configurations as they are (e.g. read from the rendered manifests): with it
    and ``dry_run`` no cluster is contacted at all, so a patch can be reviewed offline."""
    ca = bundle.parse(ca_pem)
    if not ca:
        raise bundle.BundleError("the CA file holds no PEM certificate")
    if current is not None and not dry_run:
        raise InjectError("configurations read from a file can only be planned (--dry-run), not patched")
    api = _AdmissionApi(api_client) if current is None else None
    plans: list[PatchPlan] = []
    for kind, name in targets:
        if api is not None:
            config = api.get(kind, name)
        elif (kind, name) in current:
            config = current[(kind, name)]
        else:
            raise InjectError(f"{kind}webhookconfiguration {name!r} is not in the given file")
        p = plan(kind, config, ca, keep_previous=keep_previous, now=now)
        if not dry_run and p.changed:
            api.patch(kind, name, p.patch)
            p.applied = True
        plans.append(p)
    return plans


def configurations_from_yaml(text: str) -> dict[tuple[Kind, str], dict[str, Any]]:
    """Webhook configurations in a manifest file (multi-document YAML or a List), by (kind, name)."""
    import yaml

    kinds: dict[str, Kind] = {
        "MutatingWebhookConfiguration": "mutating",
        "ValidatingWebhookConfiguration": "validating",
    }
    found: dict[tuple[Kind, str], dict[str, Any]] = {}
    try:
        documents = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        raise InjectError(f"not YAML: {exc}") from exc
    for doc in documents:
        items = doc.get("items") if isinstance(doc, dict) and doc.get("kind") == "List" else [doc]
        for item in items or []:
            if isinstance(item, dict) and item.get("kind") in kinds:
                name = (item.get("metadata") or {}).get("name")
                if isinstance(name, str):
                    found[(kinds[item["kind"]], name)] = item
    return found


def load_api_client(kubeconfig: str | None = None, context: str | None = None) -> Any:
    """In-cluster service account first (the self-signed Job), then a kubeconfig (an operator's laptop).

    An explicit ``kubeconfig`` wins over the in-cluster config, so a test or an operator can aim at a
    specific cluster even from inside a pod.
    """
    from kubernetes import client, config

    cfg = client.Configuration()
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
    else:
        try:
            config.load_incluster_config(client_configuration=cfg)
        except config.ConfigException:
            config.load_kube_config(context=context, client_configuration=cfg)
    return client.ApiClient(cfg)


class _AdmissionApi:
    """GET/PATCH of webhook configurations as plain dicts.

    Raw JSON (``_preload_content=False``) instead of the 37.x pydantic models: the models reject
    unknown fields, and a newer API server may well return some.
    """

    def __init__(self, api_client: Any = None) -> None:
        from kubernetes import client

        self._api = client.AdmissionregistrationV1Api(api_client or load_api_client())

    def get(self, kind: Kind, name: str) -> dict[str, Any]:
        fn = getattr(self._api, f"read_{kind}_webhook_configuration")
        return self._call(kind, name, "get", lambda: fn(name, _preload_content=False, _request_timeout=REQUEST_TIMEOUT))

    def patch(self, kind: Kind, name: str, body: dict[str, Any]) -> dict[str, Any]:
        fn = getattr(self._api, f"patch_{kind}_webhook_configuration")
        return self._call(
            kind,
            name,
            "patch",
            lambda: fn(
                name,
                body,
                field_manager=FIELD_MANAGER,
                _content_type=PATCH_CONTENT_TYPE,  # explicit: never depend on the client's body-type guess
                _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT,
            ),
        )

    @staticmethod
    def _call(kind: Kind, name: str, verb: str, fn: Any) -> dict[str, Any]:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            response = fn()
        except ApiException as exc:
            reason = _status_message(exc.body) or exc.reason
            hint = " (does the service account have get/patch on it?)" if exc.status == 403 else ""
            raise InjectError(f"{verb} {kind}webhookconfiguration {name!r}: HTTP {exc.status}: {reason}{hint}") from exc
        except (HTTPError, OSError) as exc:  # unreachable server, TLS failure, retries exhausted
            raise InjectError(f"{verb} {kind}webhookconfiguration {name!r}: {exc}") from exc
        data = response.data
        try:
            return json.loads(data) if data else {}
        except ValueError as exc:
            raise InjectError(f"{verb} {kind}webhookconfiguration {name!r}: response is not JSON") from exc


def _status_message(body: Any) -> str:
    try:
        return str(json.loads(body).get("message", ""))
    except (TypeError, ValueError, AttributeError):
        return str(body or "")[:200]

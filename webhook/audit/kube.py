"""Reading a live cluster for ``audit``: discovery, then paginated lists, page by page.

Through the official ``kubernetes`` client (imported here only, when a cluster is read), with raw
JSON responses rather than its models: the audit needs plain dicts for the engine, for every kind of
the kind table alike (CRDs included), and the models reject fields a newer apiserver may send.

- Discovery (``/api/v1``, ``/apis``, ``/apis/GROUP/VERSION``) says which kinds the cluster serves;
  a kind it does not serve is skipped with a note, never an error (few clusters run every operator).
- Lists are chunked (``limit`` / ``continue``), as Gatekeeper's audit does (``--audit-chunk-size``):
  one page in memory at a time. A continue token that expired (HTTP 410) restarts the list, and
  objects already judged (by uid) are not judged twice.
- Every failure becomes one :class:`KubeError` line: unreachable server, rejected credentials,
  missing permission, a kubeconfig that does not load.
"""

from __future__ import annotations

import gc
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import orjson

PAGE_SIZE = 500
REQUEST_TIMEOUT = (10.0, 120.0)  # connect, read (seconds): a CLI fails on a dead server, not hangs
MAX_RELISTS = 3


API_JSON_DEPTH = 10_000
"""How deep the apiserver's own JSON decoder nests (k8s.io/apimachinery): a custom resource's free-form
field can hold an object this deep, which orjson (1,024 levels) does not read."""


def _loads(raw: bytes) -> Any:
    """A response body, decoded with the cyclic garbage collector paused; one nested deeper than orjson
    reads is decoded by Python's own json, with the recursion limit raised for the call.

    A page of 500 stored pods is some 150,000 new objects, and the collector ran dozens of times
    while orjson built them, each time walking what it had built so far: half of the decode's time
    (24 against 52 µs per pod). A decoded JSON document holds no reference cycles, so there is nothing
    for the collector to find in it; the pause ends with the decode, exceptions included.

    A page orjson refuses for its depth must still be read: one deep object somewhere in a list would
    otherwise hide every object after it from the audit."""
    paused = gc.isenabled()
    gc.disable()
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        if "depth" not in str(exc):
            raise
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(limit, 2 * API_JSON_DEPTH + 1_000))
        try:
            return json.loads(raw)
        finally:
            sys.setrecursionlimit(limit)
    finally:
        if paused:
            gc.enable()


class KubeError(Exception):
    """Reading or writing the cluster failed; the message is the one line the CLI prints."""


@dataclass(frozen=True, slots=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if namespace and self.namespaced:
            return f"{base}/namespaces/{quote(namespace, safe='')}/{self.plural}"
        return f"{base}/{self.plural}"


def load_client(kubeconfig: str | None, context: str | None, in_cluster: bool) -> Any:
    """An ``ApiClient``: the kubeconfig (``--kubeconfig``, else ``$KUBECONFIG`` / ``~/.kube/config``)
    or the pod's service account (``--in-cluster``)."""
    from kubernetes import client, config

    cfg = client.Configuration()
    try:
        if in_cluster:
            config.load_incluster_config(client_configuration=cfg)
        else:
            config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
    except config.ConfigException as exc:
        where = "the in-cluster service account" if in_cluster else f"kubeconfig {kubeconfig or '(default)'}"
        raise KubeError(f"cannot use {where}: {exc}") from None
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:  # unreadable / not YAML / bad fields
        raise KubeError(f"cannot load kubeconfig {kubeconfig or '(default)'}: {type(exc).__name__}: {exc}") from None
    except Exception as exc:  # yaml.YAMLError and whatever else a broken file raises in the loader
        raise KubeError(f"cannot load kubeconfig {kubeconfig or '(default)'}: {type(exc).__name__}: {exc}") from None
    return client.ApiClient(cfg)


class Kube:
    """GET/PATCH of raw JSON paths with the client's authentication, errors as :class:`KubeError`."""

    def __init__(self, api_client: Any, *, page_size: int = PAGE_SIZE) -> None:
        self.api = api_client
        self.page_size = page_size
        self.host = api_client.configuration.host
        self.remaining: int | None = None  # the last page's remainingItemCount (an estimate, for progress)

    def request(
        self,
        method: str,
        path: str,
        query: list[tuple[str, str]] | None = None,
        *,
        body: bytes | None = None,
        content_type: str | None = None,
        missing_ok: bool = False,
    ) -> tuple[int, Any]:
        """(status, decoded JSON body). 404 is returned when ``missing_ok``; other failures raise."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        try:
            m, url, h, _, _ = self.api.param_serialize(
                method, path, query_params=query or [], header_params=headers, auth_settings=["BearerToken"]
            )
            response = self.api.call_api(m, url, header_params=h, body=body, _request_timeout=REQUEST_TIMEOUT)
            raw = response.read()
            status = response.status
        except ApiException as exc:  # TLS failures arrive here with status 0
            raise KubeError(f"cannot reach the API server at {self.host}: {_first_line(exc.reason)}") from None
        except (HTTPError, OSError) as exc:
            raise KubeError(
                f"cannot reach the API server at {self.host}: {_reason(exc)}; check the kubeconfig's server "
                "address and that the cluster is up"
            ) from None
        try:
            data = _loads(raw) if raw else None
        except (ValueError, RecursionError) as exc:  # json.JSONDecodeError and orjson's are ValueErrors
            if 200 <= status < 300:  # a list page that cannot be read must not end the list quietly
                raise KubeError(
                    f"{method} {path}: the API server answered {status} with a body that is not JSON this audit "
                    f"can read ({_first_line(str(exc))[:200]})"
                ) from None
            data = None
        if 200 <= status < 300 or (status == 404 and missing_ok) or status == 410:
            return status, data
        raise KubeError(_http_error(self.host, method, path, status, data))

    def get(self, path: str, query: list[tuple[str, str]] | None = None, *, missing_ok: bool = False) -> Any:
        status, data = self.request("GET", path, query, missing_ok=missing_ok)
        if status == 410:
            raise KubeError(_http_error(self.host, "GET", path, status, data))
        return None if status == 404 else data

    def pages(self, resource: Resource, namespace: str | None = None) -> Iterator[list[dict[str, Any]]]:
        """The list's items, one page at a time, each item with its ``apiVersion`` and ``kind`` (the
        apiserver leaves them out of built-in lists' items). An expired continue token (410) restarts
        the list; the items already yielded (by uid) are not yielded again."""
        path = resource.path(namespace)
        seen: set[str] = set()
        relists = 0
        token = ""
        while True:
            query = [("limit", str(self.page_size))]
            if token:
                query.append(("continue", token))
            status, data = self.request("GET", path, query, missing_ok=True)
            if status == 404:
                return  # the kind went away between discovery and the list
            if status == 410:
                relists += 1
                if relists > MAX_RELISTS:
                    raise KubeError(
                        f"listing {path}: the continue token expired {relists} times (HTTP 410); the cluster "
                        "changes faster than the audit reads it: retry, or raise --page-size"
                    )
                token = ""
                continue
            items = data.get("items") if isinstance(data, dict) else None
            page: list[dict[str, Any]] = []
            for item in items or ():
                if not isinstance(item, dict):
                    continue
                item.setdefault("apiVersion", resource.api_version)
                item.setdefault("kind", resource.kind)
                uid = (item.get("metadata") or {}).get("uid")
                if isinstance(uid, str) and uid:
                    if uid in seen:
                        continue
                    seen.add(uid)
                page.append(item)
            meta = data.get("metadata") if isinstance(data, dict) else None
            remaining = meta.get("remainingItemCount") if isinstance(meta, dict) else None
            self.remaining = remaining if isinstance(remaining, int) else None
            yield page
            token = meta.get("continue") if isinstance(meta, dict) else ""
            if not token:
                return

    def server_side_apply(self, path: str, body: dict[str, Any], field_manager: str) -> None:
        """PATCH with ``application/apply-patch+yaml`` (JSON is YAML), ``fieldManager`` and ``force``:
        the manager owns every field it sends, and a field it stops sending is removed."""
        self.request(
            "PATCH",
            path,
            [("fieldManager", field_manager), ("force", "true")],
            body=orjson.dumps(body),
            content_type="application/apply-patch+yaml",
        )


class Discovery:
    """Which (group, version, kind) the cluster serves, and under which resource name."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self._versions: dict[str, list[str]] = {}  # group -> served versions, preferred first
        self._resources: dict[tuple[str, str], dict[str, Resource]] = {}  # (group, version) -> kind -> resource

    def groups(self) -> dict[str, list[str]]:
        if not self._versions:
            data = self.kube.get("/apis") or {}
            for group in data.get("groups") or ():
                name = group.get("name")
                versions = [v.get("version") for v in group.get("versions") or () if v.get("version")]
                preferred = (group.get("preferredVersion") or {}).get("version")
                if preferred in versions:
                    versions.remove(preferred)
                    versions.insert(0, preferred)
                if name:
                    self._versions[name] = versions
            self._versions[""] = ["v1"]
        return self._versions

    def resources(self, group: str, version: str) -> dict[str, Resource]:
        key = (group, version)
        if key not in self._resources:
            found: dict[str, Resource] = {}
            if version in self.groups().get(group, ()):
                path = f"/apis/{group}/{version}" if group else f"/api/{version}"
                data = self.kube.get(path, missing_ok=True) or {}
                for r in data.get("resources") or ():
                    name = r.get("name") or ""
                    if "/" in name or "list" not in (r.get("verbs") or ()):
                        continue  # subresources; kinds that cannot be listed
                    found[r.get("kind")] = Resource(group, version, name, r.get("kind"), bool(r.get("namespaced")))
            self._resources[key] = found
        return self._resources[key]

    def find(self, api_version: str, kind: str) -> Resource | None:
        group, _, version = api_version.rpartition("/")
        return self.resources(group, version).get(kind)

    def find_any_version(self, group: str, kind: str) -> Resource | None:
        """The kind in the group's preferred served version, else any served version that has it."""
        for version in self.groups().get(group, ()):
            found = self.resources(group, version).get(kind)
            if found is not None:
                return found
        return None


def _first_line(text: Any) -> str:
    return str(text or "").strip().splitlines()[0][:300] if str(text or "").strip() else "unknown error"


def _reason(exc: BaseException) -> str:
    """The innermost cause of a urllib3 failure ("Connection refused", a DNS failure, a timeout)."""
    inner = getattr(exc, "reason", None) or exc.__cause__ or exc
    text = str(inner)
    if "Connection refused" in text:
        return "connection refused"
    if "timed out" in text.lower():
        return "timed out"
    return _first_line(text.split(": ", 1)[-1] if ">: " in text else text)


def _http_error(host: str, method: str, path: str, status: int, data: Any) -> str:
    message = data.get("message") if isinstance(data, dict) else None
    if status == 401:
        return (
            f"the API server at {host} rejected the credentials (HTTP 401 Unauthorized): the token is expired, "
            "revoked or wrong; refresh the kubeconfig's credentials (log in again) and retry"
        )
    if status == 403:
        return (
            f"forbidden: {method} {path} (HTTP 403: {_first_line(message)}); the audit needs get/list on every "
            "kind it reads and patch on openreports.io reports (manifests/audit/ grants exactly that)"
        )
    return f"{method} {path}: HTTP {status}: {_first_line(message or 'no message')}"

"""``check --old FILE``: the objects an UPDATE replaces, so that ``check`` judges the update itself.

Scaling a Job, changing a Volcano Job's ``minAvailable`` or a Kueue pod's group name is an UPDATE at
admission: the engine judges it with ``operation="UPDATE"`` and the stored object as ``old_object``,
exactly as the server's ``/validate`` does. A checked document is paired with the old object of the
same apiVersion, kind, namespace and name (what the apiserver pairs); a document without one is a
CREATE. An old object that replaces nothing is an error, not a silent CREATE: a typo in a name would
otherwise turn the UPDATE check into a different check that passes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from webhook import yamlpos
from webhook.check.context import documents
from webhook.check.inputs import ReadError, Source

Key = tuple[str, str, str, str]  # apiVersion, kind, namespace, name


class OldError(Exception):
    """A problem with an ``--old`` file: ``file:line: what``."""


@dataclass(slots=True)
class OldObjects:
    default_namespace: str
    objects: dict[Key, dict[str, Any]] = field(default_factory=dict)
    where: dict[Key, str] = field(default_factory=dict)  # key -> file:line, for messages
    used: set[Key] = field(default_factory=set)

    def key(self, obj: dict[str, Any]) -> Key | None:
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            return None
        namespace = meta.get("namespace") if isinstance(meta.get("namespace"), str) else self.default_namespace
        return str(obj.get("apiVersion")), str(obj.get("kind")), namespace, name

    def take(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        """The object ``obj`` replaces, if an ``--old`` file holds it."""
        if not self.objects:
            return None
        key = self.key(obj)
        if key is None or key not in self.objects:
            return None
        self.used.add(key)
        return self.objects[key]

    def unused(self) -> list[str]:
        return [
            f"{self.where[k]}: {k[1]}/{k[3]} (namespace {k[2]}) replaces no checked document; "
            "check the object's apiVersion, kind, namespace and name"
            for k in self.objects
            if k not in self.used
        ]


def read_old(sources: Iterable[Source], default_namespace: str) -> OldObjects:
    """Every document of the ``--old`` files; each must be a named Kubernetes object, once."""
    found = OldObjects(default_namespace)
    for source in sources:
        if source.error:
            raise OldError(f"{source.name}: {source.error}")
        if source.empty:
            raise OldError(f"{source.name}: {source.empty}")
        if source.note:  # kustomize configuration, a Helm chart: not objects
            continue
        try:
            for doc in documents(source, prefilter=False):
                if isinstance(doc, yamlpos.SyntaxProblem):
                    raise OldError(f"{source.name}:{doc.line}:{doc.column}: YAML syntax error: {doc.problem}")
                _add(found, source.name, doc)
        except ReadError as exc:
            raise OldError(f"{source.name}:{exc.line}: {exc.message}") from None
    return found


def _add(found: OldObjects, file: str, doc: yamlpos.Document) -> None:
    data = doc.data
    if data is None:
        return
    items = data["items"] if isinstance(data, dict) and data.get("kind") == "List" and isinstance(
        data.get("items"), list
    ) else [data]
    for obj in items:
        if not isinstance(obj, dict) or not obj.get("apiVersion") or not obj.get("kind"):
            raise OldError(f"{file}:{doc.line}: not a Kubernetes object (it needs apiVersion and kind)")
        key = found.key(obj)
        if key is None:
            raise OldError(
                f"{file}:{doc.line}: {obj.get('kind')} has no metadata.name; an UPDATE replaces a named object"
            )
        if key in found.objects:
            raise OldError(
                f"{file}:{doc.line}: {key[1]}/{key[3]} (namespace {key[2]}) appears twice ({found.where[key]})"
            )
        found.objects[key] = obj
        found.where[key] = f"{file}:{doc.line}"

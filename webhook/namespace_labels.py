"""Namespace labels from a file, for offline use (``check --namespaces``, ``serve --namespaces FILE``).

Two formats, so that a platform team can either write the few namespaces a CI check needs by hand or
dump the real ones: ``{namespace: {label: value}}``, or Namespace objects / a NamespaceList
(``kubectl get ns -o yaml``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from webhook import yamlpos


def read_namespace_file(path: str | Path) -> dict[str, dict[str, str]]:
    """Parse ``{ns: {label: value}}`` or Namespace/NamespaceList/List documents; ValueError on bad shape."""
    out: dict[str, dict[str, str]] = {}
    text = Path(path).read_text(encoding="utf-8-sig")
    for item in yamlpos.iter_documents(text, with_nodes=False):  # aliases bounded, errors at line:col
        if isinstance(item, yamlpos.SyntaxProblem):
            raise ValueError(f"{path}:{item.line}:{item.column}: YAML syntax error: {item.problem}")
        doc = item.data
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise ValueError(f"{path}: expected a mapping of namespace -> labels or Namespace objects")
        if doc.get("kind") == "Namespace":
            items: list[Any] | None = [doc]
        elif doc.get("kind") in ("List", "NamespaceList"):
            items = doc.get("items") or []
        else:
            items = None
        if items is not None:
            for item in items:
                meta = item.get("metadata") if isinstance(item, dict) else None
                if not isinstance(meta, dict) or not meta.get("name"):
                    raise ValueError(f"{path}: a Namespace without metadata.name")
                out[str(meta["name"])] = _labels(path, meta["name"], meta.get("labels"))
            continue
        for name, labels in doc.items():
            out[str(name)] = _labels(path, name, labels)
    return out


def _labels(path: str | Path, name: Any, labels: Any) -> dict[str, str]:
    if labels is None:
        return {}
    if not isinstance(labels, dict):
        raise ValueError(f"{path}: namespace {name!r} must map to a label map, got {type(labels).__name__}")
    return {str(k): str(v) for k, v in labels.items()}

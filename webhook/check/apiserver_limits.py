"""The apiserver's metadata validation, the cheap part: what it refuses before any webhook could admit it.

``check`` promises that what passes in CI is admitted; an object the apiserver itself refuses (a 5 MiB
annotation, a label value of 64 characters, an upper-case name) would pass the webhook's rules and still
fail ``kubectl apply``. These are the checks of ``ValidateObjectMeta`` (k8s.io/apimachinery
``api/validation`` and ``util/validation``) that need nothing but the object: annotations at most 256 KiB
in total, qualified-name keys, label values of at most 63 characters of the label alphabet, and a DNS
subdomain name and DNS label namespace. Pod templates' metadata is validated the same way.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

ANNOTATIONS_TOTAL = 256 * 1024  # TotalAnnotationSizeLimitB: keys and values, in bytes
LABEL_VALUE_MAX = 63
NAME_PART_MAX = 63  # the name part of a qualified key
PREFIX_MAX = 253  # a key's DNS-subdomain prefix, and an object name
NAMESPACE_MAX = 63

_NAME_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

# where pod templates keep their metadata in the built-in controllers (other kinds: their own metadata)
_TEMPLATE_METADATA = (
    ("spec", "template", "metadata"),
    ("spec", "jobTemplate", "metadata"),
    ("spec", "jobTemplate", "spec", "template", "metadata"),
)


def _cut(text: str, limit: int = 40) -> str:
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}…"


def _size(n: int) -> str:
    return f"{n / 1024 / 1024:.1f} MiB" if n >= 1024 * 1024 else f"{n / 1024:.1f} KiB"


def _key_problem(key: str) -> str | None:
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > PREFIX_MAX or not _DNS_SUBDOMAIN.match(prefix)):
        return f"the prefix {prefix!r} must be a lower-case DNS subdomain of at most {PREFIX_MAX} characters"
    if not name or len(name) > NAME_PART_MAX or not _NAME_PART.match(name):
        return (
            f"the name part must be at most {NAME_PART_MAX} characters of A-Z, a-z, 0-9, '-', '_', '.', "
            "starting and ending with a letter or digit"
        )
    return None


def _meta_problems(meta: dict[str, Any], at: tuple[str, ...], top: bool) -> Iterator[tuple[tuple[str, ...], str]]:
    labels = meta.get("labels")
    if isinstance(labels, dict):
        for key, value in labels.items():
            problem = _key_problem(str(key))
            if problem:
                yield (*at, "labels"), f"label key {str(key)[:80]!r}: {problem}"
            text = "" if value is None else str(value)
            if len(text) > LABEL_VALUE_MAX or not _LABEL_VALUE.match(text):
                yield (
                    (*at, "labels", str(key)),
                    f"label value of {key!r} ({len(text)} characters: {_cut(text)}) must be at most "
                    f"{LABEL_VALUE_MAX} characters of A-Z, a-z, 0-9, '-', '_', '.', starting and ending with a "
                    "letter or digit; put longer text in an annotation",
                )
    annotations = meta.get("annotations")
    if isinstance(annotations, dict):
        total = 0
        for key, value in annotations.items():
            problem = _key_problem(str(key))
            if problem:
                yield (*at, "annotations"), f"annotation key {str(key)[:80]!r}: {problem}"
            total += len(str(key).encode()) + len(("" if value is None else str(value)).encode())
        if total > ANNOTATIONS_TOTAL:
            yield (
                (*at, "annotations"),
                f"annotations take {_size(total)} in total; the apiserver allows {_size(ANNOTATIONS_TOTAL)} "
                "(keys and values): keep large data in a ConfigMap or a volume",
            )
    if not top:
        return
    name = meta.get("name")
    if isinstance(name, str) and name and (len(name) > PREFIX_MAX or not _DNS_SUBDOMAIN.match(name)):
        yield (
            (*at, "name"),
            f"name {name[:80]!r} must be a lower-case DNS subdomain (a-z, 0-9, '-', '.', at most {PREFIX_MAX} "
            "characters, starting and ending with a letter or digit)",
        )
    namespace = meta.get("namespace")
    if isinstance(namespace, str) and namespace and (
        len(namespace) > NAMESPACE_MAX or not _DNS_LABEL.match(namespace)
    ):
        yield (
            (*at, "namespace"),
            f"namespace {namespace[:80]!r} must be a lower-case DNS label (a-z, 0-9, '-', at most "
            f"{NAMESPACE_MAX} characters)",
        )


def refused_by_apiserver(obj: dict[str, Any]) -> list[tuple[tuple[str, ...], str]]:
    """(path, why) for each metadata problem the apiserver refuses the object for; empty: none."""
    found: list[tuple[tuple[str, ...], str]] = []
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        found.extend(_meta_problems(meta, ("metadata",), top=True))
    for path in _TEMPLATE_METADATA:
        node: Any = obj
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            found.extend(_meta_problems(node, path, top=False))
    return found

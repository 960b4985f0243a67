"""``--snapshot FILE|DIR…``: a cluster as ``kubectl get … -A -o yaml`` printed it, read item by item.

kubectl prints one ``kind: List`` document whose ``items`` hold every object: 100,000 pods are one
YAML document of hundreds of megabytes, which no YAML loader can hold as one tree in a few hundred
megabytes. So the ``items:`` block sequence is split on its own lines: every item starts with the
sequence's ``- `` at the indentation of its first item, and is loaded alone (dedented), one in memory
at a time. Multi-document YAML (``---``) and Lists written by other tools work the same way; a
document that is not a List is loaded whole, as ``check`` loads it. JSON (``-o json``) is one
document and is loaded whole: use ``-o yaml`` for large clusters.

The judging pass leaves unparsed the items a text screen says cannot be GPU-relevant
(:mod:`webhook.audit.screen`): most of a cluster. So a YAML error inside such an item (which kubectl
never writes) goes unnoticed; an item that is not even a mapping is always parsed, and reported.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from webhook import yamlpos
from webhook.check.context import mentions_context
from webhook.check.inputs import ReadError, Source, read_sources

_MAPPING = re.compile(r"""\s*(?:#[^\n]*\n\s*)*[\w"'./-]+:(?:[ \t]|\r?\n|$)""")  # starts like a mapping
_ITEMS = re.compile(r"^items:[ \t]*(?:#.*)?\r?\n?$")


class SnapshotError(Exception):
    """A snapshot that cannot be read: ``file:line: what``."""


@dataclass(slots=True)
class Item:
    """One document, or one item of a List, as written; ``text`` is it dedented, made when first read
    (an item the screen rejects is never dedented)."""

    file: str
    line: int
    raw: str
    indent: str = ""  # what each of the item's lines starts with (the sequence marker's width)
    _text: str | None = None

    @property
    def text(self) -> str:
        if self._text is None:
            raw, cut = self.raw, self.indent
            self._text = raw[len(cut) :].replace("\n" + cut, "\n") if cut and raw.startswith(cut) else raw
        return self._text


def _chunks(lines: Iterable[str], file: str) -> Iterator[Item]:
    """Documents, and each item of a List's top-level ``items:`` on its own, with their first line."""
    header: list[str] = []
    header_line = 1
    item: list[str] = []
    item_line = 0
    marker: str | None = None  # the "- " prefix of the items, once the first is seen
    in_items = False
    seen_items = False  # this document is a List whose items are read one by one
    number = 0
    items_key = "items:\n"

    def flush_item() -> Iterator[Item]:
        nonlocal item
        if item:
            yield Item(file, item_line, "".join(item), cont)
        item = []

    cont = ""  # an item's continuation lines start with this (the marker's width in spaces)
    for number, line in enumerate(lines, start=1):
        if marker is not None and in_items:  # the hot path: most lines continue the current item
            if line.startswith(cont):
                item.append(line)
                continue
            if line.startswith(marker):
                yield from flush_item()
                item, item_line = [cont + line[len(marker) :]], number
                continue
        if yamlpos._is_separator(line):
            yield from flush_item()
            if header and not seen_items and yamlpos.has_content("".join(header)):
                yield Item(file, header_line, "".join(header))
            header, header_line, in_items, seen_items, marker = [], number + 1, False, False, None
            continue
        if in_items:
            stripped = line.strip()
            if marker is None:
                if not stripped or stripped.startswith("#"):
                    continue
                indent = len(line) - len(line.lstrip(" "))
                if line[indent:].startswith("- ") or line[indent:].rstrip("\r\n") == "-":
                    marker = " " * indent + "- "
                    cont = " " * len(marker)
                else:  # not a block sequence: the items were on the "items:" line or absent
                    in_items = seen_items = False
                    header.extend((items_key, line))
                    continue
            if line.startswith(marker) or line.rstrip("\r\n") == marker.rstrip():
                yield from flush_item()
                item, item_line = [" " * len(marker) + line[len(marker) :]], number
                continue
            if not stripped or line.startswith(" " * len(marker)) or (stripped.startswith("#") and item):
                item.append(line)
                continue
            yield from flush_item()  # back at the List's own keys (kind: List, metadata)
            in_items = False
            continue
        if _ITEMS.match(line):
            in_items, seen_items, marker, items_key = True, True, None, line
            continue
        if not header:
            header_line = number
        header.append(line)
    yield from flush_item()
    if header and not seen_items and yamlpos.has_content("".join(header)):
        yield Item(file, header_line, "".join(header))


def objects(
    paths: list[str], *, keep: Callable[[str], bool] | None = None, placeholders: bool = False, strip: bool = False
) -> Iterator[tuple[Item, Any]]:
    """Every object of every snapshot file, one at a time. ``keep(text)`` False skips an item
    unparsed (yielded as ``(item, None)`` with ``placeholders``, so it can still be counted).

    Raises :class:`SnapshotError` on the first thing that cannot be read: a snapshot is the cluster,
    and an audit that silently lost part of it would report a clean cluster that is not. ``strip``:
    parse items :func:`without_system_blocks` (the judging pass)."""
    for source in read_sources(paths):
        yield from _source_objects(source, keep, placeholders, strip)


def objects_unparsed(paths: list[str], keep: Callable[[str], bool] | None) -> Iterator[tuple[Item, bool]]:
    """:func:`objects` without the parsing: every item with whether ``keep`` wants it parsed
    (:func:`parse_item` parses it, e.g. in a worker process)."""
    for source in read_sources(paths):
        yield from source_items(source, keep)


def _lines(source: Source) -> Iterator[str]:
    """The file's lines straight from the file object (no per-line bookkeeping: a snapshot has
    millions); a decoding error is reported with the line ``_chunks`` counted."""
    if source.path is None or source.spool is not None:
        yield from source.lines()
        return
    try:
        stream = source.path.open(encoding="utf-8-sig", newline="")
    except OSError as exc:
        raise ReadError(0, f"cannot read: {exc.strerror or exc}") from None
    with stream:
        yield from stream


_CONTEXT_WORDS = ("Namespace", "Node", "ResourceClaim", "DeviceClass", "ComputeDomain")


def _may_be_context(text: str) -> bool:
    return any(w in text for w in _CONTEXT_WORDS) and mentions_context(text)


def context_objects(paths: list[str]) -> Iterator[tuple[Item, Any]]:
    """The items that may be context objects (Namespaces, Nodes, claim templates, claims, DeviceClasses),
    by a text test first (a substring, then ``check``'s own regex): the first pass parses only those."""
    return objects(paths, keep=_may_be_context)


_STATUS = re.compile(r"^status:[^\n]*\n(?:[ \t#][^\n]*\n|\r?\n)*", re.M)
_MANAGED = re.compile(r"^  managedFields:[^\n]*\n(?:(?:   |  - )[^\n]*\n|\r?\n)*", re.M)


def without_system_blocks(text: str) -> str:
    """An item's text without its top-level ``status`` and its ``metadata.managedFields`` (kubectl's
    layout): the judgement drops both (:mod:`webhook.audit.stored`), and they are a third of a stored
    pod's nodes, so they are cut before parsing. ``managedFields`` that mention ``f:nodeName`` stay:
    they decide whether a nodeName is the user's."""
    if "\nstatus:" in text:
        text = _STATUS.sub("", text)
    if "managedFields:" in text and "f:nodeName" not in text:
        text = _MANAGED.sub("", text)
    return text


def _source_objects(
    source: Source, keep: Callable[[str], bool] | None, placeholders: bool, strip: bool
) -> Iterator[tuple[Item, Any]]:
    for item, kept in source_items(source, keep):
        if not kept:
            if placeholders:
                yield item, None
            continue
        yield from parse_item(item, source.name, strip)


def source_items(source: Source, keep: Callable[[str], bool] | None) -> Iterator[tuple[Item, bool]]:
    """The items of one snapshot file, unparsed, each with whether to parse it (``keep``; an item that
    does not even start like a mapping is always parsed, so it is reported). Split from the parsing
    (:func:`parse_item`) so that a process pool can parse and judge while this process reads."""
    if source.error:
        raise SnapshotError(f"{source.name}: {source.error}")
    if source.empty:
        raise SnapshotError(f"{source.name}: {source.empty}")
    try:
        for item in _chunks(_lines(source), source.name):
            yield item, keep is None or keep(item.text) or not _MAPPING.match(item.text)
    except ReadError as exc:
        raise SnapshotError(f"{source.name}:{exc.line}: {exc.message}") from None
    except UnicodeDecodeError as exc:
        byte = exc.object[exc.start]
        raise SnapshotError(f"{source.name}: not UTF-8 (byte 0x{byte:02x}); save it as UTF-8") from None
    except OSError as exc:
        raise SnapshotError(f"{source.name}: cannot read: {exc.strerror or exc}") from None


def parse_item(item: Item, name: str, strip: bool) -> Iterator[tuple[Item, Any]]:
    """The objects of one item (several for a List the line splitter did not split); ``strip``: parse
    it :func:`without_system_blocks`. Raises :class:`SnapshotError` for a YAML error or a non-object."""
    text = without_system_blocks(item.text) if strip else item.text
    for doc in yamlpos.iter_chunk_documents([(item.line, text)], with_nodes=False):
        if isinstance(doc, yamlpos.SyntaxProblem):
            if text is not item.text:  # where it is in the file, not in the shortened text
                doc = next(
                    (d for d in yamlpos.iter_chunk_documents([(item.line, item.text)], with_nodes=False)
                     if isinstance(d, yamlpos.SyntaxProblem)),
                    doc,
                )
            raise SnapshotError(f"{name}:{doc.line}:{doc.column}: YAML syntax error: {doc.problem}")
        data = doc.data
        if data is None:
            continue
        kind = str(data.get("kind", "")) if isinstance(data, dict) else ""
        if kind.endswith("List") and isinstance(data.get("items"), list):
            for element in data["items"]:  # a List the line splitter did not split (flow style, JSON)
                yield from _checked(item, element, name)
            continue
        yield from _checked(item, data, name)


def _checked(item: Item, data: Any, name: str) -> Iterator[tuple[Item, Any]]:
    if not isinstance(data, dict) or not data.get("apiVersion") or not data.get("kind"):
        raise SnapshotError(
            f"{name}:{item.line}: not a Kubernetes object (it needs apiVersion and kind); a snapshot is "
            "`kubectl get … -A -o yaml` output"
        )
    yield item, data

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

import io
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any

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


class _Splitter:
    """Where the split is: the document's header lines, the item being read, the items' marker.

    Fed one line at a time (:meth:`line`), except for the runs of lines that merely continue the
    current item, which :func:`_block_chunks` appends without looking at them one by one."""

    __slots__ = ("cont", "file", "header", "header_line", "in_items", "item", "item_line", "items_key",
                 "marker", "seen_items")

    def __init__(self, file: str) -> None:
        self.file = file
        self.header: list[str] = []
        self.header_line = 1
        self.item: list[str] = []
        self.item_line = 0
        self.marker: str | None = None  # the "- " prefix of the items, once the first is seen
        self.cont = ""  # an item's continuation lines start with this (the marker's width in spaces)
        self.in_items = False
        self.seen_items = False  # this document is a List whose items are read one by one
        self.items_key = "items:\n"

    def continuing(self) -> str | None:
        """The prefix every line continuing the current item starts with, while items are being read."""
        return self.cont if self.marker is not None and self.in_items else None

    def flush_item(self) -> Iterator[Item]:
        if self.item:
            yield Item(self.file, self.item_line, "".join(self.item), self.cont)
        self.item = []

    def line(self, line: str, number: int) -> Iterator[Item]:
        """One line (line ending kept) that is not a mere continuation of the current item."""
        marker = self.marker
        if marker is not None and self.in_items and line.startswith(marker):
            yield from self.flush_item()
            self.item, self.item_line = [self.cont + line[len(marker) :]], number
            return
        if yamlpos._is_separator(line):
            yield from self.flush_item()
            yield from self._header_document()
            self.header, self.header_line, self.marker = [], number + 1, None
            self.in_items = self.seen_items = False
            return
        if self.in_items:
            stripped = line.strip()
            if marker is None:
                if not stripped or stripped.startswith("#"):
                    return
                indent = len(line) - len(line.lstrip(" "))
                if line[indent:].startswith("- ") or line[indent:].rstrip("\r\n") == "-":
                    marker = self.marker = " " * indent + "- "
                    self.cont = " " * len(marker)
                else:  # not a block sequence: the items were on the "items:" line or absent
                    self.in_items = self.seen_items = False
                    self.header.extend((self.items_key, line))
                    return
            if line.startswith(marker) or line.rstrip("\r\n") == marker.rstrip():
                yield from self.flush_item()
                self.item, self.item_line = [" " * len(marker) + line[len(marker) :]], number
                return
            if not stripped or line.startswith(" " * len(marker)) or (stripped.startswith("#") and self.item):
                self.item.append(line)
                return
            yield from self.flush_item()  # back at the List's own keys (kind: List, metadata)
            self.in_items = False
            return
        if _ITEMS.match(line):
            self.in_items, self.seen_items, self.marker, self.items_key = True, True, None, line
            return
        if not self.header:
            self.header_line = number
        self.header.append(line)

    def finish(self) -> Iterator[Item]:
        yield from self.flush_item()
        yield from self._header_document()

    def _header_document(self) -> Iterator[Item]:
        """A document that is not a List read item by item is one item, whole."""
        if self.header and not self.seen_items and yamlpos.has_content("".join(self.header)):
            yield Item(self.file, self.header_line, "".join(self.header))


def _chunks(lines: Iterable[str], file: str) -> Iterator[Item]:
    """Documents, and each item of a List's top-level ``items:`` on its own, with their first line,
    from the file's lines (the reference for :func:`_block_chunks`, and the path for files whose
    lines :func:`_block_chunks` would not split alike)."""
    split = _Splitter(file)
    number = 0
    for number, line in enumerate(lines, start=1):
        cont = split.continuing()
        if cont is not None and line.startswith(cont):  # most lines continue the current item
            split.item.append(line)
            continue
        yield from split.line(line, number)
    yield from split.finish()


_RUN_ENDS: dict[str, re.Pattern[str]] = {}
_LONE_CR = re.compile(r"\r(?!\n)")


def _run_end(cont: str) -> re.Pattern[str]:
    """The end of a line that the next line does not continue (does not start with ``cont``)."""
    found = _RUN_ENDS.get(cont)
    if found is None:
        found = _RUN_ENDS[cont] = re.compile("\n(?!" + re.escape(cont) + ")")
    return found


def _block_chunks(blocks: Iterable[str], file: str) -> Iterator[Item]:
    """:func:`_chunks` over the file in blocks, each ending at a line end: the same items.

    A stored pod is ~100 lines, all but two or three of which continue the item; looking at each in
    Python was the largest serial share of ``audit --snapshot`` (the main process splits, twice, while
    workers judge). Here a run of continuation lines is found by one regex search and appended as one
    slice; only the lines that start an item, a document or the List's own keys are looked at. A
    block with a lone carriage return (a line end for the file's text reader, not for a search on
    ``\\n``) goes line by line, as :func:`_chunks` would."""
    split = _Splitter(file)
    number = 0  # the last line looked at
    for block in blocks:
        if "\r" in block and _LONE_CR.search(block):
            for line in io.StringIO(block, newline=""):
                number += 1
                cont = split.continuing()
                if cont is not None and line.startswith(cont):
                    split.item.append(line)
                    continue
                yield from split.line(line, number)
            continue
        pos, end = 0, len(block)
        while pos < end:
            cont = split.continuing()
            if cont is not None and block.startswith(cont, pos):
                found = _run_end(cont).search(block, pos)
                stop = found.end() if found is not None else end
                split.item.append(block[pos:stop])
                number += block.count("\n", pos, stop)
                pos = stop
                continue
            newline = block.find("\n", pos)
            stop = end if newline < 0 else newline + 1
            number += 1
            yield from split.line(block[pos:stop], number)
            pos = stop
    yield from split.finish()


BLOCK_CHARS = 1 << 20
"""Characters read at a time by :func:`_blocks`: a few stored pods' worth, so memory stays flat."""


def _blocks(stream: IO[str], size: int = BLOCK_CHARS) -> Iterator[str]:
    """The stream's text in blocks of about ``size`` characters, each ending at a line end (the last
    may not); a line longer than a block is read whole (its pieces joined once, not re-copied)."""
    pending: list[str] = []
    while chunk := stream.read(size):
        cut = chunk.rfind("\n") + 1
        if not cut:
            pending.append(chunk)
            continue
        if pending:
            pending.append(chunk[:cut])
            yield "".join(pending)
            pending = []
        else:
            yield chunk[:cut]
        if cut < len(chunk):
            pending.append(chunk[cut:])
    if pending:
        yield "".join(pending)


def objects(
    paths: list[str],
    *,
    keep: Callable[[str], bool] | None = None,
    placeholders: bool = False,
    strip: bool = False,
    as_written: bool = False,
) -> Iterator[tuple[Item, Any]]:
    """Every object of every snapshot file, one at a time. ``keep(text)`` False skips an item
    unparsed (yielded as ``(item, None)`` with ``placeholders``, so it can still be counted).

    Raises :class:`SnapshotError` on the first thing that cannot be read: a snapshot is the cluster,
    and an audit that silently lost part of it would report a clean cluster that is not. ``strip``:
    parse items :func:`without_system_blocks` (the judging pass). ``as_written``: ``keep`` is asked about
    each item's text as written, not dedented (:func:`kept`)."""
    for source in read_sources(paths):
        yield from _source_objects(source, keep, placeholders, strip, as_written)


def objects_unparsed(paths: list[str], keep: Callable[[str], bool] | None) -> Iterator[tuple[Item, bool]]:
    """:func:`objects` without the parsing: every item with whether ``keep`` wants it parsed
    (:func:`parse_item` parses it, e.g. in a worker process)."""
    for source in read_sources(paths):
        yield from source_items(source, keep)


def _source_chunks(source: Source) -> Iterator[Item]:
    """The file's items, its text read in blocks straight from the file object (no per-line
    bookkeeping: a snapshot has millions of lines); stdin (spooled) by its lines, as ``check`` reads
    it, which reports a bad byte at its line."""
    if source.path is None or source.spool is not None:
        yield from _chunks(source.lines(), source.name)
        return
    try:
        stream = source.path.open(encoding="utf-8-sig", newline="")
    except OSError as exc:
        raise ReadError(0, f"cannot read: {exc.strerror or exc}") from None
    with stream:
        yield from _block_chunks(_blocks(stream), source.name)


_CONTEXT_WORDS = ("Namespace", "Node", "ResourceClaim", "DeviceClass", "ComputeDomain")


def may_be_context(text: str) -> bool:
    """Whether an item may be a context object (Namespaces, Nodes, claim templates, claims, DeviceClasses), by a
    text test first (a substring, then ``check``'s own regex): the first pass parses only those."""
    return any(w in text for w in _CONTEXT_WORDS) and mentions_context(text)


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
    source: Source, keep: Callable[[str], bool] | None, placeholders: bool, strip: bool, as_written: bool = False
) -> Iterator[tuple[Item, Any]]:
    for item, kept in source_items(source, keep, as_written):
        if not kept:
            if placeholders:
                yield item, None
            continue
        yield from parse_item(item, source.name, strip)


def source_items(
    source: Source, keep: Callable[[str], bool] | None, as_written: bool = False
) -> Iterator[tuple[Item, bool]]:
    """The items of one snapshot file, unparsed, each with whether to parse it (``keep``; an item that
    does not even start like a mapping is always parsed, so it is reported). Split from the parsing
    (:func:`parse_item`) so that a process pool can parse and judge while this process reads."""
    if source.error:
        raise SnapshotError(f"{source.name}: {source.error}")
    if source.empty:
        raise SnapshotError(f"{source.name}: {source.empty}")
    try:
        for item in _source_chunks(source):
            yield item, keep is None or kept(item, keep, as_written)
    except ReadError as exc:
        raise SnapshotError(f"{source.name}:{exc.line}: {exc.message}") from None
    except UnicodeDecodeError as exc:
        byte = exc.object[exc.start]
        raise SnapshotError(f"{source.name}: not UTF-8 (byte 0x{byte:02x}); save it as UTF-8") from None
    except OSError as exc:
        raise SnapshotError(f"{source.name}: cannot read: {exc.strerror or exc}") from None


def kept(item: Item, keep: Callable[[str], bool], as_written: bool = False) -> bool:
    """Whether to parse ``item``: ``keep`` wants it, or it does not even start like a mapping (it is
    parsed so that its error is reported).

    ``as_written``: both are asked about the item's text as written, not dedented, which spares the
    dedent (a copy of the item: a third of the context pass). Dedenting only removes the spaces that
    start each line of an item of a List (``Item.indent``), so for a ``keep`` made of substrings and
    patterns that need no line start (the context pass's ``may_be_context`` and the grant's name), and
    for ``_MAPPING`` (whose ``\\s*`` takes leading spaces), the answer is the same;
    ``tests/audit/test_audit_snapshot.py`` compares the two on every item it splits."""
    text = item.raw if as_written else item.text
    return keep(text) or not _MAPPING.match(text)


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

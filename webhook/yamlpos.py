"""YAML with positions: load a document fast, and find the line of any field path only when needed.

The libyaml composer gives every node a start mark. Loading through the composer costs little more
than a plain load, and keeping the node tree lets errors name ``file:line:column`` for the exact field
(``spec.minMember``) rather than just the document.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from webhook.yaml_events import EventBuilder

try:  # libyaml: an order of magnitude faster; the pure-Python loader is the fallback.
    _Loader: type = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - depends on how PyYAML was built
    _Loader = yaml.SafeLoader


class _NoDuplicatesLoader(_Loader):  # type: ignore[misc, valid-type]
    """Duplicate mapping keys silently keep the last value in PyYAML; in a policy that hides a mistake."""


@dataclass(frozen=True, slots=True)
class Position:
    line: int  # 1-based
    column: int  # 1-based

    def __str__(self) -> str:
        return f"{self.line}:{self.column}"


@dataclass(slots=True)
class Document:
    """One YAML document: its data, its composed node tree and where it starts in the source."""

    data: Any
    node: yaml.Node | None
    line: int  # 1-based line of the document's first content
    text: str  # the document's source text, verbatim

    def position(self, path: Sequence[str | int]) -> Position:
        """Position of the deepest existing node on ``path`` (a missing key points at its parent)."""
        if self.node is None:
            return Position(self.line, 1)
        pos = locate(self.node, path, default=Position(1, 1))
        return Position(pos.line + self.line - 1, pos.column)

    def ensure_nodes(self) -> Document:
        """Compose the node tree on demand: the fast path (``check``) loads data only."""
        if self.node is None and self.text:
            self.node = compose_node(self.text)
        return self


@dataclass(frozen=True, slots=True)
class SyntaxProblem:
    """A YAML syntax error, with its position in the whole file (libyaml marks are read-only)."""

    line: int
    column: int
    problem: str


def locate(node: yaml.Node | None, path: Sequence[str | int], default: Position) -> Position:
    best = default
    if node is not None:
        best = Position(node.start_mark.line + 1, node.start_mark.column + 1)
    for part in path:
        if isinstance(node, yaml.MappingNode):
            found = None
            for key_node, value_node in node.value:
                if key_node.value == str(part):
                    found = (key_node, value_node)
                    break
            if found is None:
                return best
            key_node, node = found
            best = Position(key_node.start_mark.line + 1, key_node.start_mark.column + 1)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            node = node.value[part]
            best = Position(node.start_mark.line + 1, node.start_mark.column + 1)
        else:
            return best
    return best


def duplicate_keys(
    node: yaml.Node | None, path: tuple[str | int, ...] = ()
) -> Iterator[tuple[tuple, Position]]:
    """Mapping keys that appear twice: PyYAML would silently keep the last one."""
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = key_node.value
            if key in seen:
                yield (*path, key), Position(key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            seen.add(key)
            yield from duplicate_keys(value_node, (*path, key))
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            yield from duplicate_keys(item, (*path, index))


def _is_separator(line: str) -> bool:
    return (line.startswith("---") and (len(line) == 3 or line[3] in " \t\r\n")) or (
        line.startswith("...") and (len(line) == 3 or line[3] in " \t\r\n")
    )


def split_documents(text: str) -> list[tuple[int, str]]:
    """Split a multi-document stream into (first line, text) chunks, keeping every byte.

    A ``---`` or ``...`` at column 0 always ends a document in YAML (even inside a block scalar),
    so splitting on lines is exact. Keeping each chunk verbatim lets ``check -o yaml`` reprint an
    untouched document byte for byte, comments included.
    """
    return list(iter_chunks(text.splitlines(keepends=True)))


def iter_chunks(lines: Iterable[str]) -> Iterator[tuple[int, str]]:
    """:func:`split_documents` over lines as they are read: one document in memory at a time."""
    start_line, current = 1, []
    number = 0
    for number, line in enumerate(lines, start=1):
        if _is_separator(line):
            yield start_line, "".join(current)
            rest = line[3:]
            if rest.strip() and not rest.lstrip().startswith("#") and line.startswith("---"):
                current, start_line = [" " * 3 + rest], number  # '--- value' on one line
            else:
                current, start_line = [], number + 1
            continue
        current.append(line)
    yield start_line, "".join(current)


_SEPARATOR = re.compile(r"(?:---|\.\.\.)(?=[ \t\r\n]|\Z)")
"""A line :func:`_is_separator` accepts, at the start of a block of whole lines."""
_NEXT_SEPARATOR = re.compile(r"\n(?:---|\.\.\.)(?=[ \t\r\n]|\Z)")
"""The same after a line's end (a literal ``\\n`` first: five times faster than ``^`` in MULTILINE mode)."""


def iter_block_chunks(blocks: Iterable[str]) -> Iterator[tuple[int, str]]:
    """:func:`iter_chunks` over blocks of whole lines (each ends with ``\\n``, but the last may not):
    the same (first line, text) chunks, found with one regex search per separator instead of a test
    per line. ``check``'s main process splits every input this way (``Source.blocks``)."""
    start_line, parts = 1, []
    number = 0  # the lines before the current block
    for block in blocks:
        pos = 0  # where the current document's text resumes in this block
        counted, lines = 0, number  # ``lines``: the lines before offset ``counted``
        starts = [m.start() + 1 for m in _NEXT_SEPARATOR.finditer(block)]
        for at in [0, *starts] if _SEPARATOR.match(block) else starts:
            lines += block.count("\n", counted, at)
            counted = at
            parts.append(block[pos:at])
            yield start_line, "".join(parts)
            eol = block.find("\n", at)
            pos = len(block) if eol < 0 else eol + 1
            line, here = block[at:pos], lines + 1
            rest = line[3:]
            if rest.strip() and not rest.lstrip().startswith("#") and line.startswith("---"):
                parts, start_line = [" " * 3 + rest], here  # '--- value' on one line
            else:
                parts, start_line = [], here + 1
        parts.append(block[pos:])
        number += block.count("\n")
    yield start_line, "".join(parts)


def compose(text: str) -> tuple[Any, yaml.Node | None]:
    """Parse one document into (data, node tree); raises ``yaml.YAMLError`` with a mark."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()
    return data, node


def compose_node(text: str) -> yaml.Node | None:
    """The node tree of one document only, for positions: its data (which :func:`compose` also builds,
    a third of the cost) is what the caller already loaded. Raises ``yaml.YAMLError`` as ``compose``."""
    loader = _Loader(text)
    try:
        return loader.get_single_node()
    finally:
        loader.dispose()


_events = EventBuilder(_Loader)


def load_standard(text: str) -> Any:
    """PyYAML's own load of one document: the reference :func:`load_fast` must equal."""
    return yaml.load(text, Loader=_Loader)


def load_fast(text: str) -> Any:
    """Data only: the hot path of ``check`` when no position is needed.

    Built from the parser's events (:mod:`webhook.yaml_events`, about twice as fast on a manifest); a
    document with anything that builder leaves alone (anchors, tags, merge keys...) and *every* error
    go through the standard load instead, so the result, the exception and its marks are PyYAML's.
    """
    try:
        return _events.load(text)
    except Exception:  # Unusual, a syntax error, an invalid date: PyYAML decides, and raises its own
        return load_standard(text)


def has_content(text: str) -> bool:
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#") and not stripped.startswith("%"):
            return True
    return False


class ExpansionLimit(yaml.YAMLError):
    """A document whose aliases expand past the budget, or refer to themselves (see :func:`expansion`)."""

    def __init__(self, problem: str, mark: Any) -> None:
        super().__init__(problem)
        self.problem = problem
        self.problem_mark = mark
        self.context = None


MAX_EXPANDED = 4_000_000
"""Characters a document may expand to through its aliases (scalars as written, 2 per collection).

kubectl sends a manifest as JSON with every alias written out, and the apiserver refuses a request
body over 3 MiB; a document that expands past ~4 M characters could never be applied, while a
"billion laughs" of a few hundred bytes expands to gigabytes and would stall ``check``. Documents
without anchors (``&``) cannot alias and are not counted at all.
"""


def expansion(root: yaml.Node, limit: int = MAX_EXPANDED) -> int:
    """The size of ``root`` with every alias written out, without writing it out.

    Shared nodes are sized once (memoised), so the cost is linear in the composed graph even when
    the expansion is exponential. Raises :class:`ExpansionLimit` past ``limit`` or on a recursive
    alias (``&a [*a]``: PyYAML builds a cyclic object, which every walker of the object loops on).
    """
    sizes: dict[int, int] = {}
    active: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            active.discard(key)
            if isinstance(node, yaml.ScalarNode):
                total = 2 + len(node.value)
            elif isinstance(node, yaml.MappingNode):
                total = 2 + sum(sizes[id(k)] + sizes[id(v)] for k, v in node.value)
            else:
                total = 2 + sum(sizes[id(child)] for child in node.value)
            if total > limit:
                raise ExpansionLimit(
                    f"YAML aliases expand this document past {limit:,} characters (a document kubectl "
                    "could apply stays under 3 MiB); write the values out instead of aliasing them",
                    node.start_mark,
                )
            sizes[key] = total
            continue
        if key in sizes:
            continue
        if key in active:
            raise ExpansionLimit(
                "recursive YAML alias: this node contains an alias of itself; no Kubernetes object "
                "can be cyclic, remove the alias",
                node.start_mark,
            )
        active.add(key)
        stack.append((node, True))
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                stack.append((k, False))
                stack.append((v, False))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((child, False) for child in node.value)
    return sizes[id(root)]


def compose_bounded(text: str, limit: int = MAX_EXPANDED) -> tuple[Any, yaml.Node | None]:
    """:func:`compose` that checks the alias expansion before constructing anything."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is not None:
            expansion(node, limit)
        data = loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()
    return data, node


def iter_documents(text: str, *, with_nodes: bool) -> Iterator[Document | SyntaxProblem]:
    """Documents of a stream; a syntax error is yielded in place so the other documents still count.

    Positions are kept relative to each chunk and offset by the chunk's first line on lookup.
    """
    return iter_chunk_documents(split_documents(text), with_nodes=with_nodes)


def iter_chunk_documents(
    chunks: Iterable[tuple[int, str]], *, with_nodes: bool
) -> Iterator[Document | SyntaxProblem]:
    """:func:`iter_documents` over (first line, text) chunks, e.g. :func:`iter_chunks` of a file.

    Every document is loaded with its alias expansion bounded (:data:`MAX_EXPANDED`): only a
    document that declares an anchor can alias, so the common case pays nothing for the check.
    """
    for line, chunk in chunks:
        if not has_content(chunk):
            continue
        try:
            if with_nodes or "&" in chunk:
                data, node = compose_bounded(chunk)
                if not with_nodes:
                    node = None
            else:
                data, node = load_fast(chunk), None
        except yaml.YAMLError as exc:
            yield syntax_problem(exc, line, chunk)
            continue
        except ValueError as exc:  # a plain scalar YAML reads as a date or time that is none (2026-13-01)
            yield SyntaxProblem(line, 1, f"invalid value in this document: {exc} (dates are YYYY-MM-DD)")
            continue
        yield Document(data=data, node=node, line=line, text=chunk)


def syntax_problem(exc: yaml.YAMLError, line: int, chunk: str = "") -> SyntaxProblem:
    """The error at its place in the whole file: libyaml's marks count from the chunk's first line."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    if isinstance(exc, yaml.reader.ReaderError) and chunk:  # a character YAML forbids: no mark, an offset
        before = chunk[: exc.position]
        row = before.count("\n")
        char = exc.character if isinstance(exc.character, int) else ord(str(exc.character)[:1] or "\0")
        return SyntaxProblem(
            line + row,
            exc.position - (before.rfind("\n") + 1) + 1,
            f"{exc.reason} (character U+{char:04X}); YAML allows no control characters but tab, CR and LF",
        )
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    context = getattr(exc, "context", None)
    began = getattr(exc, "context_mark", None)
    if context and began is not None and mark is not None and (began.line, began.column) != (mark.line, mark.column):
        # where the mapping (or key, or flow collection) started: the mistake is often there, not at the mark
        context = f"{context} that began at line {began.line + line}, column {began.column + 1}"
    if context:
        problem = f"{problem} ({context})"
    return SyntaxProblem(
        (mark.line + line) if mark is not None else line,
        (mark.column + 1) if mark is not None else 1,
        problem,
    )

"""Explicit JSON Patch operations, built next to a copy-on-write view of the object.

Every mutation step asks for an effect ("this label must be there", "append this toleration") and the
builder writes the smallest RFC 6902 operation that achieves it against the object *as it stands after
the earlier steps*: a missing parent map is added whole, an existing one never replaced; values are
escaped per RFC 6901. The working copy shares every untouched subtree with the input (only the
containers on a changed path are copied), so building the mutated object costs O(changes), not
O(object) — this is on the admission hot path.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

Path = Sequence[str | int]


def escape(part: str | int) -> str:
    """RFC 6901: ``~`` becomes ``~0`` first, then ``/`` becomes ``~1``."""
    return str(part).replace("~", "~0").replace("/", "~1")


@lru_cache(maxsize=4096)
def _pointer(path: tuple[str | int, ...]) -> str:
    return "".join("/" + escape(p) for p in path)


def pointer(path: Path) -> str:
    """The JSON Pointer of ``path``. Cached: every review of a kind writes the same few dozen paths,
    and escaping them part by part was a visible share of the patch cost. The cache is bounded, so
    odd keys from hostile objects cannot grow it."""
    return _pointer(tuple(path))


_MISSING = object()


class PatchBuilder:
    """Records operations and keeps ``doc`` equal to ``source`` with those operations applied.

    Copy on write is tracked in a trie of the containers this builder owns (copied on first
    write), keyed by path part: ``_tree[part] = (container, subtree)``. Writing below an owned
    container walks the trie with one ``dict.get`` per level instead of re-reading and re-checking
    the document, which made every operation pay for the depth of its path (a container's
    ``resources.limits`` is seven levels down in a Volcano task). Operations that take a value away
    (``replace``, ``remove``) prune the trie below it, so it never names a container that is no
    longer in ``doc``.
    """

    __slots__ = ("_rooted", "_tree", "doc", "ops")

    def __init__(self, source: dict[str, Any]):
        self.doc: dict[str, Any] = source
        self.ops: list[dict[str, Any]] = []
        self._rooted = False
        self._tree: dict[str | int, tuple[Any, dict[Any, Any]]] = {}

    # --- reading ---------------------------------------------------------------------------------

    def get(self, path: Path, default: Any = None) -> Any:
        node: Any = self.doc
        for part in path:
            if type(node) is dict or isinstance(node, dict):  # the exact-type test is the fast common case
                node = node.get(part, _MISSING)  # type: ignore[call-overload]
                if node is _MISSING:
                    return default
            elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
                node = node[part]
            else:
                return default
        return node

    def _chain(self, path: tuple[str | int, ...]) -> list[Any]:
        """The values along ``path`` from the root, as far as the path resolves (``get`` semantics):
        ``chain[i]`` is the value at ``path[:i]``; ``len(chain) == len(path) + 1`` when it all exists."""
        node: Any = self.doc
        chain = [node]
        for part in path:
            if isinstance(node, dict):
                node = node.get(part, _MISSING)  # type: ignore[call-overload]
                if node is _MISSING:
                    break
            elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
                node = node[part]
            else:
                break
            chain.append(node)
        return chain

    def exists(self, path: Path) -> bool:
        return self.get(path, _MISSING) is not _MISSING

    # --- copy on write ---------------------------------------------------------------------------

    def _root(self) -> dict[str, Any]:
        if not self._rooted:
            self.doc = dict(self.doc)
            self._rooted = True
        return self.doc

    def _own(self, path: Path) -> Any:
        """Return the container at ``path`` (which must exist), copying it and its ancestors on
        first write. The general path: any container type, any key."""
        node: Any = self._root()
        tree = self._tree
        for part in path:
            entry = tree.get(part)
            if entry is None:
                child = node[part]
                child = dict(child) if isinstance(child, dict) else list(child)
                node[part] = child
                entry = tree[part] = (child, {})
            node, tree = entry
        return node

    def _descend(self, path: tuple[str | int, ...]) -> tuple[Any, dict[Any, Any], int]:
        """Walk towards ``path``'s parent, owning (copying on first write) every container on the
        way: ``(node, trie node, depth)``, where ``node`` is the owned container at ``path[:depth]``.
        ``depth == len(path) - 1`` when the parent was reached; less when the next part is missing
        or is not a container.

        One walk that copies as it goes: writes nearly always follow, so finding the parent, owning
        it and (when a map on the way is missing) knowing where to add it are done together. A walk
        that leads nowhere may leave some ancestors copied; ``doc`` is still equal to what the
        operations so far produce. Exact ``dict``/``list`` types only (what JSON and YAML give);
        anything else stops the walk and takes the general path."""
        node: Any = self.doc if self._rooted else self._root()
        tree = self._tree
        last = len(path) - 1
        i = 0
        while i < last:  # the owned prefix: one lookup per level
            entry = tree.get(path[i])
            if entry is None:
                break
            node, tree = entry
            i += 1
        while i < last:  # the rest: read, check, copy, remember
            part = path[i]
            if type(node) is dict:
                child = node.get(part, _MISSING)  # type: ignore[call-overload]
            elif type(node) is list and type(part) is int and 0 <= part < len(node):
                child = node[part]
            else:
                break
            kind = type(child)
            if kind is dict:
                child = dict(child)
            elif kind is list:
                child = list(child)
            else:
                break
            node[part] = child
            sub: dict[Any, Any] = {}
            tree[part] = (child, sub)
            node, tree = child, sub
            i += 1
        return node, tree, i

    def _add_below(self, node: Any, path: tuple[str | int, ...], depth: int, value: Any) -> bool:
        """When map ``node`` (owned, at ``path[:depth]``) lacks ``path[depth]`` and the rest of the
        path is map keys: add the missing maps and ``value`` as one operation. False otherwise."""
        key = path[depth]
        if type(node) is not dict or type(key) is not str or key in node:
            return False
        rest = path[depth + 1 :]
        nested: Any = value
        for part in reversed(rest):
            if type(part) is not str:
                return False
            nested = {part: nested}
        self.ops.append({"op": "add", "path": pointer(path[: depth + 1]), "value": nested})
        node[key] = nested
        return True

    def _forget(self, path: tuple[str | int, ...]) -> None:
        """Drop the trie below ``path`` after its value was replaced or removed. When ``path`` is a
        list item, the whole list's subtree goes: removing an item shifts the indices after it. A
        list index *on the way* to a map key shifts nothing, so what is owned there stays owned:
        dropping it made every later write below the same container copy it again (removing n
        resource keys from one container cost O(n²))."""
        tree = self._tree
        last = len(path) - 1
        for i, part in enumerate(path):
            if i == last:
                if type(part) is int:
                    tree.clear()
                else:
                    tree.pop(part, None)
                return
            entry = tree.get(part)
            if entry is None:
                return
            tree = entry[1]

    # --- operations ------------------------------------------------------------------------------

    def set(self, path: Path, value: Any, *, overwrite: bool = False) -> bool:
        """Ensure ``path`` holds ``value``; create missing parent maps. Returns True if an op was added.

        With ``overwrite=False`` an existing value is left alone (the user's choice wins).
        """
        path = tuple(path)
        node, tree, depth = self._descend(path)
        if depth == len(path) - 1 and type(node) is dict:  # the usual case: the parent map is there
            key = path[-1]
            if type(key) is not str:
                raise ValueError(f"cannot set {pointer(path)}: a map key must be a string")
            current = node.get(key, _MISSING)
            if current is _MISSING:
                self.ops.append({"op": "add", "path": pointer(path), "value": value})
                node[key] = value
                return True
            if not overwrite or current == value:
                return False
            self.ops.append({"op": "replace", "path": pointer(path), "value": value})
            node[key] = value
            tree.pop(key, None)
            return True
        if self._add_below(node, path, depth, value):  # parent maps missing: added with the value
            return True
        chain = self._chain(path)  # one walk serves the lookup, the parent search and the parent check
        if len(chain) > len(path):
            current = chain[-1]
            if not overwrite or current == value:
                return False
            self.ops.append({"op": "replace", "path": pointer(path), "value": value})
            self._own(path[:-1])[path[-1]] = value
            self._forget(path)
            return True
        # Find the deepest existing container; everything below it is added as one nested value.
        # (chain[d] is the value at path[:d]; every value before the last one is a container, since
        # the walk went through it.)
        depth = len(chain) - 1
        if depth > 0 and not isinstance(chain[depth], dict | list):
            depth -= 1
        nested: Any = value
        for part in reversed(path[depth + 1 :]):
            if isinstance(part, int):
                raise ValueError(f"cannot create list index {part} in {pointer(path)}")
            nested = {part: nested}
        target = path[: depth + 1]
        parent = chain[depth]
        if not isinstance(parent, dict):
            raise ValueError(f"parent of {pointer(target)} is not a map")
        if not isinstance(target[-1], str):
            raise ValueError(f"cannot set {pointer(target)}: a map key must be a string")
        self.ops.append({"op": "add", "path": pointer(target), "value": nested})
        self._own(target[:-1])[target[-1]] = nested
        self._forget(target)
        return True

    def append(self, path: Path, value: Any) -> None:
        """Append to the list at ``path``, creating the list (and missing parents) if absent."""
        self.extend(path, (value,))

    def extend(self, path: Path, values: Sequence[Any]) -> None:
        """Append ``values`` in order: one operation that adds the whole list when there is none yet
        (the usual case on a fresh template), else one ``/-`` operation per value."""
        if not values:
            return
        path = tuple(path)
        node, tree, depth = self._descend(path)
        if depth == len(path) - 1 and type(node) is dict:  # the usual case: one walk for all values
            key = path[-1]
            current = node.get(key, _MISSING)
            if type(current) is list:
                if tree.get(key) is None:
                    current = node[key] = list(current)
                    tree[key] = (current, {})
                at = pointer(path) + "/-"
                for value in values:
                    self.ops.append({"op": "add", "path": at, "value": value})
                    current.append(value)
                return
        if self._add_below(node, path, depth, list(values)):  # no list yet: add it whole
            return
        for value in values:
            self._append_general(path, value)

    def _append_general(self, path: tuple[str | int, ...], value: Any) -> None:
        """Any container types, a null where the list should be, a list inside a list."""
        current = self.get(path, _MISSING)
        if current is _MISSING or current is None:
            if current is None:
                self.ops.append({"op": "replace", "path": pointer(path), "value": [value]})
                self._own(path[:-1])[path[-1]] = [value]
                self._forget(path)
            else:
                self.set(path, [value])
            return
        if not isinstance(current, list):
            raise ValueError(f"{pointer(path)} is not a list")
        self.ops.append({"op": "add", "path": pointer(path) + "/-", "value": value})
        self._own(path).append(value)

    def remove(self, path: Path) -> bool:
        path = tuple(path)
        if not self.exists(path):
            return False
        self.ops.append({"op": "remove", "path": pointer(path)})
        del self._own(path[:-1])[path[-1]]
        self._forget(path)
        return True

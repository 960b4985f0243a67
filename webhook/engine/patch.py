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
    """Records operations and keeps ``doc`` equal to ``source`` with those operations applied."""

    __slots__ = ("_owned", "doc", "ops")

    def __init__(self, source: dict[str, Any]):
        self.doc: dict[str, Any] = source
        self.ops: list[dict[str, Any]] = []
        self._owned: set[int] = set()

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

    def _own(self, path: Path) -> Any:
        """Return the container at ``path``, copying it and its ancestors on first write."""
        owned = self._owned
        node: Any = self.doc
        if id(node) not in owned:
            node = self.doc = dict(node)
            owned.add(id(node))
        for part in path:
            child = node[part]
            if id(child) not in owned:
                child = dict(child) if type(child) is dict or isinstance(child, dict) else list(child)
                node[part] = child
                owned.add(id(child))
            node = child
        return node

    def _owned_parent(self, path: tuple[str | int, ...]) -> dict[str, Any] | None:
        """The map that holds ``path``'s last part, owned (copied on first write), or None when a
        container on the way is missing or the parent is not a map.

        One walk that copies as it goes: ``set`` nearly always writes, so finding the parent and
        owning it are done together instead of in two walks. A path that does not resolve may leave
        some ancestors copied; ``doc`` is still equal to what the operations so far produce.
        Exact ``dict``/``list`` types only (what JSON and YAML give); anything else takes the
        general path in ``set``."""
        owned = self._owned
        node: Any = self.doc
        if id(node) not in owned:
            node = self.doc = dict(node)
            owned.add(id(node))
        for i in range(len(path) - 1):
            part = path[i]
            if type(node) is dict:
                child = node.get(part, _MISSING)  # type: ignore[call-overload]
            elif type(node) is list and type(part) is int and 0 <= part < len(node):
                child = node[part]
            else:
                return None
            kind = type(child)
            if kind is not dict and kind is not list:
                return None
            if id(child) not in owned:
                child = dict(child) if kind is dict else list(child)
                node[part] = child
                owned.add(id(child))
            node = child
        return node if type(node) is dict else None

    # --- operations ------------------------------------------------------------------------------

    def set(self, path: Path, value: Any, *, overwrite: bool = False) -> bool:
        """Ensure ``path`` holds ``value``; create missing parent maps. Returns True if an op was added.

        With ``overwrite=False`` an existing value is left alone (the user's choice wins).
        """
        path = tuple(path)
        parent = self._owned_parent(path)
        if parent is not None:  # the usual case: the parent map is there; one walk, already owned
            key = path[-1]
            if type(key) is not str:
                raise ValueError(f"cannot set {pointer(path)}: a map key must be a string")
            current = parent.get(key, _MISSING)
            if current is _MISSING:
                self.ops.append({"op": "add", "path": pointer(path), "value": value})
                parent[key] = value
                return True
            if not overwrite or current == value:
                return False
            self.ops.append({"op": "replace", "path": pointer(path), "value": value})
            parent[key] = value
            return True
        chain = self._chain(path)  # one walk serves the lookup, the parent search and the parent check
        if len(chain) > len(path):
            current = chain[-1]
            if not overwrite or current == value:
                return False
            self.ops.append({"op": "replace", "path": pointer(path), "value": value})
            self._own(path[:-1])[path[-1]] = value
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
        return True

    def append(self, path: Path, value: Any) -> None:
        """Append to the list at ``path``, creating the list (and missing parents) if absent."""
        path = tuple(path)
        parent = self._owned_parent(path)
        if parent is not None and type(parent.get(path[-1])) is list:  # the usual case: one walk
            current = parent[path[-1]]
            if id(current) not in self._owned:
                current = parent[path[-1]] = list(current)
                self._owned.add(id(current))
            self.ops.append({"op": "add", "path": pointer(path) + "/-", "value": value})
            current.append(value)
            return
        current = self.get(path, _MISSING)
        if current is _MISSING or current is None:
            if current is None:
                self.ops.append({"op": "replace", "path": pointer(path), "value": [value]})
                self._own(path[:-1])[path[-1]] = [value]
            else:
                self.set(path, [value])
            return
        if not isinstance(current, list):
            raise ValueError(f"{pointer(path)} is not a list")
        self.ops.append({"op": "add", "path": pointer(path) + "/-", "value": value})
        self._own(path).append(value)

    def extend(self, path: Path, values: Sequence[Any]) -> None:
        """Append ``values`` in order: one operation that adds the whole list when there is none yet
        (the usual case on a fresh template), else one ``/-`` operation per value."""
        if not values:
            return
        path = tuple(path)
        current = self.get(path, _MISSING)
        if current is _MISSING:
            self.set(path, list(values))
            return
        for value in values:
            self.append(path, value)

    def remove(self, path: Path) -> bool:
        path = tuple(path)
        if not self.exists(path):
            return False
        self.ops.append({"op": "remove", "path": pointer(path)})
        del self._own(path[:-1])[path[-1]]
        return True

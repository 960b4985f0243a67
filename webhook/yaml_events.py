"""Build a plain YAML document's data straight from the parser's events, skipping PyYAML's composer.

Why: ``check`` loads every document with ``yaml.load(text, Loader=CSafeLoader)``. libyaml's events
cost about a third of that; the rest is PyYAML's Python composer (a node per value) and constructor
(a generator per collection, a resolver call per scalar). A Kubernetes manifest needs none of what
those layers exist for (anchors, tags, merge keys), so for such a document the events are turned
into dicts, lists and scalars directly: about twice as fast per document.

Exactness comes from delegation and refusal, not from a second implementation of YAML:

* a plain scalar's tag comes from the loader's own ``resolve`` (its implicit resolvers), and its
  value from the loader's own scalar constructor for that tag (``construct_yaml_int``, ``_float``,
  ``_bool``, ``_null``, ``_timestamp``, ``_str``), so ``0x1F``, ``1_000``, ``1:30``, ``.inf``, ``on``
  or ``2001-12-14t21:59:43.10-05:00`` read exactly as PyYAML reads them; a quoted or block scalar is
  a ``str``, as the resolver says;
* anything else raises :class:`Unusual`, and the caller loads the text the standard way: an anchor,
  an alias, an explicit tag, ``%`` directives, a merge key ``<<``, a value key ``=`` (any tag other
  than the six above), a collection used as a mapping key, or a second document.

The caller (:func:`webhook.yamlpos.load_fast`) also re-runs the standard load on *any* exception,
syntax errors included, so an error is always the one PyYAML raises, with its marks and its order
(PyYAML composes the whole document before it constructs anything; this builder constructs as it
goes, so it would meet an invalid date before a syntax error further down).
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.events import (
    AliasEvent,
    DocumentEndEvent,
    DocumentStartEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
    StreamStartEvent,
)

_SCALAR_TAGS = frozenset(
    f"tag:yaml.org,2002:{name}" for name in ("null", "bool", "int", "float", "timestamp", "str")
)
"""The tags the builder constructs; a plain scalar that resolves to another (``<<``: merge, ``=``:
value, ``!``/``&``/``*``: yaml) needs PyYAML's mapping logic or its error, so it is :class:`Unusual`."""

_CACHE_LIMIT = 8192
"""Plain scalars remembered per loader: a manifest stream repeats its keys and most of its values
(``apiVersion``, ``name``, ``nvidia.com/gpu``, ``1``), and a resolution is several regexp matches.
Cleared when full, so a stream of unique values costs a bounded dict."""


class Unusual(Exception):
    """The document uses a YAML feature this builder leaves to PyYAML's standard load."""


class EventBuilder:
    """Loads one-document texts through ``loader``'s events; results equal ``yaml.load(text, Loader=loader)``.

    ``loader`` must be a PyYAML loader class built on ``SafeConstructor`` (``CSafeLoader`` or
    ``SafeLoader``): its resolver and scalar constructors are borrowed, not copied, so a loader with
    other implicit resolvers or scalar constructors is followed automatically. A loader with path
    resolvers (which make a tag depend on where a scalar sits) is refused at construction.
    """

    def __init__(self, loader: type) -> None:
        if not issubclass(loader, yaml.constructor.SafeConstructor):
            raise TypeError(f"{loader.__name__} does not construct with SafeConstructor")
        if loader.yaml_path_resolvers:  # type: ignore[attr-defined]
            raise TypeError(f"{loader.__name__} has path resolvers: a scalar's tag depends on its place")
        self.loader = loader
        probe = loader("")  # an instance only for its resolve() and constructors; they keep no state for scalars
        probe.dispose()
        self._probe = probe
        self._resolve = probe.resolve
        self._constructors = {tag: loader.yaml_constructors[tag] for tag in _SCALAR_TAGS}  # type: ignore[attr-defined]
        self._plain: dict[str, Any] = {}

    def plain(self, value: str) -> Any:
        """A plain (unquoted, untagged) scalar as the loader constructs it; raises ``ValueError`` on
        a value its constructor refuses (a timestamp such as ``2001-13-45``) and :class:`Unusual` on a
        tag outside :data:`_SCALAR_TAGS`."""
        cache = self._plain
        try:
            return cache[value]
        except KeyError:
            pass
        tag = self._resolve(yaml.ScalarNode, value, (True, False))
        if tag not in _SCALAR_TAGS:
            raise Unusual(f"plain scalar {value!r} resolves to {tag}")
        result = self._constructors[tag](self._probe, yaml.ScalarNode(tag, value))
        # Sharing one result per spelling is safe: scalars are immutable, and PyYAML itself returns
        # one shared NaN object (SafeConstructor.nan_value), so two ``.nan`` keys are one key in both.
        if len(cache) >= _CACHE_LIMIT:
            cache.clear()
        cache[value] = result
        return result

    def load(self, text: str) -> Any:
        """The data of the single document in ``text`` (``None`` for an empty stream).

        Raises :class:`Unusual` for what PyYAML must load itself, and lets the parser's errors and
        the scalar constructors' ``ValueError`` through; the caller then re-runs the standard load.
        """
        parser = self.loader(text)
        try:
            return self._build(parser.get_event)
        finally:
            parser.dispose()

    def _build(self, get: Any) -> Any:
        if type(get()) is not StreamStartEvent:  # pragma: no cover - every parser starts with one
            raise Unusual("no stream start")
        event = get()
        if type(event) is StreamEndEvent:
            return None
        if type(event) is not DocumentStartEvent or event.version is not None or event.tags:
            raise Unusual("directives")  # %YAML / %TAG: PyYAML's own handling (and warnings)
        plain = self.plain
        stack: list[Any] = []  # the open collections above ``current``, outermost first
        current: Any = None  # the innermost open collection (None: at the document's root)
        key: Any = _NO_KEY  # in a mapping: the key read, whose value comes next
        root: Any = None
        while True:
            event = get()
            kind = type(event)
            if kind is ScalarEvent:
                if event.anchor is not None or event.tag is not None:
                    raise Unusual("anchor or tag")
                value = plain(event.value) if event.implicit[0] else event.value
            elif kind is MappingStartEvent or kind is SequenceStartEvent:
                if event.anchor is not None or event.tag is not None:
                    raise Unusual("anchor or tag")
                if key is _NO_KEY and type(current) is dict:
                    raise Unusual("a collection as a mapping key")
                value = {} if kind is MappingStartEvent else []
                if current is None:
                    root = value
                elif type(current) is dict:
                    current[key] = value
                else:
                    current.append(value)
                stack.append(current)  # its pending key, if any, is consumed: collections are never keys
                current, key = value, _NO_KEY
                continue
            elif kind is MappingEndEvent or kind is SequenceEndEvent:
                current, key = stack.pop(), _NO_KEY
                if current is None:
                    break
                continue
            elif kind is DocumentEndEvent:
                break  # a bare scalar document (a collection root breaks out above)
            elif kind is AliasEvent:
                raise Unusual("alias")
            else:  # pragma: no cover - the parser sends nothing else inside a document
                raise Unusual(f"unexpected {kind.__name__}")
            if current is None:
                root = value
            elif type(current) is dict:
                if key is _NO_KEY:
                    key = value
                else:
                    current[key] = value
                    key = _NO_KEY
            else:
                current.append(value)
        if kind is not DocumentEndEvent and type(get()) is not DocumentEndEvent:
            raise Unusual("document does not end after its root")  # pragma: no cover - parser order
        if type(get()) is not StreamEndEvent:
            raise Unusual("more than one document")  # PyYAML: "expected a single document"
        return root


class _NoKey:
    """The absence of a pending mapping key (``None`` is a valid key: ``~: x``)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<no key>"


_NO_KEY: Any = _NoKey()

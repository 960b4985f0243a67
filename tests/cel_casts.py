"""cel-python's evaluator without the typing work it repeats on every step of every evaluation.

cel-python 0.5 writes ``cast(Union[Result, NameContainer], value)``, ``cast(Tuple[Result, Result], ...)`` and
nested functions annotated ``Iterable[Match[str]]`` inside its evaluator's hot paths. Each subscription goes
through typing's cache, which hashes the whole ``Result`` union (a frozenset of a dozen generic aliases)
every time: about a quarter of the emulated apiserver's time (cProfile of
``tests/intree/test_differential.py::test_gang_jobs``, the suite's slowest test).

``cast`` returns its value whatever its first argument, and in ``celpy.evaluation`` the replaced names are
read at run time only as ``cast`` targets and annotations: the module-level aliases (``Result``,
``Annotation``) were built at import, and its ``isinstance`` checks use ``Mapping`` and ``Sequence``, which
stay (``celpy.celtypes`` is left alone: it tests ``isinstance(source, Iterable)``, and is not hot). So
the names are rebound to one object whose subscription is free. Values, errors and evaluation order are
unchanged: the emulations judge exactly as before, faster.
"""

from __future__ import annotations

import inspect
import re
from functools import cache
from typing import Any

import celpy.evaluation

# in celpy.evaluation, read at run time only inside cast(...) and nested functions' annotations (cel-python 0.5)
_CAST_ONLY = ("Dict", "Iterable", "Iterator", "List", "Match", "Optional", "Tuple", "Type", "Union")


class _FreeSubscript:
    """``X[...]`` is ``object``: what ``cast`` and an annotation need, at no cost."""

    def __getitem__(self, _: Any) -> type:
        return object


_FREE = _FreeSubscript()


@cache
def free_casts() -> None:
    """Rebind cel-python's cast-only typing names (once; every module using celpy calls it).

    A name a later cel-python tests with ``isinstance``/``issubclass`` keeps its typing meaning."""
    source = inspect.getsource(celpy.evaluation)
    for name in _CAST_ONLY:
        tested = re.search(rf"(isinstance|issubclass)\([^)]*\b{name}\b", source)
        if hasattr(celpy.evaluation, name) and not tested:
            setattr(celpy.evaluation, name, _FREE)

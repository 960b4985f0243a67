"""pydantic validation errors as a platform engineer wants to read them: one per mistake, with a hint.

Shared by the policy loader and the policy-test suite loader, which both map each error to the YAML
``file:line:column`` of its location. ``did you mean`` hints come from walking the model classes to
the level where the unknown field sits.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError


@dataclass(frozen=True, slots=True)
class FieldError:
    loc: tuple[str | int, ...]
    message: str
    hint: str = ""


def field_errors(model: type[BaseModel], exc: ValidationError) -> Iterator[FieldError]:
    errors = exc.errors()
    locs = [tuple(p for p in e["loc"] if p != "[key]") for e in errors]
    unknown = {loc for loc, e in zip(locs, errors, strict=True) if e["type"] == "extra_forbidden"}
    nested = {loc[:i] for loc in locs for i in range(1, len(loc))}
    for loc, err in zip(locs, errors, strict=True):
        if err["type"] == "missing" and any(
            u[:-1] == loc[:-1] and difflib.SequenceMatcher(None, str(u[-1]), str(loc[-1])).ratio() >= 0.75
            for u in unknown
        ):
            continue  # 'gpusPerNod' is one mistake (a typo), not two: the unknown field's hint says it all
        if err["type"] == "too_short" and loc in nested:
            continue  # "at least 1 item" only repeats that the item itself is invalid
        message, hint = err["msg"], ""
        if err["type"] == "extra_forbidden":
            parent = model_at(model, loc[:-1])
            fields = [f.alias or n for n, f in parent.model_fields.items()] if parent is not None else []
            match = difflib.get_close_matches(str(loc[-1]), fields, n=1, cutoff=0.5)
            message = f"unknown field {loc[-1]!r}"
            hint = f"did you mean {match[0]!r}?" if match else (f"valid fields: {', '.join(fields)}" if fields else "")
        elif err["type"] == "missing":
            message = f"required field {loc[-1]!r} is missing"
        elif err["type"] in ("literal_error", "enum"):
            message = f"{err['msg']} (got {err.get('input')!r})"
        elif message.startswith("Value error, "):
            message = message[len("Value error, ") :]
        elif "input" in err and not isinstance(err["input"], dict):
            message = f"{message} (got {_shown(err['input'])})"  # a type error names what was written
        yield FieldError(loc, message, hint)


def _shown(value: Any, limit: int = 60) -> str:
    """The bad value as the user wrote it, cut short: a type error must echo it, not flood the line."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 1]}…"


def model_at(model: type[BaseModel], loc: Sequence[Any]) -> type[BaseModel] | None:
    """Follow an error location through the model classes (for 'did you mean' hints)."""
    current: Any = model
    for part in loc:
        current = _unwrap(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            by_alias = {(f.alias or n): f for n, f in current.model_fields.items()}
            fld = by_alias.get(str(part))
            if fld is None:
                return None
            current = fld.annotation
            continue
        origin, args = typing.get_origin(current), typing.get_args(current)
        if origin in (dict, typing.Mapping) and args:
            current = args[1]
        elif origin in (tuple, list) and args:
            current = args[0]
        else:
            return None
    current = _unwrap(current)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _unwrap(annotation: Any) -> Any:
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            models = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
            annotation = models[0] if models else args[0]
        else:
            return annotation


def dotted(path: Sequence[Any]) -> str:
    """``spec.pools.p.mig.profiles[0]``: how errors name a field."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + str(part)
    return out

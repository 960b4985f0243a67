"""Kubernetes resource quantities (``4Gi``, ``500m``, ``1e3``) parsed exactly, as the apiserver does.

Exact rationals matter here: the apiserver rejects ``0.5`` of an extended resource because it is not
whole, and GPU memory is compared against profile sizes, so float rounding would give wrong answers.
"""

from __future__ import annotations

import re
from fractions import Fraction
from functools import lru_cache

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY = re.compile(
    r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
)
MAX_QUANTITY_LENGTH = 64
"""Longer text is not a quantity anyone means (the largest, ``9223372036854775807Ei``, has 21
characters) and ``Fraction``/``int`` refuse numbers of more than 4300 digits with a plain ValueError."""
MIB = 2**20
GIB = 2**30


class QuantityError(ValueError):
    """A value that is not a Kubernetes quantity; the message says what a valid one looks like."""


_NEAR_MISS = re.compile(r"^([0-9]+(?:\.[0-9]+)?)\s*([KkMmGgTtPpEe])(?:i?[Bb]|i)?$")


def _did_you_mean(text: str) -> str:
    """The quantity a common typo meant: ``4GB``/``4gb``/``4 GiB``/``4gi`` -> ``4Gi`` (or ``4G``)."""
    match = _NEAR_MISS.match(text)
    if not match:
        return "examples: 4Gi, 4096Mi, 20G, 1, 500m"
    number, letter = match.group(1), match.group(2).upper()
    binary, decimal = f"{number}{letter}i", f"{number}{'k' if letter == 'K' else letter}"
    return f"did you mean {binary} (or {decimal}, decimal)?"


@lru_cache(maxsize=4096)
def _parse_text(text: str) -> Fraction:
    if len(text) > MAX_QUANTITY_LENGTH:
        raise QuantityError(
            f"{text[:20]!r}… ({len(text)} characters) is not a Kubernetes quantity: at most "
            f"{MAX_QUANTITY_LENGTH} characters (examples: 4Gi, 4096Mi, 20G, 1, 500m)"
        )
    match = _QUANTITY.match(text)
    if not match:
        raise QuantityError(f"{text!r} is not a Kubernetes quantity; {_did_you_mean(text)}")
    number, suffix = match.group(1), match.group(2) or ""
    value = Fraction(number)
    if suffix in _BINARY:
        return value * _BINARY[suffix]
    if suffix and suffix[0] in "eE":
        exponent = int(suffix[1:])
        if abs(exponent) > 30:
            raise QuantityError(f"{text!r}: exponent out of range")
        return value * Fraction(10) ** exponent
    return value * _DECIMAL[suffix]


def parse_quantity(value: object) -> Fraction:
    """Parse a quantity given as YAML may deliver it: a string, an int or a float."""
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is a boolean, not a quantity")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise QuantityError(f"{value!r} is not a finite quantity")
        return Fraction(str(value))
    if isinstance(value, str):
        return _parse_text(value.strip())
    raise QuantityError(f"{value!r} is a {type(value).__name__}, not a quantity")


def is_whole(value: Fraction) -> bool:
    return value.denominator == 1


def format_bytes(value: int | Fraction) -> str:
    """Human form used in messages: the largest binary unit that keeps the number readable."""
    value = Fraction(value)
    for unit, size in (("Gi", GIB), ("Mi", MIB), ("Ki", 1024)):
        if value >= size:
            amount = value / size
            if amount.denominator == 1:
                return f"{amount.numerator}{unit}"
            return f"{float(amount):.1f}{unit}"
    return f"{int(value)}"


def ceil_div(value: Fraction, unit: int) -> int:
    """Round up to whole units (GiB for cGPU/qGPU, MiB for HAMi/vGPU)."""
    quotient = value / unit
    return -((-quotient.numerator) // quotient.denominator)

"""Kubernetes resource.Quantity parsing and canonical formatting.

Quantities appear in device capacity (``capacity[name].value``), counters (``sharedCounters``,
``consumesCounters``), capacity requests and request policies. They are kept as exact ``Fraction``s
so sums and comparisons never lose precision (upstream uses inf.Dec / int64 scaled values).

Grammar (k8s.io/apimachinery/pkg/api/resource): ``<sign><digits>[.<digits>]<suffix>`` where suffix is a
binary SI (Ki Mi Gi Ti Pi Ei), decimal SI (n u m "" k M G T P E) or decimal exponent (e3 / E3).
The grammar allows any length; this parser refuses more than ``MAX_DIGITS`` digits or a decimal exponent
beyond ``MAX_EXPONENT`` (far outside any real capacity or resource request), so a crafted quantity such
as ``1e20000000`` costs nothing and is a clear error rather than a huge number.
"""

from __future__ import annotations

import functools
import re
from fractions import Fraction
from functools import total_ordering

__all__ = [
    "MAX_DIGITS",
    "MAX_EXPONENT",
    "Quantity",
    "QuantityError",
    "format_like",
    "format_quantity",
    "parse_quantity",
]

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
MAX_DIGITS = 1000
MAX_EXPONENT = 1000
_PATTERN = re.compile(r"^([+-]?)(\d+(?:\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$")


class QuantityError(ValueError):
    """The text is not a valid Kubernetes quantity."""


@total_ordering
class Quantity:
    """An exact quantity: ``value`` is a Fraction in base units; ``text`` is how it was written."""

    __slots__ = ("text", "value")

    def __init__(self, value: Fraction | int, text: str | None = None) -> None:
        self.value = Fraction(value)
        self.text = text if text is not None else format_quantity(self.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and self.value == other.value

    def __lt__(self, other: Quantity) -> bool:
        return self.value < other.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f"Quantity({self.text!r})"

    def __add__(self, other: Quantity) -> Quantity:
        return Quantity(self.value + other.value)

    def __sub__(self, other: Quantity) -> Quantity:
        return Quantity(self.value - other.value)


def parse_quantity(raw: object) -> Quantity:
    """Parse a quantity from YAML/JSON (a string, or a bare int/float as YAML may give); equal texts give
    the same (immutable) object, as capacities and counters repeat on every device.

    Raises QuantityError naming the text when it is not a valid quantity.
    """
    if isinstance(raw, str):
        return _parse_text(raw)
    return _parse(raw)


@functools.lru_cache(maxsize=4096)
def _parse_text(raw: str) -> Quantity:
    return _parse(raw)


def _parse(raw: object) -> Quantity:
    if isinstance(raw, Quantity):
        return raw
    if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
        raise QuantityError(f"quantity must be a string or number, got {type(raw).__name__}")
    text = str(raw).strip() if not isinstance(raw, float) else repr(raw)
    match = _PATTERN.match(text)
    if match is None:
        raise QuantityError(f"invalid quantity {text!r}")
    sign, number, suffix = match.groups()
    exponent = "0" if suffix is None or suffix in _DECIMAL or suffix in _BINARY else suffix[1:]
    if len(number) > MAX_DIGITS or len(exponent) > 6 or abs(int(exponent)) > MAX_EXPONENT:
        shown = text if len(text) <= 40 else f"{text[:37]}..."
        raise QuantityError(
            f"invalid quantity {shown!r}: more than {MAX_DIGITS} digits or a decimal exponent beyond "
            f"±{MAX_EXPONENT}"
        )
    value = Fraction(number)
    if suffix is None or suffix in _DECIMAL:
        value *= _DECIMAL[suffix or ""]
    elif suffix in _BINARY:
        value *= _BINARY[suffix]
    else:
        value *= Fraction(10) ** int(exponent)
    if sign == "-":
        value = -value
    return Quantity(value, str(raw) if isinstance(raw, str) else text)


def format_like(value: Fraction, like: Quantity) -> str:
    """Text for ``value`` in the suffix family of ``like`` (binary when written with Ki/Mi/..., else
    decimal SI), as Kubernetes keeps a quantity's format through arithmetic."""
    return format_quantity(value, binary=like.text.rstrip().endswith("i"))


def format_quantity(value: Fraction, binary: bool = True) -> str:
    """Canonical text for a value: binary suffix when exact (if allowed), else decimal SI, else milli."""
    if value.denominator == 1:
        number = value.numerator
        if number != 0:
            for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki") if binary else ():
                if number % _BINARY[suffix] == 0:
                    return f"{number // _BINARY[suffix]}{suffix}"
            for suffix in ("E", "P", "T", "G", "M", "k"):
                scale = _DECIMAL[suffix].numerator
                if number % scale == 0:
                    return f"{number // scale}{suffix}"
        return str(number)
    for suffix in ("m", "u", "n"):
        scaled = value / _DECIMAL[suffix]
        if scaled.denominator == 1:
            return f"{scaled.numerator}{suffix}"
    nano = -((-value.numerator * 10**9) // value.denominator)
    return f"{nano}n"

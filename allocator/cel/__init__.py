"""CEL selector evaluation for DeviceClass and request selectors (``CELDeviceSelector``).

The allocator talks to an engine only through ``CELEngine.compile`` / ``SelectorProgram.evaluate`` (a
selector: bool) and ``CELEngine.compile_value`` / ``ValueProgram.evaluate`` (a derived attribute, KEP-6080:
an ``AttributeValue``), so engines are interchangeable (the default is Google's C++ runtime via
cel-expr-python).

The single variable is ``device`` (upstream ``dynamic-resource-allocation/cel/compile.go``):
``device.driver`` (string), ``device.attributes[domain][id]`` (bool, int, string, semver; lists with
DRAListTypeAttributes), ``device.capacity[domain][id]`` (Quantity), ``device.allowMultipleAllocations``
(bool). A domain the device does not have is an empty map; a missing id in a present domain is a
runtime error. Attributes without a domain are filed under the driver's domain by the caller.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from allocator.quantity import Quantity

if TYPE_CHECKING:
    from allocator.cel.reads import Reads

__all__ = [
    "CEL_MAX_COST",
    "CEL_MAX_EXPRESSION_LENGTH",
    "AttributeValue",
    "CELDevice",
    "CELEngine",
    "SelectorProgram",
    "ValueProgram",
    "Version",
]

CEL_MAX_EXPRESSION_LENGTH = 10 * 1024
"""``CELSelectorExpressionMaxLength`` in resource.k8s.io/v1 (characters)."""

CEL_MAX_COST = 1_000_000
"""``CELSelectorExpressionMaxCost``: the most a selector or derived attribute expression may cost
(estimated at API validation, tracked at run time)."""


@dataclass(frozen=True, slots=True)
class Version:
    """A ``version`` attribute value: semver 2.0.0 text, compared as a semver in CEL."""

    text: str


AttributeValue = (
    bool | int | str | Version | tuple[bool, ...] | tuple[int, ...] | tuple[str, ...] | tuple[Version, ...]
)


@dataclass(frozen=True, slots=True, weakref_slot=True, eq=False)
class CELDevice:
    """What a selector sees of one device. Built once per device revision by the inventory.

    Compared and hashed by identity, and weak-referenceable, so an engine may cache its own
    converted form of the device (e.g. in a ``WeakKeyDictionary``).
    """

    driver: str
    attributes: Mapping[str, Mapping[str, AttributeValue]]
    capacity: Mapping[str, Mapping[str, Quantity]]
    allow_multiple_allocations: bool = False


class SelectorProgram(Protocol):
    """One compiled selector expression."""

    expression: str
    reads: Reads | None
    """The device keys it reads (``allocator.cel.reads``), or None when they cannot be told."""
    estimated_cost: int
    """cel-go's estimated cost, as Kubernetes' API validation computes it (``allocator.cel.cost``)."""

    def evaluate(self, device: CELDevice) -> bool:
        """True if the device matches. Raises CELEvalError (message without the device identity)."""
        ...


class ValueProgram(Protocol):
    """One compiled derived-attribute expression (KEP-6080): same environment as a selector."""

    expression: str
    reads: Reads | None
    estimated_cost: int

    def evaluate(self, device: CELDevice) -> AttributeValue:
        """The value: bool, int, str, ``Version`` or a tuple of one of them (a semver result becomes a
        ``Version`` with canonical text). Raises CELEvalError (runtime error, cost limit, a result of another
        type, a mixed-type or nested list), message without the device identity."""
        ...


class CELEngine(Protocol):
    """A CEL implementation of the DRA selector environment."""

    name: str
    program_bytes_per_char: int
    """Estimated memory of a compiled program per character of its expression (measured: a 9,856-char
    expression grows the process by 1.18 MiB on cel-expr, 5.97 MiB on cel-python)."""

    def compile(self, expression: str) -> SelectorProgram:
        """Compile once. Raises CELCompileError for syntax/type errors, non-bool results, > 10 Ki text."""
        ...

    def compile_value(self, expression: str) -> ValueProgram:
        """Compile a derived attribute expression. Raises CELCompileError for syntax/type errors, > 10 Ki
        text, or a result type that is not string, int, bool, semver, a list of those, or dyn."""
        ...

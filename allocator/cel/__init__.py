"""CEL selector evaluation for DeviceClass and request selectors (``CELDeviceSelector``).

The allocator talks to an engine only through ``CELEngine.compile`` and ``SelectorProgram.evaluate``,
so engines are interchangeable (the default is Google's C++ runtime via cel-expr-python).

The single variable is ``device`` (upstream ``dynamic-resource-allocation/cel/compile.go``):
``device.driver`` (string), ``device.attributes[domain][id]`` (bool, int, string, semver; lists with
DRAListTypeAttributes), ``device.capacity[domain][id]`` (Quantity), ``device.allowMultipleAllocations``
(bool). A domain the device does not have is an empty map; a missing id in a present domain is a
runtime error. Attributes without a domain are filed under the driver's domain by the caller.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from allocator.quantity import Quantity

__all__ = [
    "CEL_MAX_COST",
    "CEL_MAX_EXPRESSION_LENGTH",
    "AttributeValue",
    "CELDevice",
    "CELEngine",
    "SelectorProgram",
    "Version",
]

CEL_MAX_EXPRESSION_LENGTH = 10 * 1024
"""``CELSelectorExpressionMaxLength`` in resource.k8s.io/v1 (characters)."""

CEL_MAX_COST = 1_000_000
"""``CELSelectorExpressionMaxCost``: runtime cost budget of one evaluation."""


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

    def evaluate(self, device: CELDevice) -> bool:
        """True if the device matches. Raises CELEvalError (message without the device identity)."""
        ...


class CELEngine(Protocol):
    """A CEL implementation of the DRA selector environment."""

    name: str

    def compile(self, expression: str) -> SelectorProgram:
        """Compile once. Raises CELCompileError for syntax/type errors, non-bool results, > 10 Ki text."""
        ...

"""What a compiled DRA expression reads of a device, so results can be keyed by those values.

A selector's outcome is a function of the device data it reads. When every use of ``device.attributes``
and ``device.capacity`` in the checked tree is a constant lookup (``device.attributes["gpu.nvidia.com"]
.productName``, ``device.attributes["d"]["id"]``, ``has(device.attributes["d"].id)``, or the whole map
of one constant domain, e.g. ``"x" in device.attributes["d"]``), the outcome depends only on the values
at those keys (plus ``device.driver`` and ``device.allowMultipleAllocations``, always part of the key), so
every device with the same values gets the same result: ``device.attributes["gpu.nvidia.com"]
.productName == "H100"`` is evaluated once for every H100 of a cluster, not once per device.

An expression that reaches the maps any other way (iteration, ``in device.attributes``, a computed key,
an alias through ``cel.bind`` or a comprehension, the optional ``[?key]`` form) reads an unknown part of
the device: ``device_reads`` answers None and the caller keeps results per device.

Values are keyed with their type (``1`` and ``true`` are equal in Python but not in CEL), capacities by
exact value and text (``string(quantity)`` could tell ``1Gi`` from ``1024Mi``). Parsed devices always
convert to an engine's form (versions and int64 ranges are validated when a ResourceSlice is parsed), so
nothing outside the read keys can make an evaluation fail.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from allocator.cel import AttributeValue, CELDevice, Version
from allocator.cel.checked import CheckedAst, Expr
from allocator.quantity import Quantity

__all__ = ["MISSING", "Reads", "attribute_key", "device_reads", "value_key"]

_MAPS = {"device.attributes": "attributes", "device.capacity": "capacity"}

MISSING = ("missing",)
"""Stands for a domain or id the device does not have (a lookup of it fails or tests false in CEL)."""


@dataclass(frozen=True, slots=True)
class Reads:
    """The device keys an expression reads: ``(map, domain, id)`` with map ``attributes`` or ``capacity``;
    id None when the expression reads the domain's whole map. Sorted, so the key order is fixed."""

    keys: tuple[tuple[str, str, str | None], ...]


def device_reads(ast: CheckedAst) -> Reads | None:
    """The keys the checked expression reads, or None when it reaches the maps in a way not keyed by
    constants (module docstring)."""
    parents: dict[int, Expr] = {}
    for node in ast.root.walk():
        for child in node.children():
            parents[child.id] = node
    keys: set[tuple[str, str, str | None]] = set()
    for node in ast.root.walk():
        if node.kind != "ident":
            continue
        name = ast.references.get(node.id, node.name)
        kind = _MAPS.get(name)
        if kind is None:
            continue
        domain_use = parents.get(node.id)
        domain = _constant_key(domain_use, node) if domain_use is not None else None
        if domain is None or domain_use is None:
            return None
        id_use = parents.get(domain_use.id)
        ident = _constant_key(id_use, domain_use) if id_use is not None else None
        keys.add((kind, domain, ident))
    return Reads(tuple(sorted(keys, key=lambda k: (k[0], k[1], k[2] is None, k[2] or ""))))


def _constant_key(use: Expr, target: Expr) -> str | None:
    """The constant key ``use`` looks up in ``target`` (``target[<string>]``, ``target.<name>`` or
    ``has(target.<name>)``), or None when ``use`` is anything else."""
    if use.kind == "select" and use.operand is target:
        return use.name
    if (
        use.kind == "call"
        and use.name == "_[_]"
        and use.args
        and len(use.args) == 2
        and use.args[0] is target
    ):
        key = use.args[1]
        if key.kind == "const" and isinstance(key.value, str):
            return key.value
    return None


def attribute_key(value: AttributeValue | None) -> object:
    """An attribute value with its type, hashable (``MISSING`` for None)."""
    if value is None:
        return MISSING
    if isinstance(value, tuple):
        return ("list", tuple(attribute_key(v) for v in value))
    if isinstance(value, Version):
        return ("version", value.text)
    return (type(value).__name__, value)


def _capacity_key(value: Quantity | None) -> object:
    return MISSING if value is None else ("quantity", value.value, value.text)


def _domain_key(values: Mapping[str, object] | None, capacity: bool) -> object:
    if values is None:
        return MISSING
    convert = _capacity_key if capacity else attribute_key
    # The domain's values are quantities exactly when ``capacity`` (the caller's map).
    return tuple(sorted((name, convert(v)) for name, v in values.items()))  # type: ignore[arg-type]


def value_key(device: CELDevice, reads: Reads) -> tuple[object, ...]:
    """What ``reads`` sees of ``device``: equal keys give equal results of the expression."""
    key: list[object] = [device.driver, device.allow_multiple_allocations]
    attributes, capacities = device.attributes, device.capacity
    for kind, domain, ident in reads.keys:
        capacity = kind == "capacity"
        values = (capacities if capacity else attributes).get(domain)
        if ident is None:
            key.append(_domain_key(values, capacity))
        elif values is None:
            key.append(MISSING)
        elif capacity:
            # A capacity domain maps to quantities (``values`` is typed for both maps).
            key.append(_capacity_key(values.get(ident)))  # type: ignore[arg-type]
        else:
            value = values.get(ident)
            # Inline ``attribute_key`` for scalars: this runs once per device and expression.
            key.append(
                attribute_key(value) if value is None or type(value) is tuple else (type(value), value)
            )
    return tuple(key)

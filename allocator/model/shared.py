"""Parts of parsed devices held once for alike devices (one model on every node publishes equal attribute
values, attribute maps and descriptions), in bounded tables that start over when full."""

from __future__ import annotations

from collections.abc import Hashable
from typing import TypeVar

from allocator.cel import AttributeValue, Version
from allocator.cel.reads import attribute_key

__all__ = [
    "MAX_SHARED_DESCRIPTIONS",
    "MAX_SHARED_DOMAINS",
    "MAX_SHARED_VALUES",
    "shared_description",
    "shared_domain",
    "shared_value",
]

MAX_SHARED_VALUES = 4096
"""Distinct string and ``version`` attribute values held once (``shared_value``)."""

MAX_SHARED_DOMAINS = 4096
"""Distinct per-domain attribute maps held once (``shared_domain``)."""

MAX_SHARED_DESCRIPTIONS = 4096
"""Distinct device descriptions (``Device.description``) held once."""

_K = TypeVar("_K", bound=Hashable)
_V = TypeVar("_V")
_VALUES: dict[str | Version, str | Version] = {}
_DOMAINS: dict[tuple[object, ...], dict[str, AttributeValue]] = {}
_DESCRIPTIONS: dict[bytes, bytes] = {}


def shared_value(value: AttributeValue) -> AttributeValue:
    """Alike devices (one model on every node) publish equal values: each is held once, at most
    ``MAX_SHARED_VALUES`` of them (a bounded table, not ``sys.intern``: unique values, uuids and serials,
    would each cost an entry for nothing)."""
    if type(value) is not str and type(value) is not Version:
        return value
    return _held_once(_VALUES, value, value, MAX_SHARED_VALUES)


def shared_domain(values: dict[str, AttributeValue]) -> dict[str, AttributeValue]:
    """One map for every device with these values of one domain (read-only; what differs between alike
    devices, a uuid or a PCIe root, is usually in a domain of its own or in a few distinct values), at most
    ``MAX_SHARED_DOMAINS`` of them."""
    key = tuple((name, attribute_key(value)) for name, value in values.items())
    return _held_once(_DOMAINS, key, values, MAX_SHARED_DOMAINS)


def shared_description(digest: bytes) -> bytes:
    """One ``Device.description`` object for every device with this digest, at most
    ``MAX_SHARED_DESCRIPTIONS`` of them."""
    return _held_once(_DESCRIPTIONS, digest, digest, MAX_SHARED_DESCRIPTIONS)


def _held_once(table: dict[_K, _V], key: _K, value: _V, limit: int) -> _V:
    """What ``table`` holds for ``key``, else ``value``, remembered (the table starts over at ``limit``)."""
    held = table.get(key)
    if held is None:
        if len(table) >= limit:
            table.clear()
        held = table[key] = value
    return held
